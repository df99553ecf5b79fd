"""aiosqlite under SQLAlchemy, one trip to its thread per statement.

aiosqlite runs each SQLite connection in a thread of its own; every call made on it is a
trip there and back (a queue put, a wake-up, a future set from the thread, the event loop
woken). SQLAlchemy's adapter makes four for each statement: open a cursor, execute, fetch
the rows, close the cursor, so a short read cost about a millisecond in waiting alone
(``bench/frameworks.py`` showed async turns at two to three times the sync core's time).
Here a statement is one trip: the cursor is opened, executed, read and closed in
aiosqlite's thread, and its description, row count and rows come back together. Commits,
rollbacks and everything else are aiosqlite's own.

It leans on two names aiosqlite does not document (``Connection._execute``, the trip, and
``Connection._conn``, the ``sqlite3`` connection in its thread), stable since 0.17: an
aiosqlite without them gets SQLAlchemy's adapter back. The suite runs every async test
through this one.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Sequence
from threading import Thread
from types import ModuleType
from typing import Any

from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util import EMPTY_DICT, await_only

__all__ = ["daemon_connection", "one_trip_dbapi"]

_Outcome = tuple[Any, int, Any, list[Any]]
#: What the store's ``begin`` listener sends: held back to travel with the next statement.
BEGINS = frozenset({"BEGIN", "BEGIN IMMEDIATE"})


def _run(connection: sqlite3.Connection, begin: str | None, operation: str, parameters: Any,
         many: bool) -> _Outcome:
    """In aiosqlite's thread: the deferred ``BEGIN`` if any, then the statement, and
    everything SQLAlchemy reads of its cursor."""
    if begin is not None:
        connection.execute(begin)
    cursor = connection.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, cursor.rowcount, cursor.lastrowid, rows
    finally:
        cursor.close()


class OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    """A cursor whose statement, rows and close are one trip to aiosqlite's thread."""

    __slots__ = ("_outcome",)

    def __init__(self, adapt_connection: Any) -> None:
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = collections.deque()
        self._outcome: _Outcome = (None, -1, None, [])

    @property
    def description(self) -> Any:
        """The last statement's column description (``None`` for one without rows)."""
        return self._outcome[0]

    @property
    def rowcount(self) -> int:
        """Rows the last statement changed, as ``sqlite3`` counts them."""
        return self._outcome[1]

    @property
    def lastrowid(self) -> Any:
        """The row id of the last row inserted."""
        return self._outcome[2]

    @property
    def arraysize(self) -> int:
        """Rows ``fetchmany`` returns when given no size."""
        return 1

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        pass  # every row is fetched with its statement

    async def _async_soft_close(self) -> None:
        return  # nothing is open between trips

    def close(self) -> None:
        """Drop rows not fetched (the driver's cursor closed with its statement)."""
        self._rows.clear()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        """Run one statement in one trip."""
        return self._trip(operation, parameters, False)

    def executemany(self, operation: Any, seq_of_parameters: Sequence[Any]) -> Any:
        """Run one statement for each parameter set, in one trip."""
        return self._trip(operation, seq_of_parameters, True)

    def _trip(self, operation: Any, parameters: Any, many: bool) -> None:
        adapted = self._adapt_connection
        assert isinstance(adapted, OneTripConnection)
        if not many and parameters in (None, (), []) and operation in BEGINS:
            adapted.begin = operation  # sent with the statement that follows it
            self._outcome = (None, -1, None, [])
            self._rows = collections.deque()
            return
        begin, adapted.begin = adapted.begin, None
        try:
            self._outcome = await_only(self._send(begin, operation, parameters, many))
        except Exception as error:
            adapted._handle_exception(error)
        self._rows = collections.deque(self._outcome[3])

    async def _send(self, begin: str | None, operation: Any, parameters: Any,
                    many: bool) -> _Outcome:
        connection = self._connection
        async with self._adapt_connection._execute_mutex:
            outcome: _Outcome = await connection._execute(
                _run, connection._conn, begin, operation, parameters, many)
            return outcome


class OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """SQLAlchemy's aiosqlite connection, handing out :class:`OneTripCursor`; a
    ``BEGIN`` waits to travel with the statement after it, and ending a transaction
    that never started (a ``BEGIN`` alone, or none) costs no trip."""

    __slots__ = ("begin",)
    _cursor_cls = OneTripCursor

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        self.begin: str | None = None

    def commit(self) -> None:
        """Commit, if a transaction is open."""
        if self._idle():
            return
        super().commit()

    def rollback(self) -> None:
        """Roll back, if a transaction is open (the pool asks on every check-in)."""
        if self._idle():
            return
        super().rollback()

    def _idle(self) -> bool:
        """Drop a ``BEGIN`` never sent; whether no transaction is open in SQLite. A trip
        still under way (a cancelled statement aiosqlite's thread is running) may yet
        open one: then the answer is no, and the commit or rollback queues behind it."""
        self.begin = None
        driver = self._connection._connection
        return driver is not None and not self._execute_mutex.locked() \
            and not driver.in_transaction


def daemon_connection(aiosqlite: Any, *args: Any, **kwargs: Any) -> Any:
    """``aiosqlite.connect(*args, **kwargs)``, not yet awaited, its thread made a daemon
    as SQLAlchemy's adapter makes it: it never holds up the exit (the connection was the
    thread itself before aiosqlite 0.22)."""
    connection = aiosqlite.connect(*args, **kwargs)
    thread = connection if isinstance(connection, Thread) else connection._thread
    thread.daemon = True
    return connection


class _OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *args: Any, **kwargs: Any) -> AsyncAdapt_aiosqlite_connection:
        return OneTripConnection(self, await_only(daemon_connection(self.aiosqlite, *args,
                                                                    **kwargs)))


def one_trip_dbapi() -> AsyncAdapt_aiosqlite_dbapi | None:
    """The DB-API module for ``create_async_engine(..., module=...)`` on aiosqlite;
    ``None`` (SQLAlchemy's own adapter, four trips a statement) for an aiosqlite without
    the two names it relies on."""
    import aiosqlite

    connection = aiosqlite.Connection
    if not callable(getattr(connection, "_execute", None)) or \
            not isinstance(getattr(connection, "_conn", None), property):
        return None
    module: ModuleType = aiosqlite
    return _OneTripDBAPI(module, sqlite3)
