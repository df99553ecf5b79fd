"""Keeps opening one new SQLite file at the same moment. SQLite can answer the switch
to WAL "database is locked" at once, without its busy handler, so one of two keeps
starting together failed now and then (the Agents SDK's own test of concurrent first
access caught it). ``engine._set_wal`` retries the switch until the busy timeout,
yielding to the event loop under the async API."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.util import greenlet_spawn

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.store import engine

ORG = Ref("organization", 1)


class _Contended:
    """A cursor whose switch to WAL is refused ``refusals`` times, as SQLite refuses it."""

    def __init__(self, refusals: int, message: str = "database is locked") -> None:
        self.refusals = refusals
        self.message = message
        self.calls = 0

    def execute(self, sql: str) -> None:
        assert sql == "PRAGMA journal_mode=WAL"
        self.calls += 1
        if self.calls <= self.refusals:
            raise RuntimeError(self.message)


def test_a_refused_switch_to_wal_is_tried_again() -> None:
    cursor = _Contended(refusals=3)
    engine._set_wal(cursor)
    assert cursor.calls == 4


def test_another_error_or_the_end_of_the_timeout_is_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="disk I/O error"):
        engine._set_wal(_Contended(refusals=1, message="disk I/O error"))
    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_MS", 50)
    with pytest.raises(RuntimeError, match="database is locked"):
        engine._set_wal(_Contended(refusals=10_000))


def test_the_wait_yields_to_the_event_loop_inside_the_bridge() -> None:
    ticks: list[int] = []

    async def ticking() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(0)

    async def scenario() -> int:
        clock = asyncio.get_running_loop().create_task(ticking())
        cursor = _Contended(refusals=6)
        await greenlet_spawn(engine._set_wal, cursor)
        clock.cancel()
        return cursor.calls

    assert asyncio.run(scenario()) == 7
    assert len(ticks) >= 6  # the loop ran during each pause


def test_two_keeps_starting_on_one_new_file_both_open(tmp_path: Path) -> None:
    """The race itself, sixty times (before the fix, two runs of three failed at forty)."""
    async def once(path: Path) -> list[Any]:
        first = AsyncChatkeep(f"sqlite:///{path}", dispatcher="inline")
        second = AsyncChatkeep(f"sqlite:///{path}", dispatcher="inline")

        async def write(keep: AsyncChatkeep, key: str) -> None:
            await (await keep.sessions.open(key, ORG)).add_user(key)

        try:
            return await asyncio.gather(write(first, "a"), write(second, "b"),
                                        return_exceptions=True)
        finally:
            await first.close()
            await second.close()

    async def scenario() -> list[Any]:
        return [error for i in range(60)
                for error in await once(tmp_path / f"new-{i}.db") if error is not None]

    assert asyncio.run(scenario()) == []
