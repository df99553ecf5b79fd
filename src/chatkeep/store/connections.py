"""Connections for the SQL modules: every database error surfaces as ``StoreError``.

Integrity errors pass through unchanged inside a transaction, so a caller that
expects one (a duplicate tool-call id) can turn it into a precise error. Reads
are marked read-only, so SQLite begins them deferred (a WAL snapshot) instead of
taking the write lock.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from chatkeep.errors import ChatkeepError, ConnectionLost, StoreError
from chatkeep.store.engine import READ_ONLY

T = TypeVar("T")

_STARTUPS: weakref.WeakKeyDictionary[Engine, Callable[[], None]] = weakref.WeakKeyDictionary()
_RUNNING: weakref.WeakSet[Engine] = weakref.WeakSet()
_STARTING = threading.RLock()


def on_first_use(engine: Engine, startup: Callable[[], None]) -> None:
    """Run ``startup`` (open the database, create or check the schema) just before the
    first connection of ``engine`` is used, once: building a ``Chatkeep`` opens nothing."""
    _STARTUPS[engine] = startup


def ensure_started(engine: Engine) -> None:
    """Run ``engine``'s pending startup, if any (every connection helper calls this; after
    the first success it is one dictionary look-up). A failed startup stays pending, so
    the next use tries again."""
    if engine not in _STARTUPS:
        return
    with _STARTING:  # other threads wait here until the schema is there
        startup = _STARTUPS.get(engine)
        if startup is None or engine in _RUNNING:
            return  # started meanwhile, or this is the startup's own connection
        _RUNNING.add(engine)
        try:
            startup()
        finally:
            _RUNNING.discard(engine)
        _STARTUPS.pop(engine, None)


def store_error(exc: SQLAlchemyError) -> StoreError:
    """One line saying what the database refused (the driver's message, not SQLAlchemy's
    wrapper with the statement and a link); ``ConnectionLost`` when the connection died
    (SQLAlchemy has then replaced every older pooled connection)."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        return driver_error(exc.orig, lost=exc.connection_invalidated)
    return StoreError(f"database error: {type(exc).__name__}: {exc}")


#: What a server says when a pooler (PgBouncer in transaction mode) handed the statement
#: to another server connection than the one that prepared it.
_PREPARED_ELSEWHERE = re.compile(r'prepared statement "[^"]*" (?:does not exist|already exists)')
#: The fix for it, in chatkeep's words.
PREPARED_STATEMENTS_HINT = (
    "the server does not know this connection's prepared statement: behind PgBouncer in "
    "transaction mode (or another pooler that moves a client between server connections) "
    "set store.prepared_statements = false, or add ?prepared_statements=false to the URL")


def driver_error(exc: BaseException, *, lost: bool = False) -> StoreError:
    """A driver's own error as one line (also what the direct driver paths raise); a
    prepared statement lost to a pooler says what to set."""
    detail = str(exc).strip().splitlines()
    kind = ConnectionLost if lost else StoreError
    line = f"database error: {type(exc).__name__}: {detail[0] if detail else ''}".rstrip(": ")
    if _PREPARED_ELSEWHERE.search(line):
        line = f"{line} ({PREPARED_STATEMENTS_HINT})"
    return kind(line)


@contextmanager
def _discarding_on_surprise(conn: Connection) -> Iterator[Connection]:
    """``conn``, discarded (not pooled again) when the block raises something nobody
    classified: a bug, a cancellation, a driver error SQLAlchemy did not wrap. The
    connection may be mid-protocol then; the next caller must not inherit it."""
    try:
        yield conn
    except (ChatkeepError, SQLAlchemyError):
        raise
    except BaseException:
        conn.invalidate()
        raise


def retrying_reads(read: Callable[..., T]) -> Callable[..., T]:
    """A read retried once when its connection was lost (``ConnectionLost``): after a
    restart the pool has been emptied, so the retry runs on a fresh connection."""
    @functools.wraps(read)
    def call(*args: Any, **kwargs: Any) -> T:
        try:
            return read(*args, **kwargs)
        except ConnectionLost:
            return read(*args, **kwargs)

    return call


def autocommits(engine: Engine) -> bool:
    """Whether ``engine``'s connections autocommit unless told otherwise: chatkeep's
    PostgreSQL engines do (most of a turn is single statements, which then need no
    isolation switch per checkout); so may an engine an application passes in."""
    return getattr(engine.dialect, "_on_connect_isolation_level", None) == "AUTOCOMMIT"


def _transaction_level(engine: Engine) -> str:
    """The level an autocommit engine's connection switches to for a transaction: the
    server's default."""
    return engine.dialect.default_isolation_level or "READ COMMITTED"


@contextmanager
def begin(engine: Engine) -> Iterator[Connection]:
    """``engine.begin()``, but a real transaction on an autocommit engine too (there it
    switches the connection to the server's default level for the block)."""
    ensure_started(engine)
    with engine.connect() as conn, _discarding_on_surprise(conn):
        if autocommits(engine):
            conn.execution_options(isolation_level=_transaction_level(engine))
        with conn.begin():
            yield conn


@contextmanager
def transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction; committed on success, rolled back on any error."""
    try:
        with begin(engine) as conn:
            yield conn
    except IntegrityError:
        raise
    except SQLAlchemyError as exc:
        raise store_error(exc) from exc


@contextmanager
def autocommit(engine: Engine) -> Iterator[Connection]:
    """A connection whose every statement is its own transaction: for a write that is
    one statement, it saves the BEGIN and COMMIT round trips."""
    ensure_started(engine)
    try:
        with engine.connect() as conn, _discarding_on_surprise(conn):
            yield conn if autocommits(engine) else \
                conn.execution_options(isolation_level="AUTOCOMMIT")
    except IntegrityError:
        raise
    except SQLAlchemyError as exc:
        raise store_error(exc) from exc


@contextmanager
def reading(engine: Engine, *, block: bool = False) -> Iterator[Connection]:
    """A connection for reads.

    SQLite reads begin deferred: one WAL snapshot for the whole block. PostgreSQL reads
    run in autocommit: under READ COMMITTED each statement of a transaction takes its own
    snapshot anyway, so BEGIN and ROLLBACK would only add two round trips, and a ROLLBACK
    also makes psycopg forget every prepared statement (each query parsed again, and a
    ``DEALLOCATE ALL`` round trip). ``block=True`` keeps a transaction on PostgreSQL too,
    for ``SET LOCAL``.
    """
    ensure_started(engine)
    options: dict[str, Any] = {READ_ONLY: True}
    if autocommits(engine):
        if block:
            options["isolation_level"] = _transaction_level(engine)
    elif not block and engine.dialect.name == "postgresql":
        options["isolation_level"] = "AUTOCOMMIT"
    try:
        with engine.connect() as conn, _discarding_on_surprise(conn):
            yield conn.execution_options(**options)
            if block:
                conn.commit()  # not a ROLLBACK, for psycopg's prepared statements
    except SQLAlchemyError as exc:
        raise store_error(exc) from exc
