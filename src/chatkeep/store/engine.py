"""Engine creation with the settings each backend needs to be safe under concurrency.

SQLite: WAL (readers do not block the writer), ``synchronous`` from
``store.sqlite_synchronous`` (FULL by default: a commit survives power loss), a
generous busy timeout, foreign keys on, and ``BEGIN IMMEDIATE`` for every write
transaction so two processes never deadlock upgrading a read lock to a write lock
(reads begin deferred: a WAL snapshot that never waits for a writer). PostgreSQL:
a connection that sat idle in the pool is pinged before use (``ping_when_idle``), so
one killed under us (failover, ``pg_terminate_backend``) is replaced before the next
call instead of failing it. Behind PgBouncer in transaction pooling mode, no driver may
keep a statement prepared on the server: ``store.prepared_statements = false`` (or the
URL's ``?prepared_statements=false``) turns that off on every driver
(:func:`unprepared_connect_args`; docs/deploy/pgbouncer.md).

Every way a URL can be unusable (not a URL, a database chatkeep does not run on, a
driver that is not installed, an async driver, a SQLite file in a folder that does
not exist) is a ``StoreError`` naming the URL, raised here, before any connection.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, NoSuchModuleError
from sqlalchemy.pool import StaticPool

from chatkeep.config import SQLITE_SYNCHRONOUS
from chatkeep.errors import StoreError

SQLITE_BUSY_TIMEOUT_MS = 30_000
READ_ONLY = "chatkeep_read_only"
"""Execution option of connections that only read: SQLite begins them deferred."""
AUTOCOMMIT_BY_DEFAULT = "AUTOCOMMIT"
"""PostgreSQL engines' connections autocommit from the moment they connect: a turn is mostly
single statements (reads, one-statement appends), which then need no BEGIN and COMMIT and
no isolation switch at each checkout; a transaction switches its connection for the
block (``chatkeep.store.connections.begin``)."""


def autocommit_engine_options(kwargs: dict[str, Any]) -> None:
    """Fill in a PostgreSQL engine's defaults: connections autocommit from connect, and then
    (unless the caller chose another level) the pool skips its rollback on checkin. Nothing
    is left open to roll back: SQLAlchemy's connections end their own transactions when
    they close (and restore the level a transaction switched to), and the direct path ends
    its own or drops the connection; under the async API that rollback was an awaited
    no-op on every checkin."""
    kwargs.setdefault("isolation_level", AUTOCOMMIT_BY_DEFAULT)
    if kwargs["isolation_level"] == AUTOCOMMIT_BY_DEFAULT:
        kwargs.setdefault("pool_reset_on_return", None)

_DRIVERS = {"postgresql": ('psycopg', 'pip install "chatkeep[postgres]"')}

PREPARED_STATEMENTS = "prepared_statements"
"""The URL query parameter saying whether the drivers may prepare statements on the server
(``postgresql://app@pgbouncer:6432/chat?prepared_statements=false``): for that URL it wins
over ``store.prepared_statements``. chatkeep takes it out of the URL (no driver knows it)."""
_SWITCH = {"1": True, "true": True, "yes": True, "on": True,
           "0": False, "false": False, "no": False, "off": False}


def split_prepared_statements(parsed: URL) -> tuple[URL, bool | None]:
    """``parsed`` without its ``prepared_statements`` query parameter, and the parameter's
    value (``None`` when the URL has none); a value that is not a yes or no is a
    ``StoreError`` naming the URL."""
    if PREPARED_STATEMENTS not in parsed.query:
        return parsed, None
    raw = parsed.query[PREPARED_STATEMENTS]
    value = _SWITCH.get(raw.strip().lower()) if isinstance(raw, str) else None
    if value is None:
        raise StoreError(f"{describe_url(parsed)}: {PREPARED_STATEMENTS} must be true or false "
                         f"(1/0, yes/no, on/off), got {raw!r}")
    return parsed.difference_update_query([PREPARED_STATEMENTS]), value


def prepared_statements_in_force(parsed: URL, setting: object) -> tuple[URL, bool]:
    """The URL for the driver and whether statements may be prepared on the server: the
    URL's ``prepared_statements`` when it has one, else ``setting``
    (``store.prepared_statements``; anything but a bool is a ``StoreError``)."""
    if not isinstance(setting, bool):
        raise StoreError(f"prepared_statements must be True or False, got {setting!r}")
    parsed, from_url = split_prepared_statements(parsed)
    return parsed, setting if from_url is None else from_url


def unprepared_connect_args(driver: str, connect_args: dict[str, Any]) -> None:
    """Fill in ``connect_args`` so that ``driver`` prepares nothing that outlives a
    statement's own round trip (what PgBouncer in transaction mode needs): psycopg (sync or
    async) never prepares (``prepare_threshold=None``); asyncpg caches no statement
    (``statement_cache_size=0``: each is sent unnamed and parsed again with its Bind),
    nor does SQLAlchemy's adapter over it (``prepared_statement_cache_size=0``), whose
    statements stay unnamed (a ``prepared_statement_name_func`` is dropped: a named
    statement is closed by a later call, which ends the transaction, so PgBouncer may run
    its execution on another server, where it does not exist). These override what the
    caller passed."""
    if driver == "psycopg":
        connect_args["prepare_threshold"] = None
    elif driver == "asyncpg":
        connect_args["statement_cache_size"] = 0
        connect_args["prepared_statement_cache_size"] = 0
        connect_args.pop("prepared_statement_name_func", None)


def describe_url(url: str | URL) -> str:
    """The URL for messages, password hidden."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError, TypeError):
        return repr(url)


def parse_url(url: object) -> URL:
    """``url`` as a SQLAlchemy URL on a backend chatkeep runs on, or ``StoreError``."""
    if isinstance(url, URL):
        parsed = url
    elif isinstance(url, str):
        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError) as exc:
            raise StoreError(f"not a database URL: {url!r} (expected sqlite:///file.db or "
                             "postgresql+psycopg://user@host/db)") from exc
    else:
        raise StoreError(f"the database URL must be a string, got {type(url).__name__}")
    if parsed.get_backend_name() == "postgres":
        # What many hosts put in DATABASE_URL; SQLAlchemy dropped the alias in 1.4.
        parsed = parsed.set(drivername="postgresql" + parsed.drivername[len("postgres"):])
    if parsed.drivername == "postgresql+psycopg_async":
        # SQLAlchemy's spelling of psycopg's async connection: the same driver, whose
        # sync or async connection each API picks itself.
        parsed = parsed.set(drivername="postgresql+psycopg")
    backend = parsed.get_backend_name()
    if backend not in ("sqlite", "postgresql"):
        raise StoreError(f"chatkeep runs on SQLite and PostgreSQL, not {backend!r}: "
                         f"{describe_url(parsed)} (use sqlite:///file.db or "
                         "postgresql+psycopg://user@host/db)")
    if backend == "postgresql" and parsed.get_driver_name() in ("", "psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def sqlite_path(parsed: URL) -> Path | None:
    """The file a SQLite URL names (``None`` for an in-memory or ``file:`` URI database)."""
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    if database in (None, "", ":memory:") or database.startswith("file:") \
            or parsed.query.get("uri"):
        return None
    return Path(database)


IDLE_PING_SECONDS = 1.0
"""A pooled PostgreSQL connection idle longer than this is pinged before use."""


def ping_when_idle(engine: Engine, idle_seconds: float = IDLE_PING_SECONDS) -> None:
    """Ping a pooled connection before use only when it sat idle for ``idle_seconds``.

    ``pool_pre_ping`` costs a round trip on every checkout (four or five per turn). A
    connection checked in moments ago is alive unless killed in that instant; a statement
    that fails on a dead one invalidates the whole pool, so the next call gets fresh
    connections either way, and connections idle longer (where a failover or restart
    hides) are still checked before use.
    """
    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _stamp(dbapi_connection: Any, record: Any) -> None:
        # A connection just opened needs no ping either.
        record.info["chatkeep_checked_in"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        checked_in = record.info.get("chatkeep_checked_in")
        if checked_in is not None and time.monotonic() - checked_in < idle_seconds:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(f"connection failed its ping: {exc}") from exc
        if not alive:
            raise DisconnectionError("connection failed its ping")


def make_engine(url: str | URL, *, sqlite_synchronous: str = "FULL",
                prepared_statements: bool = True, **kwargs: Any) -> Engine:
    """Create an engine for ``url`` (``sqlite:///file.db`` or ``postgresql+psycopg://...``);
    ``sqlite_synchronous`` is SQLite's durability level (``store.sqlite_synchronous``);
    ``prepared_statements=False`` (``store.prepared_statements``, or the URL's
    ``?prepared_statements=false``) keeps psycopg from preparing statements on the server,
    for PgBouncer in transaction mode."""
    parsed, prepare = prepared_statements_in_force(parse_url(url), prepared_statements)
    synchronous = str(sqlite_synchronous).upper()
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise StoreError(f"sqlite_synchronous must be one of {', '.join(SQLITE_SYNCHRONOUS)}, "
                         f"got {sqlite_synchronous!r}")
    try:
        if parsed.get_backend_name() == "sqlite":
            engine = _sqlite_engine(parsed, synchronous, **kwargs)
        else:
            autocommit_engine_options(kwargs)
            if not prepare:
                kwargs["connect_args"] = dict(kwargs.get("connect_args") or {})
                unprepared_connect_args(parsed.get_driver_name(), kwargs["connect_args"])
            engine = create_engine(parsed, **kwargs)
            if not kwargs.get("pool_pre_ping"):
                ping_when_idle(engine)
    except ModuleNotFoundError as exc:
        driver, hint = _DRIVERS.get(parsed.get_backend_name(), (exc.name or "?", ""))
        raise StoreError(f"{describe_url(parsed)} needs the {exc.name or driver} driver, "
                         f"which is not installed" + (f": {hint}" if hint else "")) from exc
    except (NoSuchModuleError, ArgumentError, TypeError) as exc:
        raise StoreError(f"cannot use {describe_url(parsed)}: {exc}") from exc
    if engine.dialect.is_async:
        engine.dispose()
        raise StoreError(f"{describe_url(parsed)} names an async driver; chatkeep's API is "
                         "synchronous (use postgresql+psycopg:// or sqlite:///)")
    return engine


SQLITE_LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}
"""``PRAGMA synchronous`` as SQLite reports it, per name."""
_CONFIGURED: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()


def configured_sqlite_level(engine: Engine) -> int | None:
    """The ``synchronous`` level every connection of ``engine`` is set to (as ``PRAGMA
    synchronous`` reports it), or ``None``: not a SQLite engine of chatkeep's making. A
    transaction that lowers it for itself sets it back to this level, without reading
    it first (:func:`chatkeep.store.direct._unsynced`)."""
    return _CONFIGURED.get(engine)


def apply_sqlite_pragmas(engine: Engine, synchronous: str, *, wal: bool = True) -> None:
    """Every new SQLite connection of ``engine`` (sync, or an async engine's
    ``sync_engine``) gets chatkeep's settings: WAL, ``synchronous``, the busy timeout,
    foreign keys, ``secure_delete``, and no implicit BEGIN (chatkeep issues its own)."""
    _CONFIGURED[engine] = SQLITE_LEVELS[synchronous]

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        # The busy timeout first: what follows waits for a lock another connection
        # holds (a keep starting on the same new file) instead of failing.
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        if wal:
            _set_wal(cursor)
        # secure_delete: freed cells and pages are zeroed, so a deleted or overwritten
        # row leaves no bytes in the file (issue 36; its cost is in bench/erase.py).
        for pragma in (f"synchronous={synchronous}", "foreign_keys=ON", "secure_delete=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()


def _set_wal(cursor: Any) -> None:
    """``PRAGMA journal_mode=WAL``, waiting (up to the busy timeout) while another
    connection holds the lock: SQLite answers a change of journal mode "database is
    locked" at once, without its busy handler, so two keeps opening one new file at the
    same moment failed. The wait yields to the event loop under the async API (the
    other keep's work may need that loop to finish)."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause = 0.002
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except Exception as exc:  # the driver's OperationalError, sqlite3's or the adapter's
            if "database is locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        _pause(pause)
        pause = min(pause * 2, 0.1)


def _pause(seconds: float) -> None:
    """Sleep: on the event loop (awaited) inside the async bridge, else in this thread."""
    from sqlalchemy.util.concurrency import in_greenlet

    if in_greenlet():
        import asyncio

        from sqlalchemy.util import await_only

        await_only(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


class QueuedWriter(sqlite3.Connection):
    """A pysqlite connection whose write transactions (``BEGIN IMMEDIATE``) queue on a
    lock its engine's connections share: this process's threads then wait their turn on
    the lock, not in SQLite's busy handler, which sleeps 1, 2, 5, 10... ms between tries
    and so keeps a waiter well past the writer's commit. Other processes still meet
    SQLite's own lock and busy timeout. The lock is let go when the transaction ends
    (commit, rollback, an error that ended it, close). A thread that holds it already
    (a write on a second connection inside its own) does not wait on it: SQLite answers
    that as before. Past the busy timeout a waiter goes on to SQLite's lock as before.
    Each engine's class has its own lock (:func:`queued_writer`)."""

    _writer: threading.Lock
    _holder: list[int]
    """The thread holding ``_writer`` (shared by the engine's connections)."""
    _holding = False

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        """``sqlite3.Connection.execute``; a ``BEGIN IMMEDIATE`` first takes the engine's
        writer lock, and a statement that ended the transaction lets it go."""
        if sql == "BEGIN IMMEDIATE" and not self._holding:
            self._take()
        try:
            return super().execute(sql, *args)
        finally:
            if self._holding and not self.in_transaction:
                self._give()

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        """``sqlite3.Connection.executemany``, letting the writer lock go if it ended the
        transaction."""
        try:
            return super().executemany(sql, *args)
        finally:
            if self._holding and not self.in_transaction:
                self._give()

    def commit(self) -> None:
        """``sqlite3.Connection.commit``, then the writer lock let go."""
        try:
            super().commit()
        finally:
            if self._holding and not self.in_transaction:
                self._give()

    def rollback(self) -> None:
        """``sqlite3.Connection.rollback``, then the writer lock let go."""
        try:
            super().rollback()
        finally:
            if self._holding:
                self._give()

    def close(self) -> None:
        """``sqlite3.Connection.close``, never leaving the writer lock held."""
        try:
            super().close()
        finally:
            if self._holding:
                self._give()

    def _take(self) -> None:
        me = threading.get_ident()
        if me in self._holder:
            return  # this thread is writing on another connection: SQLite answers that
        if self._writer.acquire(timeout=SQLITE_BUSY_TIMEOUT_MS / 1000):
            self._holder.append(me)
            self._holding = True

    def _give(self) -> None:
        self._holding = False
        self._holder.clear()
        self._writer.release()


def queued_writer() -> type[QueuedWriter]:
    """A :class:`QueuedWriter` class with a lock of its own, for one engine."""
    return type("QueuedWriter", (QueuedWriter,), {"_writer": threading.Lock(), "_holder": []})


def _sqlite_engine(parsed: URL, synchronous: str, **kwargs: Any) -> Engine:
    path = sqlite_path(parsed)
    in_memory = parsed.database in (None, "", ":memory:")
    if path is not None and not path.expanduser().resolve().parent.is_dir():
        raise StoreError(f"cannot open SQLite database {path}: the folder "
                         f"{path.parent} does not exist")
    if in_memory:
        # One shared connection, or every checkout would see a fresh empty database.
        kwargs.setdefault("poolclass", StaticPool)
        kwargs.setdefault("connect_args", {"check_same_thread": False})
    else:
        kwargs.setdefault("connect_args", {"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000,
                                           "factory": queued_writer()})
    engine = create_engine(parsed, **kwargs)

    apply_sqlite_pragmas(engine, synchronous, wal=not in_memory)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # Straight to the driver: this runs once per transaction, on the append hot path.
        mode = "BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE"
        conn.connection.driver_connection.execute(mode)

    return engine
