"""``chatkeep db upgrade|downgrade|current|stamp``: the shipped Alembic migrations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

import typer
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from chatkeep.cli.common import (
    DEFAULT_DB,
    DbOption,
    console,
    explain_store_error,
    fail,
    require_existing,
)
from chatkeep.config import Config
from chatkeep.errors import ChatkeepError, StoreError
from chatkeep.store import migrate
from chatkeep.store.connections import store_error
from chatkeep.store.engine import describe_url, make_engine

db_app = typer.Typer(help="Schema migrations.", no_args_is_help=True)
Revision = Annotated[str, typer.Argument(help="Target revision ('head', 'base', or an id).")]
TargetRevision = Annotated[str, typer.Argument(
    help="Target revision ('base' or an id).", show_default=False)]


@contextmanager
def _database(db: str, *, existing: bool = True) -> Iterator[Engine]:
    """An engine for one command; a bad URL, an unreachable server or an unknown revision
    becomes a red message and exit code 1, and the engine is always disposed.
    ``existing``: a missing SQLite file is an error, not a new database (only ``upgrade``
    creates one)."""
    if existing:
        require_existing(db, schema=False)
    engine = None
    try:
        # store.prepared_statements from the environment / CHATKEEP_CONFIG, as the API
        # reads it (behind PgBouncer in transaction mode)
        engine = make_engine(db, prepared_statements=Config.load().store.prepared_statements)
        yield engine
    except ChatkeepError as exc:
        fail(explain_store_error(db, str(exc)) if isinstance(exc, StoreError) else str(exc))
    except SQLAlchemyError as exc:
        fail(explain_store_error(db, f"{describe_url(db)}: "
                                     f"{str(store_error(exc)).removeprefix('database error: ')}"))
    finally:
        if engine is not None:
            engine.dispose()


@db_app.command()
def upgrade(revision: Revision = "head", db: DbOption = DEFAULT_DB) -> None:
    """Apply migrations up to REVISION (default: the newest); creates a SQLite file."""
    with _database(db, existing=False) as engine:
        before = migrate.current(engine)
        migrate.upgrade(engine, revision)
        console.print(f"schema: {before or 'empty'} -> {migrate.current(engine)}")


@db_app.command()
def downgrade(revision: TargetRevision, db: DbOption = DEFAULT_DB) -> None:
    """Revert migrations down to REVISION ('base' drops every chatkeep table)."""
    with _database(db) as engine:
        before = migrate.current(engine)
        migrate.downgrade(engine, revision)
        console.print(f"schema: {before} -> {migrate.current(engine) or 'empty'}")


@db_app.command()
def current(db: DbOption = DEFAULT_DB) -> None:
    """Show the revision the database is at, and the newest this chatkeep ships."""
    with _database(db) as engine:
        revision = migrate.current(engine)
        unknown = revision is not None and revision not in migrate.known_revisions()
        console.print(f"database: {revision or 'not migrated'}"
                      f"{' (unknown here: a newer chatkeep migrated it)' if unknown else ''}"
                      f" · shipped head: {migrate.head_revision()}")


@db_app.command()
def stamp(revision: Revision = "head", db: DbOption = DEFAULT_DB) -> None:
    """Record REVISION as applied without running it (for tables created another way)."""
    with _database(db) as engine:
        migrate.stamp(engine, revision)
        console.print(f"stamped {migrate.current(engine)}")
