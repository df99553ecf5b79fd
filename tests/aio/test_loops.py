"""One ``AsyncChatkeep`` on many event loops: threads each running its own (as the Agents
SDK's concurrent-session test does), ``asyncio.run`` called again, a loop reused between
runs. Connections are pooled per loop, released when the loop ends, and all closed by
``close()``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from sqlalchemy.util import await_only

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep, KeepClosed, TaskDispatcher
from chatkeep.aio.pools import LoopPools
from support.aio import LoopThread

ORG = Ref("organization", 1)
THREADS, APPENDS = 5, 20


def pools(keep: AsyncChatkeep) -> LoopPools:
    pool = keep.engine.sync_engine.pool
    assert isinstance(pool, LoopPools)
    return pool


def test_threads_each_with_its_own_loop_share_one_keep(db_url: str) -> None:
    keep = AsyncChatkeep(db_url, dispatcher="inline")
    ready = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    async def writer(n: int) -> None:
        ready.wait()  # every loop's first call races the others: schema, key, seq
        session = await keep.sessions.open("shared", ORG)
        for i in range(APPENDS):
            await session.add_user(f"{n}:{i}")

    def thread(n: int) -> None:
        try:
            asyncio.run(writer(n))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=thread, args=(n,)) for n in range(THREADS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert errors == []

    async def check() -> list[Any]:
        session = await keep.sessions.by_key("shared", ORG)
        messages = await session.read_messages()
        await keep.close()
        return messages

    messages = asyncio.run(check())
    assert [m.seq for m in messages] == list(range(1, THREADS * APPENDS + 1))
    for n in range(THREADS):
        assert [m.content for m in messages if m.content.startswith(f"{n}:")] == \
            [f"{n}:{i}" for i in range(APPENDS)]
    assert pools(keep).pools() == {}


@pytest.mark.parametrize("how", ["asyncio.run", "one loop, reused"])
def test_a_keep_outlives_the_loops_it_is_used_on(db_url: str, how: str) -> None:
    keep = AsyncChatkeep(db_url, dispatcher="inline")

    async def first() -> str:
        session = await keep.sessions.create(ORG)
        await session.add_user("one")
        assert len(pools(keep).pools()) == 1
        return session.id

    async def second(session_id: str) -> list[str | None]:
        session = await keep.sessions.get_unscoped(session_id)
        await session.add_user("two")
        return [m.content for m in await session.read_messages()]

    if how == "asyncio.run":
        session_id = asyncio.run(first())
        assert pools(keep).pools() == {}, "the loop's end closed its connections"
        assert asyncio.run(second(session_id)) == ["one", "two"]
        asyncio.run(keep.close())
    else:  # the Agents SDK's run_sync: the thread's loop, its async generators shut down
        loop = asyncio.new_event_loop()  # after each run, and kept open for the next
        try:
            session_id = loop.run_until_complete(first())
            loop.run_until_complete(loop.shutdown_asyncgens())
            assert pools(keep).pools() == {}
            assert loop.run_until_complete(second(session_id)) == ["one", "two"]
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(keep.close())
        finally:
            loop.close()
    with pytest.raises(KeepClosed):
        asyncio.run(keep.sessions.get_unscoped(session_id))


def test_close_drains_and_disposes_every_loop(db_url: str) -> None:
    keep = AsyncChatkeep(db_url)
    other = LoopThread()  # a loop that keeps running in its own thread, as a server's
    try:
        session_id = asyncio.run_coroutine_threadsafe(_write(keep, "there"), other.loop) \
            .result(timeout=60)
        done: list[str] = []
        dispatcher = keep.dispatcher
        assert isinstance(dispatcher, TaskDispatcher)
        dispatcher.bind({"slow": lambda sid: (await_only(asyncio.sleep(0.3)),
                                              done.append(sid))})
        other.loop.call_soon_threadsafe(dispatcher.dispatch, "slow", session_id)

        async def here_then_close() -> None:
            await _write(keep, "here")
            used = pools(keep).pools()
            assert len(used) == 2 and other.loop in used
            await keep.close()
            assert done == [session_id], "the other loop's job was waited for"
            assert pools(keep).pools() == {}
            assert all(pool.checkedin() == pool.checkedout() == 0 for pool in used.values())

        asyncio.run(here_then_close())
        with pytest.raises(KeepClosed):
            asyncio.run_coroutine_threadsafe(_write(keep, "late"), other.loop) \
                .result(timeout=60)
    finally:
        other.close()


async def _write(keep: AsyncChatkeep, text: str) -> str:
    session = await keep.sessions.create(ORG)
    await session.add_user(text)
    return session.id


def test_an_idle_loop_is_released_when_it_ends(db_url: str) -> None:
    keep = AsyncChatkeep(db_url, dispatcher="inline")
    idle = asyncio.new_event_loop()
    try:
        idle.run_until_complete(_write(keep, "idle"))
        asyncio.run(keep.close())  # from another loop, while this one is idle
        assert list(pools(keep).pools()) == [idle], "its connections wait for it"
        idle.run_until_complete(idle.shutdown_asyncgens())
        assert pools(keep).pools() == {}
    finally:
        idle.close()
