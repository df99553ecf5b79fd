"""Where a store procedure's statements run: the executor protocol, and its SQLAlchemy
Core implementation.

A procedure (:mod:`chatkeep.store.procedures`) asks a :class:`Transport` for an
:class:`Executor` (in a transaction, in autocommit, or for reads) and hands it the
prebuilt statements of :mod:`chatkeep.store.statements`. :class:`CoreTransport` runs
them through SQLAlchemy; :class:`chatkeep.store.direct.DriverTransport` sends the same
statement objects to the database driver itself. Either way database errors surface as
``StoreError``, and integrity errors pass through for the procedure to explain. A caller
runs a whole procedure with ``transport.run(procedure, ...)``: where the driver lives in
a thread of its own (aiosqlite), the procedure then goes there once, not per statement.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

from sqlalchemy import Connection, Engine, Executable
from sqlalchemy.exc import IntegrityError

from chatkeep.store.connections import autocommit, reading, transaction

Row = Sequence[Any]
"""A result row: read by position."""

P = ParamSpec("P")
T = TypeVar("T")


class Executor(Protocol):
    """One connection, inside the transaction (or autocommit) it was opened for."""

    def rows(self, statement: Executable, params: Mapping[str, Any]) -> Sequence[Row]:
        """Run ``statement`` (a query, or a write with ``RETURNING``) once with ``params``;
        the rows it returns."""
        ...

    def many(self, statement: Executable, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run an insert for each of ``rows`` (at least one; the same keys in each)."""
        ...


class Transport(Protocol):
    """Opens executors on one engine: what a procedure needs to know of where its
    statements go."""

    dialect: str
    """The database: ``"sqlite"`` or ``"postgresql"``."""
    integrity_errors: tuple[type[Exception], ...]
    """What a violated constraint raises through this transport."""

    def transaction(self, *, synced: bool = True) -> AbstractContextManager[Executor]:
        """One write transaction: committed on success, rolled back on any error.
        ``synced=False``: its commit need not wait for the disk (visible at once, and
        durable against a crash of the process; durable against power loss with the
        next synced commit), for writes whose own sync would only add latency."""
        ...

    def autocommit(self) -> AbstractContextManager[Executor]:
        """A connection whose every statement is its own transaction."""
        ...

    def reading(self) -> AbstractContextManager[Executor]:
        """A connection for reads (on SQLite, one snapshot for the block)."""
        ...

    def run(self, procedure: Callable[Concatenate[Transport, P], T], /, *args: P.args,
            **kwargs: P.kwargs) -> T:
        """``procedure(transport, *args, **kwargs)``, whole: a procedure that only runs
        statements (no model call, nothing awaited), over this transport or one standing
        for it where the driver is."""
        ...


class CoreExecutor:
    """An :class:`Executor` over a SQLAlchemy ``Connection``."""

    __slots__ = ("conn",)

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def rows(self, statement: Executable, params: Mapping[str, Any]) -> Sequence[Row]:
        """``Connection.execute``, every row fetched."""
        return self.conn.execute(statement, params).all()

    def many(self, statement: Executable, rows: Sequence[Mapping[str, Any]]) -> None:
        """``Connection.execute`` with a list of parameter sets."""
        self.conn.execute(statement, rows)


class CoreTransport:
    """A :class:`Transport` through SQLAlchemy Core (:mod:`chatkeep.store.connections`)."""

    integrity_errors: tuple[type[Exception], ...] = (IntegrityError,)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    @contextmanager
    def transaction(self, *, synced: bool = True) -> Iterator[Executor]:
        """:func:`chatkeep.store.connections.transaction`. ``synced=False`` is honoured on
        PostgreSQL (``SET LOCAL synchronous_commit TO OFF``); SQLite's level cannot
        change inside SQLAlchemy's transaction, so there the commit syncs as configured
        (this path serves while statement listeners are attached)."""
        with transaction(self.engine) as conn:
            if not synced and self.dialect == "postgresql":
                conn.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")
            yield CoreExecutor(conn)

    @contextmanager
    def autocommit(self) -> Iterator[Executor]:
        """:func:`chatkeep.store.connections.autocommit`."""
        with autocommit(self.engine) as conn:
            yield CoreExecutor(conn)

    @contextmanager
    def reading(self) -> Iterator[Executor]:
        """:func:`chatkeep.store.connections.reading`."""
        with reading(self.engine) as conn:
            yield CoreExecutor(conn)

    def run(self, procedure: Callable[Concatenate[Transport, P], T], /, *args: P.args,
            **kwargs: P.kwargs) -> T:
        """``procedure(self, *args, **kwargs)``."""
        return procedure(self, *args, **kwargs)
