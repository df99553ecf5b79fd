"""An append through the async API on SQLite is one trip to aiosqlite's thread (issue 37
item 4): its ``BEGIN IMMEDIATE``, statements and ``COMMIT`` run there together (they were
a trip each), and what it refuses leaves nothing behind and the connection usable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from chatkeep import ChatkeepError, Ref, Usage
from chatkeep.aio import AsyncChatkeep

ORG = Ref("organization", 1)


def test_each_append_is_one_trip(tmp_path: Path, trips: list[str]) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'a.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.create(ORG)
            await session.add_user("warm-up")
            appends: list[Callable[[], Awaitable[Any]]] = [
                lambda: session.add_user("hello"),
                lambda: session.add_assistant("hi", usage=Usage(3, 4), model="m"),
                lambda: session.add_assistant(tool_calls=[
                    {"id": "c1", "function": {"name": "f", "arguments": "{}"}}]),
                lambda: session.add_tool_result("c1", "r")]
            for append in appends:
                trips.clear()
                await append()
                assert len(trips) == 1, trips
            trips.clear()
            stored = await keep.sessions.get(session.id, ORG)
            assert [m.seq for m in await stored.read_messages()] == [1, 2, 3, 4, 5]
            assert stored.total_tokens == 7
        finally:
            await keep.close()

    asyncio.run(main())


def test_a_refused_append_writes_nothing_and_the_next_one_goes_through(
        tmp_path: Path, trips: list[str]) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'b.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.create(ORG)
            await session.add_assistant(tool_calls=[{"id": "c1", "function": {"name": "f"}}])
            await session.add_tool_result("c1", "r")
            trips.clear()
            with pytest.raises(ChatkeepError):  # c1 is answered already
                await session.add_tool_result("c1", "again")
            assert len(trips) == 1, trips
            assert (await session.add_user("next")).seq == 3
            stored = await keep.sessions.get(session.id, ORG)
            assert [m.content for m in await stored.read_messages()] == [None, "r", "next"]
        finally:
            await keep.close()

    asyncio.run(main())


def test_listeners_owed_every_statement_get_them(tmp_path: Path, trips: list[str]) -> None:
    """While anything listens to the engine's statements (tracing, tests), an append's
    statements go through SQLAlchemy, one by one, as before."""
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'c.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.create(ORG)
            core = await keep.core()
            seen: list[str] = []
            event.listen(core.engine, "before_cursor_execute",
                         lambda *args: seen.append(args[2].split()[0]))
            await session.add_user("hello")
            assert "INSERT" in seen and "UPDATE" in seen
        finally:
            await keep.close()

    asyncio.run(main())
