"""The async SQLite driver (``chatkeep.aio.sqlite_driver``): a statement is one trip to
aiosqlite's thread, a ``BEGIN`` travels with the statement after it, and ending a
transaction that never started costs nothing; results, counts, errors and isolation are
what SQLAlchemy's own aiosqlite adapter gives."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiosqlite.core
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from chatkeep.aio.engine import make_async_engine
from chatkeep.aio.sqlite_driver import OneTripConnection


@contextmanager
def trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every call made on an aiosqlite connection's thread, by name, while inside."""
    made: list[str] = []
    original = aiosqlite.core.Connection._execute

    async def counted(self: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(getattr(fn, "__name__", repr(fn)))
        return await original(self, fn, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(aiosqlite.core.Connection, "_execute", counted)
        yield made


def engine(tmp_path: Path) -> AsyncEngine:
    return make_async_engine(f"sqlite:///{tmp_path / 'trips.db'}")


def test_statements_reads_and_writes_take_the_fewest_trips(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def run() -> None:
        db = engine(tmp_path)
        async with db.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
        async with db.connect() as conn:  # warm the pool: connecting is not measured
            assert isinstance((await conn.get_raw_connection()).dbapi_connection,
                              OneTripConnection)
        with trips(monkeypatch) as made:
            async with db.begin() as conn:  # BEGIN IMMEDIATE + insert, then the commit
                result = await conn.execute(
                    text("INSERT INTO t (name) VALUES (:n) RETURNING id"), {"n": "a"})
                assert result.scalar_one() == 1
            assert made == ["_run", "commit"]
            made.clear()
            async with db.begin() as conn:  # executemany: one trip for every row
                await conn.execute(text("INSERT INTO t (name) VALUES (:n)"),
                                   [{"n": "b"}, {"n": "c"}, {"n": "d"}])
            assert made == ["_run", "commit"]
            made.clear()
            async with db.connect() as conn:  # a read: the statement, then the rollback
                rows = (await conn.execute(text("SELECT id, name FROM t ORDER BY id"))).all()
            assert [tuple(r) for r in rows] == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
            assert made == ["_run", "rollback"]
            made.clear()
            async with db.begin():  # a transaction with no statement: no trip at all
                pass
            assert made == []
            async with db.begin() as conn:
                updated = await conn.execute(text("UPDATE t SET name = name || '!' "
                                                  "WHERE id > 2"))
                assert updated.rowcount == 2
        await db.dispose()

    asyncio.run(run())


def test_errors_roll_back_and_a_held_begin_still_locks(tmp_path: Path) -> None:
    async def run() -> None:
        db = engine(tmp_path)
        async with db.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE)"))
            await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
        with pytest.raises(IntegrityError):
            async with db.begin() as conn:
                await conn.execute(text("INSERT INTO t (name) VALUES ('b')"))
                await conn.execute(text("INSERT INTO t (name) VALUES ('a')"))
        async with db.connect() as conn:  # the failed transaction left nothing
            names = (await conn.execute(text("SELECT name FROM t"))).scalars().all()
            assert names == ["a"]
        with pytest.raises(OperationalError, match="no such table"):
            async with db.connect() as conn:
                await conn.execute(text("SELECT * FROM missing"))
        await db.dispose()
        # A write transaction (BEGIN IMMEDIATE, held back to travel with its first
        # statement) excludes other writers from that statement until its commit.
        db = engine(tmp_path)
        other = sqlite3.connect(tmp_path / "trips.db", timeout=0.05, isolation_level=None)
        async with db.begin() as conn:
            await conn.execute(text("INSERT INTO t (name) VALUES ('held')"))
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t (name) VALUES ('after')")
        other.execute("COMMIT")
        other.close()
        async with db.connect() as conn:
            names = (await conn.execute(text("SELECT name FROM t ORDER BY id"))).scalars().all()
            assert names == ["a", "held", "after"]
        await db.dispose()

    asyncio.run(run())
