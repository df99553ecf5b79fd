"""A turn's append and read sent to the database driver itself.

Each turn makes the same few statements (claim seqs and insert, read the session row and
its tail). Through SQLAlchemy each one also pays for parameter processing, result
metadata built from the cursor's description (a Python object per column: 26 for a
session row) and, under the async API, an adapter cursor that buffers every row; on a
local database that machinery costs more than the database's own work. So the repository
sends these statements straight to the driver:

* SQLite (pysqlite, or aiosqlite under the async API): every append, with its tool-call
  plumbing, in one ``BEGIN IMMEDIATE`` ... ``COMMIT``; the history read in one deferred
  transaction (one WAL snapshot).
* PostgreSQL (psycopg, sync or async, or asyncpg under the async API, on an engine that
  autocommits): a plain append (no tool plumbing) as the one-statement append, and the
  history read, each statement its own transaction as on the Core path. Appends with
  tool plumbing take the Core path.
* Both: a fold's compare-and-set of the summary, in a transaction of its own.

The statements are the Core path's own objects (:mod:`chatkeep.store.statements`),
compiled once for the dialect; values go through the dialect's own type processors, so
the stored bytes and the values read are those of the Core path (tests compare both).
Under the async API the driver's coroutines are awaited from inside the bridge
(``await_only``), one hop per statement.

The direct path steps aside while anything listens to the engine's statement events
(``before_cursor_execute``, ``after_cursor_execute``): tracing and statement-level tests
then see every statement on the Core path.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple, NoReturn, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.util import await_only

from chatkeep.errors import InvalidMessage, SessionNotFound
from chatkeep.messages import Message, Role
from chatkeep.store.connections import (
    autocommits,
    driver_error,
    ensure_started,
    store_error,
)
from chatkeep.store.rows import (
    SessionRow,
    message_from_row,
    new_messages,
    session_from_row,
    split_at,
)
from chatkeep.store.schema import (
    chat_messages,
    chat_sessions,
    chat_tool_calls,
    chat_usage,
    ref_values,
)
from chatkeep.store.statements import (
    ALL_LIVE,
    ANSWER_CALL,
    CLAIM_SEQ,
    MESSAGE_COLUMNS,
    PG_APPEND,
    SESSION_BY_ID,
    SESSION_EXISTS,
    SET_SUMMARY,
    UNSUMMARISED,
    Batch,
    append_error,
    pg_append_values,
    plain,
    refuse,
)

T = TypeVar("T")

_Processors = list[tuple[int, Callable[[Any], Any]]]
"""The type processors of the columns that have one, by position."""


def _processors(per_column: Sequence[Callable[[Any], Any] | None]) -> _Processors:
    return [(i, f) for i, f in enumerate(per_column) if f is not None]


def _results(columns: Iterable[Any], dialect: Any) -> _Processors:
    """How ``dialect`` turns what the driver returns for ``columns`` into their values."""
    return _processors([c.type.dialect_impl(dialect).result_processor(dialect, None)
                        for c in columns])


def _bound(processors: _Processors, values: Sequence[Any]) -> list[Any]:
    """``values`` with each column's processor applied (most columns have none)."""
    out = list(values)
    for i, process in processors:
        out[i] = process(out[i])
    return out


class Compiled(NamedTuple):
    """A statement compiled for one driver, and what turns named values into its
    parameters."""

    sql: str
    params: Callable[[dict[str, Any]], Any]


def compile_for_driver(statement: Any, dialect: Any) -> Compiled:
    """``statement`` for ``dialect``'s driver: its own literals (``role = 'system'``)
    filled in, each value through its type's bind processor, given as a list or a dict
    as the driver's paramstyle wants."""
    compiled = statement.compile(dialect=dialect)
    fixed = dict(compiled.params)
    processors = {}
    for name, bind in compiled.binds.items():
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors[name] = process
    order = compiled.positiontup

    def params(given: dict[str, Any]) -> Any:
        values = {**fixed, **given}
        for name, process in processors.items():
            values[name] = process(values[name])
        return values if order is None else [values[n] for n in order]

    return Compiled(str(compiled), params)


# -- the drivers ---------------------------------------------------------------------------

class _Adapter:
    """One driver connection, as the direct path uses it: ``rows`` and ``command`` (and for
    SQLite ``many``), ``in_transaction``, and whether an error left it ``broken``."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def broken(self, error: Exception) -> bool:
        """Whether the connection is unusable after ``error`` (then the pool drops it,
        and the next call connects afresh)."""
        return False


class _Pysqlite(_Adapter):
    """Statements straight to a ``sqlite3`` connection."""

    db: sqlite3.Connection

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def rows(self, sql: str, params: Any = ()) -> list[Any]:
        return self.db.execute(sql, params).fetchall()

    def command(self, sql: str) -> None:
        self.db.execute(sql)

    def many(self, sql: str, rows: list[list[Any]]) -> None:
        if len(rows) == 1:
            self.db.execute(sql, rows[0])
        else:
            self.db.executemany(sql, rows)


class _Aiosqlite(_Adapter):
    """Statements to an aiosqlite connection, awaited from inside the async bridge: one
    hop to its thread per statement (``execute_fetchall``), where SQLAlchemy's adapter
    makes four (cursor, execute, fetch, close)."""

    @property
    def in_transaction(self) -> bool:
        return bool(self.db.in_transaction)

    def rows(self, sql: str, params: Any = ()) -> list[Any]:
        return list(await_only(self.db.execute_fetchall(sql, params)))

    def command(self, sql: str) -> None:
        await_only(self.db.execute_fetchall(sql, ()))

    def many(self, sql: str, rows: list[list[Any]]) -> None:
        for row in rows:
            await_only(self.db.execute_fetchall(sql, row))


class _Psycopg(_Adapter):
    """Statements straight to a psycopg connection (autocommit: each its own
    transaction, unless a ``BEGIN`` opened one)."""

    def broken(self, error: Exception) -> bool:
        return bool(self.db.closed or getattr(self.db, "broken", False))

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self.db.info.transaction_status in (TransactionStatus.INTRANS,
                                                        TransactionStatus.INERROR))

    def rows(self, sql: str, params: Any = ()) -> list[Any]:
        rows: list[Any] = self.db.execute(sql, params).fetchall()
        return rows

    def command(self, sql: str) -> None:
        self.db.execute(sql)


async def _fetch_all(db: Any, sql: str, params: Any) -> list[Any]:
    async with db.cursor() as cursor:
        await cursor.execute(sql, params)
        rows: list[Any] = await cursor.fetchall()
        return rows


class _AsyncPsycopg(_Psycopg):
    """Statements to psycopg's async connection, awaited from inside the bridge: one
    coroutine (execute and fetch) per statement."""

    def rows(self, sql: str, params: Any = ()) -> list[Any]:
        rows: list[Any] = await_only(_fetch_all(self.db, sql, params))
        return rows

    def command(self, sql: str) -> None:
        await_only(self.db.execute(sql))


class _Asyncpg(_Adapter):
    """Statements to an asyncpg connection, awaited from inside the bridge: one coroutine
    per statement; asyncpg prepares each statement once per connection (its own cache)."""

    def broken(self, error: Exception) -> bool:
        """Closed, a client-side error, or the server ending the session."""
        import asyncpg

        return bool(self.db.is_closed() or not isinstance(error, asyncpg.PostgresError)
                    or str(getattr(error, "sqlstate", "")).startswith(("08", "57")))

    @property
    def in_transaction(self) -> bool:
        return bool(self.db.is_in_transaction())

    def rows(self, sql: str, params: Any = ()) -> list[Any]:
        rows: list[Any] = await_only(self.db.fetch(sql, *params))
        return rows

    def command(self, sql: str) -> None:
        await_only(self.db.execute(sql))


# -- what both backends share --------------------------------------------------------------

class DirectPath:
    """What both backends do the same way (the history read, the summary's
    compare-and-set, the row conversions), and the connection that turns driver errors
    into ``StoreError`` and drops a connection the error broke."""

    integrity_errors: type[Exception]
    """The driver's integrity error: passed through, for the append to explain."""
    database_errors: type[Exception] | tuple[type[Exception], ...]
    """The driver's errors: raised as ``StoreError``."""
    write_begin = "BEGIN"
    """How a write transaction starts on this backend."""
    adapter: type[_Adapter]
    """The engine's driver, as the direct path uses it."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        dialect = engine.dialect
        self.session_sql = compile_for_driver(SESSION_BY_ID, dialect)
        self.all_live_sql = compile_for_driver(ALL_LIVE, dialect)
        self.unsummarised_sql = compile_for_driver(UNSUMMARISED, dialect)
        self.exists_sql = compile_for_driver(SESSION_EXISTS, dialect)
        self.summary_sql = compile_for_driver(SET_SUMMARY, dialect)
        self.session_results = _results(chat_sessions.columns, dialect)
        self.message_results = _results(MESSAGE_COLUMNS, dialect)

    @property
    def usable(self) -> bool:
        """False while anything listens to the engine's statement events: those
        listeners (tracing, tests) are owed every statement, so the Core path runs."""
        dispatch = self.engine.dispatch
        return not (dispatch.before_cursor_execute or dispatch.after_cursor_execute)

    def appends(self, batch: Batch) -> bool:
        """Whether this path writes ``batch`` (else the Core path does)."""
        raise NotImplementedError

    def append(self, session_id: str, batch: Batch,
               now: datetime) -> tuple[list[Message], SessionRow]:
        """``Repository.append_messages`` for a batch this path ``appends``."""
        raise NotImplementedError

    def read_history(self, session_id: str) -> tuple[SessionRow, list[Message],
                                                      list[Message]]:
        """``Repository.read_history``, the same statements as the Core path."""
        with self._connection() as db:
            return self._reading(db, lambda: self._read(db, session_id))

    def set_summary(self, session_id: str, expected_version: int, summary: str,
                    watermark: int) -> SessionRow | None:
        """``Repository.compare_and_set_summary``: the same statement, in a transaction of
        its own (a backend lost before the COMMIT leaves the summary as it was)."""
        values = {"b_session_id": session_id, "b_expected": expected_version,
                  "b_summary": summary, "b_watermark": watermark}
        statement = self.summary_sql
        with self._connection() as db:
            found = self._in_transaction(
                db, self.write_begin, lambda: db.rows(statement.sql, statement.params(values)))
        return self.session(found[0]) if found else None

    @staticmethod
    def _in_transaction(db: Any, begin: str, work: Callable[[], T]) -> T:
        db.command(begin)
        try:
            result = work()
            db.command("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.command("ROLLBACK")
            raise
        return result

    def _reading(self, db: Any, work: Callable[[], T]) -> T:
        return work()

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        ensure_started(self.engine)
        try:
            pooled = self.engine.raw_connection()
        except SQLAlchemyError as exc:
            raise store_error(exc) from exc
        db = self.adapter(pooled.driver_connection)
        try:
            yield db
        except self.integrity_errors:
            raise
        except self.database_errors as exc:
            if db.broken(exc):
                pooled.invalidate(exc)
            raise driver_error(exc) from exc
        except BaseException as exc:
            if not isinstance(exc, Exception):  # cancelled mid-statement: state unknown
                pooled.invalidate()
            raise
        finally:
            pooled.close()

    def session(self, raw: Sequence[Any]) -> SessionRow:
        """A ``chat_sessions`` row as the driver returned it."""
        results = self.session_results
        return session_from_row(_bound(results, raw) if results else raw)

    def _read(self, db: Any, session_id: str) -> tuple[SessionRow, list[Message],
                                                       list[Message]]:
        params: dict[str, Any] = {"b_session_id": session_id}
        found = db.rows(self.session_sql.sql, self.session_sql.params(params))
        if not found:
            raise SessionNotFound(f"no session {session_id!r}")
        row = self.session(found[0])
        watermark = row.summary_watermark
        statement = self.unsummarised_sql if watermark > 0 else self.all_live_sql
        params["b_watermark"] = watermark
        results = self.message_results
        raws = db.rows(statement.sql, statement.params(params))
        messages = [message_from_row(_bound(results, raw) if results else raw) for raw in raws]
        return (row, *split_at(messages, watermark))

    def _refuse(self, db: Any, session_id: str) -> NoReturn:
        """No seq was claimed: say whether the session is missing or closed."""
        exists = db.rows(self.exists_sql.sql, self.exists_sql.params(
            {"b_session_id": session_id}))
        refuse(session_id, exists=bool(exists))


# -- SQLite --------------------------------------------------------------------------------

_MESSAGE_FIELDS = ("session_id", "seq", "role", "content", "tool_calls", "tool_call_id", "name",
                   "tokens", "created_at", "metadata", "native")
_CALL_FIELDS = ("session_id", "call_id", "call_seq", "name")
_USAGE_FIELDS = ("session_id", "tenant_type", "tenant_id", "tenant_id_int", "purpose", "model",
                 "prompt_tokens", "completion_tokens", "created_at")
_CALL_FOUND = "SELECT call_seq, result_seq FROM chat_tool_calls WHERE session_id = ? AND " \
              "call_id = ?"


class SqliteDirect(DirectPath):
    """Every append (tool plumbing included) and the history read, on pysqlite or
    aiosqlite, for SQLite files (an append is ~0.1 ms of SQLite's own work)."""

    integrity_errors = sqlite3.IntegrityError
    database_errors = sqlite3.Error
    write_begin = "BEGIN IMMEDIATE"

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        dialect = engine.dialect
        self.adapter = _Pysqlite if dialect.driver == "pysqlite" else _Aiosqlite
        quote = dialect.identifier_preparer.quote

        def insert_sql(table: Any, names: Sequence[str]) -> tuple[str, _Processors]:
            sql = (f"INSERT INTO {quote(table.name)} ({', '.join(quote(n) for n in names)}) "
                   f"VALUES ({', '.join('?' for _ in names)})")
            return sql, _processors([table.c[n].type.dialect_impl(dialect)
                                     .bind_processor(dialect) for n in names])

        self.message_sql, self.message_binds = insert_sql(chat_messages, _MESSAGE_FIELDS)
        self.call_sql, self.call_binds = insert_sql(chat_tool_calls, _CALL_FIELDS)
        self.usage_sql, self.usage_binds = insert_sql(chat_usage, _USAGE_FIELDS)
        self.claim_sql = compile_for_driver(CLAIM_SEQ, dialect)
        self.answer_sql = compile_for_driver(ANSWER_CALL, dialect)

    @staticmethod
    def serves(engine: Engine) -> bool:
        """SQLite on pysqlite, or on aiosqlite (the async API's engine, whose repository
        runs inside the bridge)."""
        return engine.dialect.name == "sqlite" and engine.dialect.driver in ("pysqlite",
                                                                              "aiosqlite")

    def appends(self, batch: Batch) -> bool:
        """Every batch."""
        return True

    def append(self, session_id: str, batch: Batch,
               now: datetime) -> tuple[list[Message], SessionRow]:
        """The append in one ``BEGIN IMMEDIATE`` ... ``COMMIT``."""
        try:
            with self._connection() as db:
                return self._in_transaction(
                    db, self.write_begin, lambda: self._write(db, session_id, batch, now))
        except sqlite3.IntegrityError as exc:
            raise append_error(exc, batch) from None

    def _reading(self, db: Any, work: Callable[[], T]) -> T:
        return self._in_transaction(db, "BEGIN", work)

    def _write(self, db: _Pysqlite | _Aiosqlite, session_id: str, batch: Batch,
               now: datetime) -> tuple[list[Message], SessionRow]:
        billed_tokens = sum(b.usage.total_tokens for _, _, b in batch if b is not None)
        claimed = db.rows(self.claim_sql.sql, self.claim_sql.params({
            "b_count": len(batch), "b_now": now, "b_billed": billed_tokens,
            "b_session_id": session_id}))
        if not claimed:
            self._refuse(db, session_id)
        session = self.session(claimed[0])
        rows: list[list[Any]] = []
        calls: list[list[Any]] = []
        usages: list[list[Any]] = []
        tenant = ref_values("tenant", session.tenant)
        messages = new_messages(session, now, batch)
        for message, (draft, tokens, billed) in zip(messages, batch, strict=True):
            seq = message.seq
            values = (session_id, seq, draft.role.value, draft.content,
                      [c.to_openai() for c in draft.tool_calls] or None, draft.tool_call_id,
                      draft.name, tokens, now, message.metadata, message.native or None)
            rows.append(_bound(self.message_binds, values))
            calls.extend(_bound(self.call_binds, (session_id, c.id, seq, c.name))
                         for c in draft.tool_calls)
            if billed is not None:
                usages.append(_bound(self.usage_binds, (
                    session_id, tenant["tenant_type"], tenant["tenant_id"],
                    tenant["tenant_id_int"], billed.purpose, billed.model,
                    billed.usage.prompt_tokens, billed.usage.completion_tokens, now)))
        if calls:  # calls and answers first, as in the Core path
            db.many(self.call_sql, calls)
        for message in messages:
            if message.role is Role.TOOL:
                self._answer(db, session_id, message.tool_call_id, message.seq)
        db.many(self.message_sql, rows)
        if usages:
            db.many(self.usage_sql, usages)
        return messages, session

    def _answer(self, db: _Pysqlite | _Aiosqlite, session_id: str, call_id: str | None,
                seq: int) -> None:
        if not call_id:
            raise InvalidMessage("a tool message needs the tool_call_id it answers")
        if db.rows(self.answer_sql.sql, self.answer_sql.params(
                {"b_seq": seq, "b_session_id": session_id, "b_call_id": call_id})):
            return
        found = db.rows(_CALL_FOUND, (session_id, call_id))
        row = found[0] if found else None
        if row is None or row[0] >= seq:
            raise InvalidMessage(
                f"tool result for {call_id!r} has no matching earlier tool call in this session")
        raise InvalidMessage(
            f"tool call {call_id!r} was already answered by message seq {row[1]}")


# -- PostgreSQL ----------------------------------------------------------------------------

class PostgresDirect(DirectPath):
    """A plain append (the one-statement append) and the history read, on psycopg (sync,
    or async under the async API) or asyncpg (the async API's default), for an engine
    whose connections autocommit."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        if engine.dialect.driver == "asyncpg":
            import asyncpg

            self.adapter = _Asyncpg
            self.integrity_errors = asyncpg.IntegrityConstraintViolationError
            # a server's error, the client's (a closed connection), or the socket's
            self.database_errors = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
        else:
            import psycopg

            self.adapter = _AsyncPsycopg if engine.dialect.is_async else _Psycopg
            self.integrity_errors = psycopg.IntegrityError
            self.database_errors = psycopg.Error
        self.append_sql = {usage: compile_for_driver(statement, engine.dialect)
                           for usage, statement in PG_APPEND.items()}

    @staticmethod
    def serves(engine: Engine) -> bool:
        """PostgreSQL on psycopg (sync, or async) or asyncpg (the async API's engines),
        autocommitting from connect (chatkeep's own engines do; then a statement is its
        own transaction, as the Core path runs these)."""
        return engine.dialect.name == "postgresql" \
            and engine.dialect.driver in ("psycopg", "asyncpg") and autocommits(engine)

    def appends(self, batch: Batch) -> bool:
        """A batch without tool plumbing."""
        return plain(batch)

    def append(self, session_id: str, batch: Batch,
               now: datetime) -> tuple[list[Message], SessionRow]:
        """The one-statement append: claim, insert, bill, in one autocommit statement."""
        usage, values = pg_append_values(session_id, batch, now)
        statement = self.append_sql[usage]
        try:
            with self._connection() as db:
                found = db.rows(statement.sql, statement.params(values))
                if not found:
                    self._refuse(db, session_id)
        except self.integrity_errors as exc:
            raise append_error(exc, batch) from None
        session = self.session(found[0])
        return new_messages(session, now, batch), session


def direct_path(engine: Engine) -> DirectPath | None:
    """The direct path for ``engine``, or ``None`` when it has none (another driver, or
    a PostgreSQL engine that does not autocommit: everything then takes the Core path)."""
    for path in (SqliteDirect, PostgresDirect):
        if path.serves(engine):
            return path(engine)
    return None
