"""Schema migrations (Alembic, shipped in the wheel) and the embedded bootstrap.

``upgrade``/``downgrade``/``current`` drive the migrations in
``store/migrations/versions``; ``chatkeep db upgrade`` calls ``upgrade``.
``ensure_schema`` is what ``Chatkeep(url)`` runs: a fresh database gets the
tables created directly and is stamped at head (fast, one round of DDL); a
database stamped at an older revision is upgraded; a database at head is left
alone. Pass ``create_schema=False`` to ``Chatkeep`` to keep upgrades a
deliberate deployment step.

A database stamped at a revision this chatkeep does not ship (a newer version migrated
it, then the deploy was rolled back) is never migrated or read on a guess: every step
here refuses it with a ``StoreError`` naming both revisions (``check_current``).
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from chatkeep.errors import StoreError
from chatkeep.store.connections import begin
from chatkeep.store.schema import metadata

MIGRATIONS = Path(__file__).with_name("migrations")
SCHEMA_LOCK_KEY = 0x636B_7363  # "cksc": chatkeep schema


def alembic_config() -> AlembicConfig:
    """An Alembic config pointing at the shipped scripts (no alembic.ini needed)."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def head_revision() -> str:
    """The newest migration shipped with this version of chatkeep."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


@functools.cache
def known_revisions() -> frozenset[str]:
    """Every migration shipped with this version of chatkeep."""
    script = ScriptDirectory.from_config(alembic_config())
    return frozenset(s.revision for s in script.walk_revisions())


def current(engine: Engine) -> str | None:
    """The revision the database is stamped at (``None`` = never migrated)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def check_current(engine: Engine) -> str | None:
    """``current``, refused with a ``StoreError`` when this chatkeep does not know it."""
    revision = current(engine)
    _check_known(revision)
    return revision


def _check_known(revision: str | None) -> None:
    """Alembic would say "Can't locate revision"; this says what happened and what to do."""
    if revision is None or revision in known_revisions():
        return
    raise StoreError(
        f"newer schema: upgrade this process. The database is at revision {revision!r}, "
        f"which this chatkeep does not know (the newest it ships is {head_revision()!r}): "
        f"a newer chatkeep migrated it. Deploy that version here too, or downgrade the "
        f"database with it first (`chatkeep db downgrade {head_revision()}`)")


def _stamped(conn: Connection) -> str | None:
    """The revision ``conn``'s database is at, checked by ``_check_known``."""
    revision = MigrationContext.configure(conn).get_current_revision()
    _check_known(revision)
    return revision


def _run(conn: Connection, action: str, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = conn
    getattr(command, action)(config, revision)


def _locked(conn: Connection) -> None:
    """Serialise schema work between processes starting at once on one database: an
    advisory lock on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already holds the write lock."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK_KEY})


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply migrations up to ``revision``."""
    with begin(engine) as conn:
        _locked(conn)
        _stamped(conn)
        _run(conn, "upgrade", revision)


def downgrade(engine: Engine, revision: str) -> None:
    """Revert migrations down to ``revision`` (``"base"`` removes every table)."""
    with begin(engine) as conn:
        _locked(conn)
        _stamped(conn)
        _run(conn, "downgrade", revision)


def stamp(engine: Engine, revision: str = "head") -> None:
    """Record ``revision`` as applied without running anything."""
    with begin(engine) as conn:
        _run(conn, "stamp", revision)


def ensure_schema(engine: Engine) -> None:
    """Bring the database to the current schema (see the module docstring), in one
    transaction under the schema lock, so concurrent starters cannot interleave."""
    head = head_revision()
    if current(engine) == head:  # the common case: no lock, no write
        return
    with begin(engine) as conn:
        _locked(conn)
        revision = _stamped(conn)
        if revision == head:
            return
        if revision is not None:
            _run(conn, "upgrade", "head")
            return
        existing = set(inspect(conn).get_table_names()) & set(metadata.tables)
        if existing:
            raise StoreError(
                f"the database has chatkeep tables ({', '.join(sorted(existing))}) but no "
                "migration stamp; run `chatkeep db stamp` if they are current")
        metadata.create_all(conn)
        _run(conn, "stamp", "head")
