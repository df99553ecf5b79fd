"""The async engine: the same URLs, settings and errors as the sync store, async drivers.

One URL serves both APIs; each picks its own driver for the database it names.
``sqlite:///file.db`` runs on aiosqlite (a statement one trip to its thread:
:mod:`chatkeep.aio.sqlite_driver`). ``postgresql://...`` runs on asyncpg, which
spends less CPU per statement than psycopg's async connection (``bench/async_load.py``
shows both); a URL naming psycopg (``postgresql+psycopg://``) keeps psycopg's async
connection (so does SQLAlchemy's spelling of it, ``postgresql+psycopg_async://``);
``postgres://`` (what many hosts put in ``DATABASE_URL``) is PostgreSQL. asyncpg takes
no libpq ``options``: the ``-c name=value`` settings a URL carries there
(``options=-csearch_path%3Dtenant_7``) become its ``server_settings``.
SQLite gets the sync store's settings (WAL, ``synchronous``, busy timeout, foreign keys,
``BEGIN IMMEDIATE`` for writes); PostgreSQL pings a connection that sat idle before
using it. Connections are pooled per event loop (:mod:`chatkeep.aio.pools`),
so one engine serves every loop a keep is used from.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from chatkeep.aio.pools import LoopPools
from chatkeep.aio.sqlite_driver import one_trip_dbapi
from chatkeep.config import SQLITE_SYNCHRONOUS
from chatkeep.errors import StoreError
from chatkeep.store.engine import (
    READ_ONLY,
    SQLITE_BUSY_TIMEOUT_MS,
    apply_sqlite_pragmas,
    autocommit_engine_options,
    describe_url,
    parse_url,
    ping_when_idle,
    prepared_statements_in_force,
    sqlite_path,
    unprepared_connect_args,
)

_ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}
_KEPT_DRIVERS = {"postgresql": ("psycopg", "asyncpg")}
"""Drivers a URL may name for the async API (others get the backend's default)."""
_HINTS = {"aiosqlite": "pip install 'chatkeep[aio]'", "asyncpg": "pip install 'chatkeep[aio]'",
          "psycopg": "pip install 'chatkeep[postgres]'"}


def async_url(url: str | URL) -> URL:
    """``url`` with the async driver the async API runs it on: aiosqlite for SQLite;
    for PostgreSQL the driver the URL names if it is psycopg or asyncpg, else asyncpg."""
    named = _named_driver(url)
    parsed = parse_url(url)
    backend = parsed.get_backend_name()
    driver = named if named in _KEPT_DRIVERS.get(backend, ()) else _ASYNC_DRIVERS[backend]
    return parsed.set(drivername=f"{backend}+{driver}")


def _named_driver(url: str | URL) -> str:
    """The driver ``url`` names as written ("" for none: SQLAlchemy's default for the
    backend is not a choice the URL made)."""
    try:
        named = (url if isinstance(url, URL) else make_url(url)).drivername.partition("+")[2]
    except (ArgumentError, ValueError, TypeError):
        return ""  # parse_url says what is wrong with it
    # SQLAlchemy's own spelling of psycopg's async connection names psycopg.
    return "psycopg" if named == "psycopg_async" else named


def server_settings(options: str) -> dict[str, str]:
    """libpq's ``options`` (``-c search_path=a -cwork_mem=8MB --lock_timeout=4s``; a space
    inside a value escaped as ``\\ ``) as asyncpg's ``server_settings``; anything but a
    setting is a ``StoreError``."""
    words = [w.replace("\\ ", " ") for w in re.split(r"(?<!\\)\s+", options.strip()) if w]
    settings: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c" and i + 1 < len(words):
            i += 1
            word = "-c" + words[i]
        elif word.startswith("--"):  # libpq's other spelling of -c name=value
            word = "-c" + word[2:]
        name, equals, value = word[2:].partition("=")
        if not word.startswith("-c") or not equals or not name:
            raise StoreError(f"the URL's options {options!r}: asyncpg takes only "
                             "-c name=value settings there")
        settings[name] = value
        i += 1
    return settings


def async_target(url: str | URL, connect_args: dict[str, Any] | None = None, *,
                 prepared_statements: bool = True) -> tuple[URL, dict[str, Any]]:
    """How the async API connects to ``url``: the URL with its async driver
    (:func:`async_url`) and the driver's ``connect_args``. For asyncpg, the URL's libpq
    ``options`` leave the URL and their ``-c`` settings join ``server_settings`` (one
    given in ``connect_args`` wins); ``connect_args`` itself is not written into. Without
    prepared statements (``prepared_statements=False``, or the URL's
    ``?prepared_statements=false``, which leaves the URL) the driver's arguments say so
    (:func:`~chatkeep.store.engine.unprepared_connect_args`). Also for other code that
    must reach the same database as chatkeep does (a benchmark's peer)."""
    parsed, prepare = prepared_statements_in_force(async_url(url), prepared_statements)
    args = dict(connect_args or {})
    if not prepare:
        unprepared_connect_args(parsed.get_driver_name(), args)
    options = parsed.query.get("options")
    if parsed.get_driver_name() != "asyncpg" or options is None:
        return parsed, args
    from_url = server_settings(" ".join(options) if isinstance(options, tuple) else options)
    args["server_settings"] = {**from_url, **args.get("server_settings", {})}
    return parsed.difference_update_query(["options"]), args


def make_async_engine(url: str | URL, *, sqlite_synchronous: str = "FULL",
                      prepared_statements: bool = True, **kwargs: Any) -> AsyncEngine:
    """An ``AsyncEngine`` for ``url``; every unusable URL is a ``StoreError``, as in sync.
    ``prepared_statements=False``: no driver prepares statements on the server (PgBouncer
    in transaction mode; ``store.prepared_statements``)."""
    parsed, connect_args = async_target(url, kwargs.pop("connect_args", None),
                                        prepared_statements=prepared_statements)
    if connect_args:
        kwargs["connect_args"] = connect_args
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
        module = one_trip_dbapi() if parsed.get_driver_name() == "aiosqlite" else None
        if module is not None:
            kwargs.setdefault("module", module)  # a statement: one trip to its thread
    else:
        autocommit_engine_options(kwargs)
    kwargs.setdefault("poolclass", LoopPools)  # one pool per event loop
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
