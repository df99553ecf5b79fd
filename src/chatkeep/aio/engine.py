"""The async engine: the same URLs, settings and errors as the sync store, async drivers.

``sqlite:///file.db`` runs on aiosqlite and ``postgresql+psycopg://...`` on psycopg's
async connection; a URL already naming them is taken as is. SQLite gets the sync
store's settings (WAL, ``synchronous``, busy timeout, foreign keys, ``BEGIN IMMEDIATE``
for writes); PostgreSQL pings a connection that sat idle before using it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from chatkeep.errors import StoreError
from chatkeep.store.engine import (
    READ_ONLY,
    SQLITE_BUSY_TIMEOUT_MS,
    SQLITE_SYNCHRONOUS,
    apply_sqlite_pragmas,
    autocommit_engine_options,
    describe_url,
    parse_url,
    ping_when_idle,
    sqlite_path,
)

_ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "psycopg"}
_HINTS = {"aiosqlite": "pip install 'chatkeep[aio]'", "psycopg": "pip install 'chatkeep[postgres]'"}


def async_url(url: str | URL) -> URL:
    """``url`` with the async driver of its backend (aiosqlite, psycopg)."""
    parsed = parse_url(url)
    backend = parsed.get_backend_name()
    return parsed.set(drivername=f"{backend}+{_ASYNC_DRIVERS[backend]}")


def make_async_engine(url: str | URL, *, sqlite_synchronous: str = "FULL",
                      **kwargs: Any) -> AsyncEngine:
    """An ``AsyncEngine`` for ``url``; every unusable URL is a ``StoreError``, as in sync."""
    parsed = async_url(url)
    synchronous = str(sqlite_synchronous).upper()
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise StoreError(f"sqlite_synchronous must be one of {', '.join(SQLITE_SYNCHRONOUS)}, "
                         f"got {sqlite_synchronous!r}")
    sqlite = parsed.get_backend_name() == "sqlite"
    in_memory = parsed.database in (None, "", ":memory:")
    path = sqlite_path(parsed)
    if path is not None and not path.expanduser().resolve().parent.is_dir():
        raise StoreError(f"cannot open SQLite database {path}: the folder "
                         f"{path.parent} does not exist")
    if sqlite and in_memory:
        raise StoreError("the async API needs a SQLite file (an in-memory database lives on "
                         "one connection): use sqlite:///path/to/file.db")
    if sqlite:
        # SQLite has one writer at a time: coroutines queue for one connection on the loop
        # instead of many connections spinning in SQLite's busy handler (which made p99
        # seconds long under 16 concurrent turns).
        kwargs.setdefault("pool_size", 1)
        kwargs.setdefault("max_overflow", 0)
        kwargs.setdefault("pool_timeout", SQLITE_BUSY_TIMEOUT_MS / 1000)
    else:
        autocommit_engine_options(kwargs)
    try:
        engine = create_async_engine(parsed, **kwargs)
    except ModuleNotFoundError as exc:
        driver = parsed.get_driver_name()
        raise StoreError(f"{describe_url(parsed)} needs the {exc.name or driver} driver, "
                         f"which is not installed: {_HINTS.get(driver, '')}") from exc
    except (NoSuchModuleError, ArgumentError, TypeError) as exc:
        raise StoreError(f"cannot use {describe_url(parsed)}: {exc}") from exc
    if sqlite:
        _sqlite_settings(engine, synchronous)
    elif not kwargs.get("pool_pre_ping"):
        ping_when_idle(engine.sync_engine)
    return engine


def _sqlite_settings(engine: AsyncEngine, synchronous: str) -> None:
    apply_sqlite_pragmas(engine.sync_engine, synchronous)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Any) -> None:
        # The sync store writes BEGIN straight to pysqlite; aiosqlite's connection is a
        # coroutine API, so here it goes through SQLAlchemy's adapter.
        read_only = conn.get_execution_options().get(READ_ONLY)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")
