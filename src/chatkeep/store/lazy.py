"""Statements built on first use (issue 32 item 11: CLI start-up).

A statement that only one dialect runs (PostgreSQL's ``INSERT ... ON CONFLICT``, its
one-statement append) is built the first time a caller asks for it, not when its module
is imported: building a :mod:`sqlalchemy.dialects.postgresql` construct imports that
dialect and its drivers' modules (about 50 ms), which a process on SQLite (the CLI's read
commands) never needs. The statement is built once and the same object is handed out
after (a driver compiles a statement object once), so the SQL is the one the module
used to build at import.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Table

if TYPE_CHECKING:
    from sqlalchemy.dialects.postgresql import Insert as PgInsert
    from sqlalchemy.dialects.sqlite import Insert as SqliteInsert

__all__ = ["LazyStatements", "dialect_insert"]

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
        raise ValueError(f"no dialect insert for {dialect!r}")
    made: SqliteInsert | PgInsert = insert(table)
    return made
