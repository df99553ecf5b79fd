"""Engine creation with the settings each backend needs to be safe under concurrency.

SQLite: WAL (readers do not block the writer), a generous busy timeout, foreign
keys on, and ``BEGIN IMMEDIATE`` for every transaction so two processes never
deadlock upgrading a read lock to a write lock. PostgreSQL: ``pool_pre_ping`` so
a connection killed under us (failover, ``pg_terminate_backend``) is replaced
before the next call instead of failing it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from chatkeep.errors import StoreError

SQLITE_BUSY_TIMEOUT_MS = 30_000


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Create an engine for ``url`` (``sqlite:///file.db`` or ``postgresql+psycopg://...``)."""
    try:
        parsed = make_url(url)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a terse message
        raise StoreError(f"not a database URL: {url!r} ({exc})") from exc
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, in_memory=parsed.database in (None, "", ":memory:"), **kwargs)
    if parsed.get_backend_name() == "postgresql":
        if parsed.get_driver_name() in ("", "psycopg2"):
            parsed = parsed.set(drivername="postgresql+psycopg")
        kwargs.setdefault("pool_pre_ping", True)
        try:
            return create_engine(parsed, **kwargs)
        except ModuleNotFoundError as exc:
            raise StoreError(
                'PostgreSQL needs the psycopg driver: pip install "chatkeep[postgres]"'
            ) from exc
    return create_engine(parsed, **kwargs)


def _sqlite_engine(url: str, in_memory: bool, **kwargs: Any) -> Engine:
    if in_memory:
        # One shared connection, or every checkout would see a fresh empty database.
        kwargs.setdefault("poolclass", StaticPool)
        kwargs.setdefault("connect_args", {"check_same_thread": False})
    else:
        kwargs.setdefault("connect_args", {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (pysqlite's implicit BEGIN is DEFERRED).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
