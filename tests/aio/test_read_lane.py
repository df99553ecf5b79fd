"""``AsyncChatkeep.read``: a read-only store procedure on the keep's read lane (a SQLite
file's connection of its own, one trip to its thread, no bridge), or through the bridge
where the lane stands aside; the same answers either way."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest
from sqlalchemy import event, text

from chatkeep import Ref, SessionNotFound, StoreError
from chatkeep.aio import AsyncChatkeep, KeepClosed
from chatkeep.aio.sessions import core_session
from chatkeep.store.executor import Transport
from chatkeep.store.newest import read_newest_rows

ORG = Ref("organization", 1)


def seqs(watermark: int, rows: list[Any]) -> tuple[int, list[int]]:
    return watermark, [int(row[1]) for row in rows]


def newest(keep: AsyncChatkeep, session_id: str, limit: int) -> Any:
    return keep.read(read_newest_rows, session_id, limit, seqs)


def write_on(transport: Transport) -> None:
    """A procedure that writes, which the lane must refuse."""
    with transport.autocommit() as ex:
        ex.rows(text("UPDATE chat_sessions SET title = 'changed'"), {})


def test_a_read_sees_every_commit_and_answers_as_through_the_bridge(db_url: str) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(db_url, dispatcher="inline")
        try:
            session = await keep.sessions.open("lane", ORG)
            chat = core_session(session)
            core = await keep.core()
            for i in range(1, 6):
                await session.add_user(f"message {i}")  # committed on the pool's connection
                assert await newest(keep, chat.id, 3) == (0, list(range(max(1, i - 2), i + 1)))
            through_bridge = await keep.run(core.repository.transport.run, read_newest_rows,
                                            chat.id, 3, seqs)
            assert await newest(keep, chat.id, 3) == through_bridge
            with pytest.raises(SessionNotFound):
                await newest(keep, "no-such-session", 3)
            if db_url.startswith("sqlite"):
                assert keep._lane is not None and keep._lane._connection is not None
        finally:
            await keep.close()

    asyncio.run(main())


def test_the_lane_refuses_writes_and_reopens_after_an_error(tmp_path: Any) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'w.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.open("lane", ORG, title="kept")
            await session.add_user("hello")
            chat = core_session(session)
            assert await newest(keep, chat.id, 1) == (0, [1])
            lane = keep._lane
            assert lane is not None
            first = lane._connection
            with pytest.raises(StoreError, match="readonly"):
                await keep.read(write_on)
            assert await newest(keep, chat.id, 1) == (0, [1])
            assert lane._connection is not first  # replaced after the driver's error
            assert (await keep.sessions.by_key("lane", ORG)).title == "kept"
        finally:
            await keep.close()

    asyncio.run(main())


def test_the_lane_stands_aside_while_statements_are_listened_to(tmp_path: Any) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'l.db'}", dispatcher="inline")
        seen: list[str] = []
        try:
            session = await keep.sessions.open("lane", ORG)
            await session.add_user("hello")
            chat = core_session(session)
            engine = keep.engine.sync_engine

            def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
                seen.append(statement)

            event.listen(engine, "before_cursor_execute", listen)
            assert await newest(keep, chat.id, 1) == (0, [1])
            assert any("chat_messages" in s for s in seen)  # it went through Core
            event.remove(engine, "before_cursor_execute", listen)
            seen.clear()
            assert await newest(keep, chat.id, 1) == (0, [1])
            assert seen == []  # on the lane again
        finally:
            await keep.close()

    asyncio.run(main())


def test_a_connect_listener_added_later_sets_the_lane_aside(tmp_path: Any) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'c.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.open("lane", ORG)
            await session.add_user("hello")

            @event.listens_for(keep.engine.sync_engine, "connect")
            def _key(dbapi_connection: Any, record: Any) -> None:
                pass  # what an encryption key would be set by

            assert keep._lane is not None and not keep._lane.usable
            assert await newest(keep, core_session(session).id, 1) == (0, [1])
            assert keep._lane._connection is None  # never opened
        finally:
            await keep.close()

    asyncio.run(main())


def test_loops_share_the_lane_and_close_ends_it(tmp_path: Any) -> None:
    keep = AsyncChatkeep(f"sqlite:///{tmp_path / 's.db'}", dispatcher="inline")

    async def write_and_read(n: int) -> tuple[int, list[int]]:
        session = await keep.sessions.open("lane", ORG)
        await session.add_user(f"from loop {n}")
        found: tuple[int, list[int]] = await newest(keep, core_session(session).id, 5)
        return found

    assert asyncio.run(write_and_read(1)) == (0, [1])
    lane = keep._lane
    assert lane is not None
    connection = lane._connection
    assert asyncio.run(write_and_read(2)) == (0, [1, 2])  # another loop, the same lane
    assert lane._connection is connection

    async def close_then_read() -> None:
        session = await keep.sessions.open("lane", ORG)
        chat_id = core_session(session).id
        await keep.close()
        with pytest.raises(KeepClosed):
            await newest(keep, chat_id, 1)

    asyncio.run(close_then_read())
    assert lane._connection is None and lane.closed
    with pytest.raises(ValueError, match="no active connection"):
        connection._conn  # noqa: B018  (aiosqlite's thread has closed it)


def test_a_bad_limit_is_refused_on_the_lane(tmp_path: Any) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'b.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.open("lane", ORG)
            await session.add_user("hello")
            with pytest.raises(Exception, match="limit"):
                await newest(keep, core_session(session).id, 0)
            assert await newest(keep, core_session(session).id, 1) == (0, [1])
        finally:
            await keep.close()

    asyncio.run(main())


def test_the_lane_connection_is_read_only_sqlite(tmp_path: Any) -> None:
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'q.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.open("lane", ORG)
            await session.add_user("hello")
            await newest(keep, core_session(session).id, 1)
            lane = keep._lane
            assert lane is not None

            def pragmas() -> tuple[int, int]:
                db: sqlite3.Connection = lane._connection._conn
                return (db.execute("PRAGMA query_only").fetchone()[0],
                        db.execute("PRAGMA busy_timeout").fetchone()[0])

            assert await lane._connection._execute(pragmas) == (1, 30_000)
        finally:
            await keep.close()

    asyncio.run(main())


def test_reads_under_concurrent_appends_each_see_one_commit(tmp_path: Any) -> None:
    """Coroutines reading on the lane while others append through the bridge: every read
    is one snapshot (its newest window is contiguous and ends at a committed message),
    and the window never moves back."""
    async def main() -> None:
        keep = AsyncChatkeep(f"sqlite:///{tmp_path / 'r.db'}", dispatcher="inline")
        try:
            session = await keep.sessions.open("lane", ORG)
            await session.add_user("first")
            chat_id = core_session(session).id
            done = asyncio.Event()

            async def writer() -> None:
                for i in range(60):
                    await session.add_user(f"message {i}")
                done.set()

            async def reader() -> list[int]:
                lasts = []
                while not done.is_set():
                    _, window = await newest(keep, chat_id, 5)
                    assert window == list(range(window[0], window[0] + len(window)))
                    assert len(window) == min(5, window[-1])
                    lasts.append(window[-1])
                return lasts

            _, *seen = await asyncio.gather(writer(), reader(), reader())
            for lasts in seen:
                assert lasts == sorted(lasts) and lasts
            assert (await newest(keep, chat_id, 5))[1] == [57, 58, 59, 60, 61]
        finally:
            await keep.close()

    asyncio.run(main())
