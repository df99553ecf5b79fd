"""Alembic environment: runs on the connection chatkeep hands over (see store/migrate.py)."""

from __future__ import annotations

from alembic import context

from chatkeep.errors import ConfigError
from chatkeep.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - chatkeep always passes a connection
    raise ConfigError("run migrations with `chatkeep db upgrade` or chatkeep.store.migrate")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTER needs table rebuilds
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
