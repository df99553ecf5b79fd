"""32 concurrent turns of one tenant whose quota fits a third of them, on SQLite,
PostgreSQL and PostgreSQL behind PgBouncer in transaction mode, from threads and from the
async API: the tokens billed stay within the quota (overshoot exactly 0 with
``max_output_tokens``), and the strict fake server receives exactly the calls that were
not refused."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from chatkeep import Chatkeep, QuotaExceeded, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.testing import FakeOpenAIServer, Reply
from support.postgres import with_driver

pytestmark = pytest.mark.pgbouncer

ORG = Ref("organization", 1)
TURNS, FITS, MAX_OUTPUT = 32, 10, 40
QUESTION = "Where is my order? It was due on Monday and nothing has arrived yet."


def _replying(per_turn: int) -> Callable[[object], Reply]:
    """Replies whose usage is the whole reservation (the input as estimated, the whole
    output ceiling): the worst case, so exactly the turns that fit at once are sent."""
    def reply(body: object) -> Reply:
        return Reply.ok("It ships today.", prompt_tokens=per_turn - MAX_OUTPUT,
                        completion_tokens=MAX_OUTPUT)

    return reply


def _per_turn(keep: Chatkeep) -> int:
    """What one turn reserves: its history's estimate (a tenant without a quota, the
    same messages) plus the output ceiling."""
    probe = keep.sessions.create(Ref("organization", 999))
    probe.add_user(QUESTION)
    return keep.compressor.build_history(probe, "Be brief.").info.tokens + MAX_OUTPUT


def _check(keep_quota: tuple[int, int, int], quota: int, per_turn: int, sent: int,
           server: FakeOpenAIServer) -> None:
    spent, reserved, billed = keep_quota
    assert sent == FITS  # a third of the turns, the rest refused
    assert len(server.requests) == sent  # exactly the calls that were not refused
    assert reserved == 0 and spent == billed == sent * per_turn
    assert spent <= quota  # overshoot exactly 0


@pytest.mark.sync_api
def test_32_threads_never_overshoot(db_url: str, openai_client: openai.OpenAI,
                                    llm_server: FakeOpenAIServer) -> None:
    keep = Chatkeep(db_url, dispatcher="inline")
    try:
        per_turn = _per_turn(keep)
        llm_server.responder = _replying(per_turn)
        quota = FITS * per_turn + per_turn // 2  # room for ten and a half turns
        keep.quotas.set(ORG, tokens=quota)
        sessions = [keep.sessions.create(ORG, Ref("user", n)) for n in range(TURNS)]
        for session in sessions:
            session.add_user(QUESTION)
        start = threading.Barrier(TURNS)

        def one(session: Any) -> bool:
            start.wait()
            try:
                history = keep.compressor.build_history(session, "Be brief.",
                                                        max_output_tokens=MAX_OUTPUT)
            except QuotaExceeded:
                return False
            reply = openai_client.chat.completions.create(model="m", messages=history,
                                                          max_tokens=MAX_OUTPUT)
            session.add_assistant_response(reply)
            return True

        with ThreadPoolExecutor(TURNS) as pool:
            results = list(pool.map(one, sessions))
        sent = sum(results)
        q = keep.quotas.get(ORG)
        assert q is not None
        billed = sum(line.prompt_tokens + line.completion_tokens
                     for line in keep.usage(ORG) if line.purpose == "chat")
        _check((q.spent, q.reserved, billed), quota, per_turn, sent, llm_server)
    finally:
        keep.close()


@pytest.mark.sync_api
def test_32_async_turns_never_overshoot(db_url: str, llm_server: FakeOpenAIServer) -> None:
    url = with_driver(db_url, "asyncpg") if db_url.startswith("postgresql") else db_url

    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=llm_server.base_url, api_key="k", max_retries=0)
        keep = AsyncChatkeep(url, dispatcher="inline")
        try:
            probe = await keep.sessions.create(Ref("organization", 999))
            await probe.add_user(QUESTION)
            per_turn = (await keep.compressor.build_history(probe, "Be brief.")
                        ).info.tokens + MAX_OUTPUT
            llm_server.responder = _replying(per_turn)
            quota = FITS * per_turn + per_turn // 2
            await keep.quotas.set(ORG, tokens=quota)
            sessions = [await keep.sessions.create(ORG, Ref("user", n)) for n in range(TURNS)]
            for session in sessions:
                await session.add_user(QUESTION)

            async def one(session: Any) -> bool:
                try:
                    history = await keep.compressor.build_history(
                        session, "Be brief.", max_output_tokens=MAX_OUTPUT)
                except QuotaExceeded:
                    return False
                reply = await client.chat.completions.create(
                    model="m", messages=history, max_tokens=MAX_OUTPUT)
                await session.add_assistant_response(reply)
                return True

            results = await asyncio.gather(*(one(s) for s in sessions))
            sent = sum(results)
            q = await keep.quotas.get(ORG)
            assert q is not None
            billed = sum(line.prompt_tokens + line.completion_tokens
                         for line in await keep.usage(ORG) if line.purpose == "chat")
            _check((q.spent, q.reserved, billed), quota, per_turn, sent, llm_server)
        finally:
            await keep.close()
            await client.close()

    asyncio.run(run())
