"""The executor protocol's driver implementation: a procedure's statements sent to the
database driver itself, without what a SQLAlchemy ``Connection`` adds to each (result
metadata, an object per column; under the async API an adapter cursor buffering the
rows), which on a local database costs more than the database's own work.

The statements are :mod:`chatkeep.store.statements`' own objects, compiled once for the
dialect, values through its type processors: stored bytes and values read are the Core
executor's. SQLite (pysqlite; aiosqlite under the async API) writes in ``BEGIN IMMEDIATE``
and reads in one deferred transaction; PostgreSQL (psycopg, sync or async; asyncpg), on an
engine that autocommits, writes in ``BEGIN`` and runs a single statement or a read as its
own transaction. Async drivers are awaited from inside the bridge (``await_only``). While
anything listens to the engine's statement events, Core executors serve instead.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Concatenate, NamedTuple, ParamSpec, TypeVar

from sqlalchemy import JSON, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.util import await_only

from chatkeep.errors import ChatkeepError, StoreError
from chatkeep.store.connections import autocommits, driver_error, ensure_started, store_error
from chatkeep.store.engine import SQLITE_LEVELS, configured_sqlite_level
from chatkeep.store.executor import CoreTransport, Executor, Row, Transport

P = ParamSpec("P")
T = TypeVar("T")

_Processors = list[tuple[int, Callable[[Any], Any]]]
"""The type processors of the columns that have one, by position."""


def _processors(per_column: Sequence[Callable[[Any], Any] | None]) -> _Processors:
    return [(i, f) for i, f in enumerate(per_column) if f is not None]


def _results(columns: Iterable[Any], dialect: Any) -> _Processors:
    """How ``dialect`` turns what the driver returns for ``columns`` into their values."""
    return _processors([_empty_json_first(c, c.type.dialect_impl(dialect).result_processor(
        dialect, None)) for c in columns])


_EMPTY_JSON: dict[str, Callable[[], Any]] = {"{}": dict, "[]": list, "null": lambda: None}
"""The JSON texts most stored values are (a message's metadata, and its native payload and
tool calls, which a JSON column stores as ``null`` when absent), with what each decodes to."""


def _empty_json_first(column: Any, process: Callable[[Any], Any] | None,
                      ) -> Callable[[Any], Any] | None:
    """A JSON column's decoder with ``{}``, ``[]`` and ``null`` answered without the JSON
    parser (a new object each time; the parser's call costs more than the rest of a
    message's row)."""
    if process is None or not isinstance(column.type, JSON):
        return process
    empty = _EMPTY_JSON

    def decode(value: Any) -> Any:
        make = empty.get(value) if type(value) is str else None
        return make() if make is not None else process(value)

    return decode


def _bound(processors: _Processors, values: Sequence[Any]) -> list[Any]:
    """``values`` with each column's processor applied (most columns have none)."""
    out = list(values)
    for i, process in processors:
        out[i] = process(out[i])
    return out


class Compiled(NamedTuple):
    """A statement compiled for one driver: its SQL, what turns named values into its
    parameters, and the result processors of the columns it returns. ``expanding``
    names the list parameters (``IN`` over a list): such a statement is compiled again
    for each count of values (:meth:`_Statements.expanded`)."""

    sql: str
    params: Callable[[Mapping[str, Any]], Any]
    results: _Processors
    expanding: tuple[str, ...] = ()


def compile_for_driver(statement: Any, dialect: Any,
                       column_keys: Sequence[str] | None = None) -> Compiled:
    """``statement`` for ``dialect``'s driver: its own literals (``role = 'system'``)
    filled in, each value through its type's bind processor, given as a list or a dict
    as the driver's paramstyle wants. An insert names its ``column_keys``: each must
    then be given (a column default is not filled in here)."""
    compiled = statement.compile(dialect=dialect, column_keys=column_keys)
    expanding = tuple(name for name, bind in compiled.binds.items() if bind.expanding)
    if expanding:  # its SQL waits for the lists' lengths
        return Compiled("", _unexpanded, [], expanding)
    positional = compiled.positiontup is not None
    names = list(compiled.positiontup if positional else compiled.binds)
    if column_keys is not None and not set(names) <= set(column_keys):
        raise StoreError(f"no value given for {sorted(set(names) - set(column_keys))} in "
                         f"{str(compiled).split('(')[0].strip()}")
    return Compiled(str(compiled), _driver_params(compiled, dialect, names, positional),
                    _results(getattr(statement, "exported_columns", ()), dialect))


def _driver_params(compiled: Any, dialect: Any, names: list[str], positional: bool,
                   source: Mapping[str, str] | None = None,
                   ) -> Callable[[Mapping[str, Any]], Any]:
    """What turns named values into the driver's parameters ``names`` (in order), each
    through the bind processor of its parameter (``source``: an expanded list item's,
    its list's), as a list or a dict as the driver's paramstyle wants."""
    fixed, source = compiled.params, source or {}
    steps = []
    for name in names:
        bind = source.get(name, name)
        steps.append((name, fixed.get(bind),
                      compiled.binds[bind].type.dialect_impl(dialect).bind_processor(dialect)))

    def values(given: Mapping[str, Any]) -> list[Any]:
        get = given.get
        return [get(name, default) if process is None else process(get(name, default))
                for name, default, process in steps]

    def named(given: Mapping[str, Any]) -> dict[str, Any]:
        return dict(zip(names, values(given), strict=True))

    return values if positional else named


def _unexpanded(given: Mapping[str, Any]) -> Any:
    raise StoreError("a statement with list parameters runs as compiled for their lengths")


def compile_expanded(statement: Any, dialect: Any, lengths: Mapping[str, int]) -> Compiled:
    """``statement``, whose list parameters (``expanding``) hold ``lengths`` values each,
    for ``dialect``'s driver: SQLAlchemy's own expansion (``construct_expanded_state``),
    one placeholder per value, each value through its list's bind processor."""
    compiled = statement.compile(dialect=dialect)
    # A marker per list item, to learn which expanded parameter takes which item.
    sample: dict[str, Any] = {name: None for name in compiled.binds}
    sample.update({name: [f"\x00{name}\x00{i}" for i in range(length)]
                   for name, length in lengths.items()})
    state = compiled.construct_expanded_state(sample)
    items: dict[str, list[str]] = {name: [""] * length for name, length in lengths.items()}
    source: dict[str, str] = {}
    for expanded, value in state.parameters.items():
        if isinstance(value, str) and value.startswith("\x00"):
            _, name, index = value.split("\x00")
            items[name][int(index)] = expanded
            source[expanded] = name
    positional = state.positiontup is not None
    flat = _driver_params(compiled, dialect,
                          list(state.positiontup if positional else state.parameters),
                          positional, source)

    def params(given: Mapping[str, Any]) -> Any:
        spread = dict(given)
        for name, expanded in items.items():
            spread.update(zip(expanded, given[name], strict=True))
        return flat(spread)

    return Compiled(state.statement, params,
                    _results(getattr(statement, "exported_columns", ()), dialect))


class _Statements:
    """The prebuilt statements compiled for one dialect, each on first use (an insert once
    per set of columns given)."""

    def __init__(self, dialect: Any) -> None:
        self.dialect = dialect
        self._compiled: dict[Any, Compiled] = {}

    def get(self, statement: Any, given: Mapping[str, Any]) -> Compiled:
        compiled = self._compiled.get(statement)
        if compiled is None:
            compiled = self._compiled[statement] = compile_for_driver(statement, self.dialect)
        return self.expanded(statement, compiled, given) if compiled.expanding else compiled

    def expanded(self, statement: Any, compiled: Compiled,
                 given: Mapping[str, Any]) -> Compiled:
        """``statement`` compiled for the lengths of the lists ``given`` holds (once per
        set of lengths: a list is cut into chunks of a bounded size by its callers)."""
        lengths = {name: len(given[name]) for name in compiled.expanding}
        key = (statement, *lengths.values())
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = compile_expanded(statement, self.dialect, lengths)
        return found

    def insert(self, statement: Any, row: Mapping[str, Any]) -> Compiled:
        key = (statement, *row)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = compile_for_driver(statement, self.dialect,
                                                                list(row))
        return compiled


# -- the drivers ---------------------------------------------------------------------------

class _DriverExecutor:
    """One driver connection as an :class:`~chatkeep.store.executor.Executor`; each
    driver says how it fetches, inserts many, runs a command, whether a transaction is
    open and whether an error left the connection ``broken``."""

    __slots__ = ("db", "statements", "unsafe")

    def __init__(self, db: Any, statements: _Statements) -> None:
        self.db = db
        self.statements = statements
        self.unsafe = False
        """A setting of the connection could not be set back: never pool it again."""

    def rows(self, statement: Any, params: Mapping[str, Any]) -> Sequence[Row]:
        compiled = self.statements.get(statement, params)
        raws = self.fetch(compiled.sql, compiled.params(params))
        results = compiled.results
        return [_bound(results, raw) for raw in raws] if results else raws

    def many(self, statement: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        compiled = self.statements.insert(statement, rows[0])
        params = compiled.params
        self.execute_many(compiled.sql, [params(row) for row in rows])

    def fetch(self, sql: str, params: Any) -> list[Any]:
        raise NotImplementedError

    def execute_many(self, sql: str, rows: list[Any]) -> None:
        raise NotImplementedError

    def command(self, sql: str) -> None:
        raise NotImplementedError

    @property
    def in_transaction(self) -> bool:
        raise NotImplementedError

    def broken(self, error: Exception) -> bool:
        """Whether the connection is unusable after ``error`` (then the pool drops it,
        and the next call connects afresh)."""
        return False


class _Pysqlite(_DriverExecutor):
    """Statements straight to a ``sqlite3`` connection."""

    __slots__ = ()
    db: sqlite3.Connection

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def fetch(self, sql: str, params: Any) -> list[Any]:
        return self.db.execute(sql, params).fetchall()

    def command(self, sql: str) -> None:
        self.db.execute(sql)

    def execute_many(self, sql: str, rows: list[Any]) -> None:
        if len(rows) == 1:
            self.db.execute(sql, rows[0])
        else:
            self.db.executemany(sql, rows)


class _Aiosqlite(_DriverExecutor):
    """Statements to an aiosqlite connection, awaited from inside the async bridge: one
    hop to its thread per statement (``execute_fetchall``), where SQLAlchemy's adapter
    makes four (cursor, execute, fetch, close)."""

    __slots__ = ()

    @property
    def in_transaction(self) -> bool:
        return bool(self.db.in_transaction)

    def fetch(self, sql: str, params: Any) -> list[Any]:
        return list(await_only(self.db.execute_fetchall(sql, params)))

    def command(self, sql: str) -> None:
        await_only(self.db.execute_fetchall(sql, ()))

    def execute_many(self, sql: str, rows: list[Any]) -> None:
        for row in rows:
            await_only(self.db.execute_fetchall(sql, row))


class _Psycopg(_DriverExecutor):
    """Statements straight to a psycopg connection (autocommit: each its own
    transaction, unless a ``BEGIN`` opened one)."""

    __slots__ = ()

    def broken(self, error: Exception) -> bool:
        return bool(self.db.closed or getattr(self.db, "broken", False))

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self.db.info.transaction_status in (TransactionStatus.INTRANS,
                                                        TransactionStatus.INERROR))

    def fetch(self, sql: str, params: Any) -> list[Any]:
        rows: list[Any] = self.db.execute(sql, params).fetchall()
        return rows

    def command(self, sql: str) -> None:
        self.db.execute(sql)

    def execute_many(self, sql: str, rows: list[Any]) -> None:
        if len(rows) == 1:
            self.db.execute(sql, rows[0])
        else:
            with self.db.cursor() as cursor:
                cursor.executemany(sql, rows)


async def _fetch_all(db: Any, sql: str, params: Any) -> list[Any]:
    async with db.cursor() as cursor:
        await cursor.execute(sql, params)
        rows: list[Any] = await cursor.fetchall()
        return rows


async def _execute_many(db: Any, sql: str, rows: list[Any]) -> None:
    async with db.cursor() as cursor:
        await cursor.executemany(sql, rows)


class _AsyncPsycopg(_Psycopg):
    """Statements to psycopg's async connection, awaited from inside the bridge: one
    coroutine (execute and fetch) per statement."""

    __slots__ = ()

    def fetch(self, sql: str, params: Any) -> list[Any]:
        rows: list[Any] = await_only(_fetch_all(self.db, sql, params))
        return rows

    def command(self, sql: str) -> None:
        await_only(self.db.execute(sql))

    def execute_many(self, sql: str, rows: list[Any]) -> None:
        await_only(_execute_many(self.db, sql, rows))


class _Asyncpg(_DriverExecutor):
    """Statements to an asyncpg connection, awaited from inside the bridge: one coroutine
    per statement; asyncpg prepares each statement once per connection (its own cache)."""

    __slots__ = ()

    def broken(self, error: Exception) -> bool:
        """Closed, a client-side error, or the server ending the session."""
        import asyncpg

        return bool(self.db.is_closed() or not isinstance(error, asyncpg.PostgresError)
                    or str(getattr(error, "sqlstate", "")).startswith(("08", "57")))

    @property
    def in_transaction(self) -> bool:
        return bool(self.db.is_in_transaction())

    def fetch(self, sql: str, params: Any) -> list[Any]:
        rows: list[Any] = await_only(self.db.fetch(sql, *params))
        return rows

    def command(self, sql: str) -> None:
        await_only(self.db.execute(sql))

    def execute_many(self, sql: str, rows: list[Any]) -> None:
        if len(rows) == 1:
            await_only(self.db.execute(sql, *rows[0]))
        else:
            await_only(self.db.executemany(sql, rows))


# -- the transports ------------------------------------------------------------------------

@contextmanager
def _within(db: _DriverExecutor, begin: str | None) -> Iterator[_DriverExecutor]:
    """``db`` in a transaction begun by ``begin`` (``None``: none), committed when the
    block ends, rolled back when it raises."""
    if begin is None:
        yield db
        return
    db.command(begin)
    try:
        yield db
        db.command("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.command("ROLLBACK")
        raise


@contextmanager
def _unsynced(db: _DriverExecutor, dialect: str, begin: str,
              level: int | None = None) -> Iterator[_DriverExecutor]:
    """``db`` in a write transaction whose commit does not wait for the disk: visible to
    every connection and durable against a crash of this process at once, durable
    against a crash of the machine (power loss) with the next commit that does wait.
    PostgreSQL: ``SET LOCAL synchronous_commit TO OFF`` (sent with the ``BEGIN``, no
    round trip of its own). SQLite, whose level cannot change inside a transaction: the
    connection's ``synchronous`` lowered to NORMAL around it (WAL at NORMAL syncs at
    checkpoints only) and set back after; a connection that could not be set back is
    never pooled again (:attr:`_DriverExecutor.unsafe`). ``level``: the connection's
    level, known from the engine's settings (``None``: asked, a statement more; under
    the async API a trip more to aiosqlite's thread)."""
    if dialect == "postgresql":
        with _within(db, f"{begin}; SET LOCAL synchronous_commit TO OFF"):
            yield db
        return
    if level is None:
        level = int(db.fetch("PRAGMA synchronous", ())[0][0])
    if level <= SQLITE_LEVELS["NORMAL"]:
        with _within(db, begin):
            yield db
        return
    db.command("PRAGMA synchronous=NORMAL")
    try:
        with _within(db, begin):
            yield db
    finally:
        try:
            db.command(f"PRAGMA synchronous={level}")
        except BaseException:
            db.unsafe = True
            raise


class DriverTransport:
    """A :class:`~chatkeep.store.executor.Transport` whose executors are driver
    connections from the engine's pool: driver errors become ``StoreError`` (integrity
    errors pass through), and a connection an error broke is dropped."""

    integrity_errors: tuple[type[Exception], ...]
    """The driver's integrity error (and SQLAlchemy's, from the Core fallback)."""
    database_errors: tuple[type[Exception], ...]
    """The driver's errors: raised as ``StoreError``."""
    write_begin = "BEGIN"
    """How a write transaction starts on this backend."""
    read_begin: str | None = None
    """How a read starts (``None``: each statement its own transaction)."""
    driver: type[_DriverExecutor]
    """The engine's driver, as an executor."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self.core = CoreTransport(engine)
        self.statements = _Statements(engine.dialect)
        self.sqlite_level = configured_sqlite_level(engine)
        """The SQLite engine's ``synchronous`` level (``None``: unknown, or PostgreSQL)."""

    @property
    def usable(self) -> bool:
        """False while anything listens to the engine's statement events: those
        listeners (tracing, tests) are owed every statement, so Core executors serve."""
        dispatch = self.engine.dispatch
        return not (dispatch.before_cursor_execute or dispatch.after_cursor_execute)

    def transaction(self, *, synced: bool = True) -> AbstractContextManager[Executor]:
        """A driver connection in a write transaction (``synced=False``: its commit does
        not wait for the disk, :func:`_unsynced`)."""
        if not self.usable:
            return self.core.transaction(synced=synced)
        return self._open(self.write_begin) if synced else self._open_unsynced()

    def autocommit(self) -> AbstractContextManager[Executor]:
        """A driver connection, each statement its own transaction."""
        return self._open(None) if self.usable else self.core.autocommit()

    def reading(self) -> AbstractContextManager[Executor]:
        """A driver connection for reads."""
        return self._open(self.read_begin) if self.usable else self.core.reading()

    def run(self, procedure: Callable[Concatenate[Transport, P], T], /, *args: P.args,
            **kwargs: P.kwargs) -> T:
        """``procedure(self, *args, **kwargs)``."""
        return procedure(self, *args, **kwargs)

    @contextmanager
    def _open(self, begin: str | None) -> Iterator[Executor]:
        with self._checkout() as db, _within(db, begin):
            yield db

    @contextmanager
    def _open_unsynced(self) -> Iterator[Executor]:
        with self._checkout() as db, _unsynced(db, self.dialect, self.write_begin,
                                               self.sqlite_level):
            yield db

    @contextmanager
    def _checkout(self) -> Iterator[_DriverExecutor]:
        """A driver connection from the pool, as an executor; what goes wrong on it is
        classified here (and the connection dropped when that left it unusable)."""
        ensure_started(self.engine)
        try:
            pooled = self.engine.raw_connection()
        except SQLAlchemyError as exc:
            raise store_error(exc) from exc
        db = self.driver(pooled.driver_connection, self.statements)
        try:
            yield db
        except self.integrity_errors:
            raise
        except self.database_errors as exc:
            lost = db.broken(exc)
            if lost:
                # As SQLAlchemy does on a disconnect: every pooled connection older than
                # this one is replaced at its next checkout (after a restart they are all
                # dead), so one call fails, not one per pooled connection.
                self.engine.pool._invalidate(pooled, exc)
            raise driver_error(exc, lost=lost) from exc
        except ChatkeepError:
            raise  # classified: the connection is in a known state
        except BaseException as exc:
            # Nobody classified it (a bug, a cancellation mid-statement, a driver error
            # outside its hierarchy): the connection may be mid-protocol; never pool it.
            pooled.invalidate(exc if isinstance(exc, Exception) else None)
            raise
        finally:
            if db.unsafe:
                pooled.invalidate()
            pooled.close()


class SqliteTransport(DriverTransport):
    """SQLite files on pysqlite, or on aiosqlite (an append is ~0.1 ms of SQLite's own
    work)."""

    integrity_errors: tuple[type[Exception], ...] = (sqlite3.IntegrityError, IntegrityError)
    database_errors = (sqlite3.Error,)
    write_begin = "BEGIN IMMEDIATE"
    read_begin = "BEGIN"

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.driver = _Pysqlite if engine.dialect.driver == "pysqlite" else _Aiosqlite

    @staticmethod
    def serves(engine: Engine) -> bool:
        """SQLite on pysqlite, or on aiosqlite (the async API's engine, whose repository
        runs inside the bridge)."""
        return engine.dialect.name == "sqlite" and engine.dialect.driver in ("pysqlite",
                                                                              "aiosqlite")

    def run(self, procedure: Callable[Concatenate[Transport, P], T], /, *args: P.args,
            **kwargs: P.kwargs) -> T:
        """On aiosqlite, the whole procedure in one trip to the connection's thread (its
        ``BEGIN IMMEDIATE``, statements and ``COMMIT`` were a trip each, and a trip costs
        more than SQLite's work for an append): there it runs on the ``sqlite3``
        connection itself, over :class:`InThread`. Errors come back as the other paths
        raise them. Elsewhere, or while listeners are owed every statement, or on an
        aiosqlite without the two names this leans on (those :mod:`chatkeep.aio.sqlite_driver`
        uses), it runs here."""
        if self.driver is not _Aiosqlite or not self.usable or not trips_to_aiosqlite():
            return procedure(self, *args, **kwargs)
        there = in_thread(self)
        with self._checkout() as db:
            connection = db.db
            there.outer = db

            def whole() -> T:
                there.connection = connection._conn  # aiosqlite's sqlite3 connection
                return procedure(there, *args, **kwargs)

            result: T = await_only(connection._execute(whole))
            return result


@functools.cache
def trips_to_aiosqlite() -> bool:
    """Whether aiosqlite still has ``Connection._execute`` (a call run in its thread) and
    ``Connection._conn`` (the ``sqlite3`` connection there)."""
    import aiosqlite

    connection = aiosqlite.Connection
    return callable(getattr(connection, "_execute", None)) and \
        isinstance(getattr(connection, "_conn", None), property)


def in_thread(transport: SqliteTransport) -> InThread:
    """``transport`` as seen from inside an aiosqlite connection's thread, sharing its
    compiled statements (the caller sets its ``connection`` there)."""
    return InThread(transport.statements, transport.integrity_errors)


class InThread:
    """A :class:`SqliteTransport` as seen from inside aiosqlite's thread: executors on
    the thread's ``sqlite3`` connection, in the transactions the pysqlite path opens
    (no trip: the procedure is already there; errors go back through the trip)."""

    dialect = "sqlite"
    connection: sqlite3.Connection
    outer: _DriverExecutor | None = None
    """The pooled connection's executor, told when this one became unsafe to pool."""

    def __init__(self, statements: _Statements,
                 integrity_errors: tuple[type[Exception], ...]) -> None:
        self.statements = statements
        self.integrity_errors = integrity_errors

    def transaction(self, *, synced: bool = True) -> AbstractContextManager[Executor]:
        """A write transaction (``BEGIN IMMEDIATE``; ``synced=False``: :func:`_unsynced`)."""
        if synced:
            return self._open(SqliteTransport.write_begin)
        return self._open_unsynced()

    @contextmanager
    def _open_unsynced(self) -> Iterator[Executor]:
        here = _Pysqlite(self.connection, self.statements)
        try:
            with _unsynced(here, "sqlite", SqliteTransport.write_begin):
                yield here
        finally:
            if here.unsafe and self.outer is not None:
                self.outer.unsafe = True

    def autocommit(self) -> AbstractContextManager[Executor]:
        """Each statement its own transaction."""
        return self._open(None)

    def reading(self) -> AbstractContextManager[Executor]:
        """One read snapshot (``BEGIN``)."""
        return self._open(SqliteTransport.read_begin)

    def _open(self, begin: str | None) -> AbstractContextManager[Executor]:
        return _within(_Pysqlite(self.connection, self.statements), begin)

    def run(self, procedure: Callable[Concatenate[Transport, P], T], /, *args: P.args,
            **kwargs: P.kwargs) -> T:
        """Already in the thread: ``procedure(self, ...)``."""
        return procedure(self, *args, **kwargs)


class PostgresTransport(DriverTransport):
    """PostgreSQL on psycopg (sync, or async under the async API) or asyncpg (the async
    API's default), for an engine whose connections autocommit."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        if engine.dialect.driver == "asyncpg":
            import asyncpg

            self.driver = _Asyncpg
            self.integrity_errors = (asyncpg.IntegrityConstraintViolationError,
                                     IntegrityError)
            # a server's error, the client's (a closed connection, a protocol state it
            # cannot go on from: InternalClientError), or the socket's
            self.database_errors = (asyncpg.PostgresError, asyncpg.InterfaceError,
                                    asyncpg.InternalClientError, OSError)
        else:
            import psycopg

            self.driver = _AsyncPsycopg if engine.dialect.is_async else _Psycopg
            self.integrity_errors = (psycopg.IntegrityError, IntegrityError)
            self.database_errors = (psycopg.Error,)

    @staticmethod
    def serves(engine: Engine) -> bool:
        """PostgreSQL on psycopg (sync, or async) or asyncpg (the async API's engines),
        autocommitting from connect (chatkeep's own engines do; then a statement is its
        own transaction, as the Core path runs these)."""
        return engine.dialect.name == "postgresql" \
            and engine.dialect.driver in ("psycopg", "asyncpg") and autocommits(engine)


def driver_transport(engine: Engine) -> DriverTransport | None:
    """The driver transport for ``engine``, or ``None`` when it has none (another driver,
    or a PostgreSQL engine that does not autocommit: the Core transport serves it)."""
    for transport in (SqliteTransport, PostgresTransport):
        if transport.serves(engine):
            return transport(engine)
    return None
