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

Alembic is imported only when a migration runs: which revisions ship is read from the
scripts' own ``revision`` / ``down_revision`` lines, and the database's stamp with one
query, so a process whose schema is current (every CLI read command) never loads it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from chatkeep.errors import StoreError
from chatkeep.store.connections import begin
from chatkeep.store.schema import metadata

if TYPE_CHECKING:
    from alembic.config import Config as AlembicConfig

MIGRATIONS = Path(__file__).with_name("migrations")
SCHEMA_LOCK_KEY = 0x636B_7363  # "cksc": chatkeep schema
VERSION_TABLE = "alembic_version"
_LINE = re.compile(r'^(revision|down_revision)\s*(?::[^=]*)?=\s*(?:"([^"]*)"|\'([^\']*)\'|None)',
                   re.MULTILINE)


def alembic_config() -> AlembicConfig:
    """An Alembic config pointing at the shipped scripts (no alembic.ini needed)."""
    from alembic.config import Config as AlembicConfig

    config = AlembicConfig()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@functools.cache
def shipped() -> dict[str, str | None]:
    """Each shipped revision and the one it follows, read from the scripts' own lines
    (``tests/store/test_migrate.py`` checks this against Alembic's reading)."""
    chain: dict[str, str | None] = {}
    for script in sorted((MIGRATIONS / "versions").glob("[0-9]*.py")):
        found = {m.group(1): m.group(2) or m.group(3) for m in _LINE.finditer(script.read_text())}
        if found.get("revision"):
            chain[found["revision"]] = found.get("down_revision")
    return chain


def head_revision() -> str:
    """The newest migration shipped with this version of chatkeep."""
    chain = shipped()
    heads = set(chain) - {down for down in chain.values() if down}
    if len(heads) != 1:
        raise StoreError(f"the shipped migrations have {len(heads)} heads: {sorted(heads)}")
    return heads.pop()


def known_revisions() -> frozenset[str]:
    """Every migration shipped with this version of chatkeep."""
    return frozenset(shipped())


def current(engine: Engine) -> str | None:
    """The revision the database is stamped at (``None`` = never migrated)."""
    with engine.connect() as conn:
        return _stamp_of(conn)


def _stamp_of(conn: Connection) -> str | None:
    """What the version table holds (Alembic's own table, read without Alembic)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(rows) > 1:
        raise StoreError(f"the database is stamped at several revisions: {sorted(rows)}")
    return str(rows[0]) if rows else None


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
    revision = _stamp_of(conn)
    _check_known(revision)
    return revision


def _run(conn: Connection, action: str, revision: str) -> None:
    """Alembic's ``action`` to ``revision`` on ``conn``; what Alembic refuses (an unknown
    revision, say) is a ``StoreError`` saying so."""
    from alembic import command
    from alembic.util import CommandError

    config = alembic_config()
    config.attributes["connection"] = conn
    try:
        getattr(command, action)(config, revision)
    except CommandError as exc:
        raise StoreError(f"migration: {exc}") from exc


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
