"""A SQLite file's read lane under the async API: one-statement reads on a connection of
their own, each one trip to its thread, awaited straight from the coroutine.

Through the bridge a read pays, around its one trip to aiosqlite's thread, for a
greenlet, the pool's checkout and check-in and the transport's wrapping: for a bounded
read (the Agents SDK's ``get_items(limit=20)``) that was more than SQLite's work and the
trip together, and put chatkeep's read behind the SDK's (``bench/agents_read.py``). A
read that is one statement needs none of it. In WAL mode a second connection reads the
last committed state without waiting for the writer, and a single statement is its own
snapshot, so every coroutine, on any event loop, can share the lane: its thread runs the
reads one after another, each whole.

What may run on it (:meth:`ReadLane.run`): a store procedure that only reads, one
statement at a time in autocommit (``transport.autocommit()``), and quickly (its thread
serves every lane read of the keep). Its connection is ``query_only``. It is not for code
that must see a transaction still open on another connection.

The lane stands aside (the caller's procedure runs through the bridge instead, as
before) on PostgreSQL, on an aiosqlite without the two names :mod:`chatkeep.store.direct`
leans on, while anything listens to the engine's statement events (tracing is owed every
statement), and once a ``connect`` listener was added to the engine after the keep built
it (a key or a function every connection must be given; the lane's would lack it).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import Engine

from chatkeep.aio.sqlite_driver import daemon_connection
from chatkeep.errors import KeepClosed
from chatkeep.store.connections import driver_error
from chatkeep.store.direct import SqliteTransport, in_thread, trips_to_aiosqlite
from chatkeep.store.engine import SQLITE_BUSY_TIMEOUT_MS
from chatkeep.store.executor import Transport

P = ParamSpec("P")
T = TypeVar("T")

__all__ = ["ReadLane"]


class ReadLane:
    """The read lane of one async engine's SQLite file, over the engine's own transport
    (its compiled statements serve the lane too; ``None`` from :meth:`of` where the
    engine has none). Opened on first use; :meth:`close` ends its thread."""

    def __init__(self, transport: SqliteTransport) -> None:
        self.engine: Engine = transport.engine
        self.transport = transport
        self._connect_listeners = len(self.engine.pool.dispatch.connect)
        self._connection: Any = None
        self._pid = 0
        self._broken = False
        """A read failed with a driver error: the connection is replaced first."""
        self._guard = threading.Lock()
        self.closed = False

    @classmethod
    def of(cls, transport: Transport) -> ReadLane | None:
        """The lane over an engine's ``transport``: SQLite on aiosqlite with the names a
        trip needs."""
        if not isinstance(transport, SqliteTransport) \
                or transport.engine.dialect.driver != "aiosqlite" or not trips_to_aiosqlite():
            return None
        return cls(transport)

    @property
    def usable(self) -> bool:
        """Whether reads may take the lane now (see the module's docstring)."""
        return not self.closed and self.transport.usable \
            and len(self.engine.pool.dispatch.connect) == self._connect_listeners

    def submit(self, procedure: Callable[Concatenate[Transport, P], T], /,
               *args: P.args, **kwargs: P.kwargs) -> Awaitable[T] | None:
        """``procedure(transport, *args, **kwargs)`` for the lane's thread, on a transport
        over its connection: what awaits its result (a driver error comes back as a
        ``StoreError``, and the connection is opened afresh for the next read), or
        ``None`` when the connection must be opened first (:meth:`run`)."""
        connection = self._connection
        if connection is None or self._pid != os.getpid() or self._broken:
            return None
        there = in_thread(self.transport)

        def whole() -> T:
            there.connection = connection._conn  # aiosqlite's sqlite3 connection
            try:
                return procedure(there, *args, **kwargs)
            except sqlite3.Error as exc:
                self._broken = True
                raise driver_error(exc) from exc

        return self._trip(connection, whole)

    async def _trip(self, connection: Any, whole: Callable[[], T]) -> T:
        try:
            result: T = await connection._execute(whole)
        except ValueError:
            if self.closed or not connection._running:  # closed under the read
                raise KeepClosed("this AsyncChatkeep is closed") from None
            raise
        return result

    async def run(self, procedure: Callable[Concatenate[Transport, P], T], /,
                  *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`submit`, awaited, opening the connection first if need be."""
        future = self.submit(procedure, *args, **kwargs)
        if future is None:
            await self._open()
            future = self.submit(procedure, *args, **kwargs)
            if future is None:
                raise KeepClosed("this AsyncChatkeep is closed")
        return await future

    async def _open(self) -> None:
        if self._broken:
            self._broken = False
            await self._drop(self._connection)
        if self._connection is not None and self._pid == os.getpid():
            return
        try:
            fresh = await _connect(self.engine)
        except sqlite3.Error as exc:
            raise driver_error(exc) from exc
        with self._guard:
            if self._connection is None or self._pid != os.getpid():
                self._connection, self._pid, fresh = fresh, os.getpid(), None
        if fresh is not None:  # another coroutine opened it meanwhile
            await fresh.close()
        if self.closed:  # closed while this one opened
            await self.close()
            raise KeepClosed("this AsyncChatkeep is closed")

    async def _drop(self, connection: Any) -> None:
        if connection is None:
            return
        with self._guard:
            if self._connection is connection:
                self._connection = None
        with contextlib.suppress(sqlite3.Error, ValueError):
            await connection.close()  # dropped for an error already: it may not close

    async def close(self) -> None:
        """End the lane: later reads refuse (``KeepClosed``); its connection closes."""
        self.closed = True
        with self._guard:
            connection, self._connection = self._connection, None
        if connection is not None and self._pid == os.getpid():
            await connection.close()


async def _connect(engine: Engine) -> Any:
    """A connection to ``engine``'s file opened as the engine opens its own (the
    dialect's connect arguments), read-only, its thread never holding up the exit."""
    import aiosqlite

    args, kwargs = engine.dialect.create_connect_args(engine.url)
    connection = daemon_connection(aiosqlite, *args, **kwargs)
    await connection
    try:
        await connection._execute(_configure, connection._conn)
    except BaseException:
        await connection.close()
        raise
    return connection


def _configure(db: sqlite3.Connection) -> None:
    db.isolation_level = None  # no implicit BEGIN: each statement is its own read
    db.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA query_only=ON")
