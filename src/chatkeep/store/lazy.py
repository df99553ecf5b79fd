"""Statements built on first use (issue 32 item 11: CLI start-up).

A statement that only one dialect runs (PostgreSQL's ``INSERT ... ON CONFLICT``, its
one-statement append) is built the first time a caller asks for it, not when its module
is imported: building a :mod:`sqlalchemy.dialects.postgresql` construct imports that
dialect and its drivers' modules (about 50 ms), which a process on SQLite (the CLI's read
commands) never needs. The statement is built once and the same object is handed out
after (a driver compiles a statement object once), so the SQL is the one the module
used to build at import.

An index's ``postgresql_*`` options (a partial index's ``WHERE``, ``USING gin``) would
import the dialect too, when the ``Index`` is made (SQLAlchemy checks them against the
dialect's arguments): :func:`postgresql_options` attaches them the first time anything
asks for the index's PostgreSQL options or lists all its options (PostgreSQL's DDL,
Alembic's comparison, a copy), so the DDL is the same and SQLite never asks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Index, Table
from sqlalchemy.util import PopulateDict

from chatkeep.errors import InvalidArgument

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import Insert as PgInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

__all__ = ["LazyStatements", "dialect_insert", "postgresql_options"]

K = TypeVar("K")
V = TypeVar("V")


class LazyStatements(Mapping[K, V]):
    """A fixed set of keys (dialect names, flags), each value built by ``build(key)`` on
    its first lookup and kept; iteration, ``in`` and ``len`` build nothing."""

    __slots__ = ("_build", "_built", "_keys")

    def __init__(self, keys: Iterable[K], build: Callable[[K], V]) -> None:
        self._keys = tuple(keys)
        self._build = build
        self._built: dict[K, V] = {}

    def __getitem__(self, key: K) -> V:
        try:
            return self._built[key]
        except KeyError:
            if key not in self._keys:
                raise
        # Two threads may both build: setdefault keeps the first, so all callers share
        # one object.
        return self._built.setdefault(key, self._build(key))

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __iter__(self) -> Iterator[K]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"LazyStatements({list(self._keys)!r}, built={list(self._built)!r})"


def dialect_insert(dialect: str, table: Table) -> SqliteInsert | PgInsert:
    """``INSERT`` into ``table`` in ``dialect``'s own construct (``sqlite`` or
    ``postgresql``: the one with ``on_conflict_do_nothing``), importing that dialect
    only now."""
    insert: Any
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise InvalidArgument(f"no dialect insert for {dialect!r}")
    made: SqliteInsert | PgInsert = insert(table)
    return made


_PG = "postgresql"


class _PendingOptions(PopulateDict[str, Any]):
    """An index's ``dialect_options`` holding ``postgresql_*`` keyword arguments not yet
    checked: they are checked and stored (as ``Index(..., postgresql_where=...)`` does)
    the first time the PostgreSQL entry is asked for or the entries are listed; another
    dialect's entry (SQLite's DDL asks for ``["sqlite"]``) leaves them pending."""

    def __init__(self, index: Index, pending: dict[str, Any]) -> None:
        super().__init__(index._kw_reg_for_dialect_cls)
        self._index = index
        self._pending = pending

    def _attach(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, {}
            self._index._validate_dialect_kwargs(pending)

    def __missing__(self, key: Any) -> Any:
        if key == _PG and self._pending:
            self._attach()
            if dict.__contains__(self, key):
                return dict.__getitem__(self, key)
        return super().__missing__(key)

    def __contains__(self, key: object) -> bool:
        if key == _PG:
            self._attach()
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[str]:
        self._attach()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._attach()
        return dict.__len__(self)

    def keys(self) -> Any:
        self._attach()
        return dict.keys(self)

    def values(self) -> Any:
        self._attach()
        return dict.values(self)

    def items(self) -> Any:
        self._attach()
        return dict.items(self)

    def get(self, key: str, default: Any = None) -> Any:
        if key == _PG:
            self._attach()
        return dict.get(self, key, default)

    def copy(self) -> dict[str, Any]:
        self._attach()
        return dict(dict.items(self))

    def __repr__(self) -> str:
        self._attach()
        return dict.__repr__(self)


def postgresql_options(index: Index, **options: Any) -> Index:
    """``index`` with PostgreSQL options (``where=``, ``using=``: what
    ``Index(..., postgresql_where=...)`` takes), attached on first use: a process that
    never builds PostgreSQL DDL or compares the schema never imports the dialect."""
    if "dialect_options" in index.__dict__ and isinstance(index.__dict__["dialect_options"],
                                                          _PendingOptions):
        raise InvalidArgument(f"index {index.name!r} already has pending PostgreSQL options")
    lazy = _PendingOptions(index, {f"{_PG}_{name}": value for name, value in options.items()})
    dict.update(lazy, index.dialect_options)  # what the index was made with (SQLite's)
    index.__dict__["dialect_options"] = lazy
    return index
