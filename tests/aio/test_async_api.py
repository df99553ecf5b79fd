"""What only the async API has: construction without I/O, refusal of sync clients, jobs
as tasks on the loop drained by close(), a closed keep, true concurrency on one loop."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import openai
import pytest

from chatkeep import (
    Chatkeep,
    ConfigError,
    HistoryCompressor,
    InvalidArgument,
    Ref,
    StoreError,
)
from chatkeep.aio import AsyncChatkeep, KeepClosed, TaskDispatcher
from chatkeep.jobs import ThreadPoolDispatcher
from chatkeep.memory import MemoryService
from chatkeep.privacy.guard import PrivacyGuard
from chatkeep.sessions import SessionService
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 1)


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_sync_clients_and_thread_pools_are_refused_at_construction(db_url: str) -> None:
    with pytest.raises(ConfigError, match="sync client"):
        AsyncChatkeep(db_url, model=openai.OpenAI(api_key="k", base_url="http://127.0.0.1:9"))
    with pytest.raises(ConfigError, match="thread pool"):
        AsyncChatkeep(db_url, dispatcher=ThreadPoolDispatcher())
    with pytest.raises(StoreError):
        AsyncChatkeep("mysql://nobody@127.0.0.1/x")
    assert isinstance(AsyncChatkeep(db_url).dispatcher, TaskDispatcher)


def test_an_async_client_is_refused_by_the_sync_api_at_construction(db_url: str) -> None:
    # Its calls would return coroutines the sync API cannot await: refused up front, with
    # no stray "coroutine was never awaited" warning later.
    client = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError, match="async client"):
            Chatkeep(db_url, model=client)
        with pytest.raises(ConfigError, match="async client"):
            HistoryCompressor(client, model="cheap")


def test_the_keep_wraps_its_sync_twin_built_at_once_and_opens_nothing(tmp_path: Any) -> None:
    path = tmp_path / "chat.db"
    keep = AsyncChatkeep(f"sqlite:///{path}")
    assert not path.exists(), "construction does no I/O"
    for twin, part in [(keep.sessions, SessionService), (keep.compressor, HistoryCompressor),
                       (keep.memory, MemoryService), (keep.privacy, PrivacyGuard)]:
        assert isinstance(twin.core, part)
        assert keep not in vars(twin).values(), "a twin never points back at the keep"
    with pytest.raises(ConfigError, match="create_schema"):  # the sync keep's own checks
        AsyncChatkeep(f"sqlite:///{path}", create_schema="yes")  # type: ignore[arg-type]

    async def scenario() -> None:
        async with keep:
            assert path.exists()
            assert isinstance(await keep.core(), Chatkeep)
            session = await keep.sessions.create(ORG)
            assert await keep.run(lambda s: s.read_messages(), session.core) == []

    run(scenario())


def test_a_closed_keep_raises_a_typed_error(db_url: str) -> None:
    async def scenario() -> None:
        keep = AsyncChatkeep(db_url)
        session = await keep.sessions.create(ORG)
        await keep.close()
        await keep.close()  # idempotent
        with pytest.raises(KeepClosed):
            await keep.sessions.get_unscoped(session.id)
        with pytest.raises(KeepClosed):
            await session.add_user("too late")

    run(scenario())


def test_privacy_calls_without_a_session_are_typed_errors(db_url: str) -> None:
    """``restore(None, ...)`` used to fail deep inside with an ``AttributeError``."""
    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            with pytest.raises(InvalidArgument, match="ChatSession"):
                await keep.privacy.restore(None, "x")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgument, match="ChatSession"):
                await keep.privacy.restore_stored(None, "x")  # type: ignore[arg-type]

    run(scenario())


def test_distillation_runs_as_a_task_and_close_drains_it(db_url: str) -> None:
    facts = {"facts": [{"scope": "tenant", "content": "Quotes are in EUR."}]}

    def answer(body: dict[str, Any]) -> Reply:
        system = body["messages"][0]["content"]
        return Reply.json(facts) if '"facts"' in system else Reply.ok("SUMMARY")

    async def scenario(server: FakeOpenAIServer) -> None:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        keep = AsyncChatkeep(db_url, model=client,
                             config={"chat": {"max_history_tokens": 300}})
        session = await keep.sessions.create(ORG)
        for i in range(8):
            await session.add_user(f"We quote in EUR, item {i}. " + "detail " * 30)
            await session.add_assistant("Noted. " + "reply " * 30)
        history = await keep.compressor.build_history(session, "sys")
        assert history.compressed
        assert keep.dispatcher._tasks, "the distil job runs after the turn returns"
        await keep.close()
        check = AsyncChatkeep(db_url)
        assert [m.content for m in await check.memory.list(ORG)] == ["Quotes are in EUR."]
        await check.close()

    with FakeOpenAIServer(responder=answer) as server:
        run(scenario(server))


def test_concurrent_turns_on_one_loop_keep_seq_gapless(db_url: str) -> None:
    async def scenario() -> None:
        async with AsyncChatkeep(db_url) as keep:
            sessions = [await keep.sessions.create(ORG) for _ in range(4)]

            async def turns(session: Any) -> None:
                for i in range(10):
                    await session.add_user(f"q{i}")
                    await keep.compressor.build_history(session, "sys")
                    await session.add_assistant(f"a{i}")

            shared = sessions[0]
            await asyncio.gather(*(turns(s) for s in sessions), turns(shared))
            for session in sessions:
                seqs = [m.seq for m in await session.read_messages()]
                assert seqs == list(range(1, len(seqs) + 1))
            assert len(await shared.read_messages()) == 40

    run(scenario())


@pytest.mark.usefixtures("requires_pgvector")
def test_recall_by_meaning_through_the_async_embedder(db_url: str) -> None:
    """The async keep embeds through openai.AsyncOpenAI on the real /v1/embeddings wire."""
    from chatkeep.memory.embedders import AsyncOpenAIEmbedder

    facts = {"facts": [{"scope": "tenant", "content": "Prefers espresso over tea."}]}

    async def scenario(server: FakeOpenAIServer) -> None:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        async with AsyncChatkeep(db_url, model=client, dispatcher="inline",
                                 embedder=AsyncOpenAIEmbedder("fake-embed", client)) as keep:
            session = await keep.sessions.create(ORG)
            await session.add_user("I like espresso more than tea.")
            await session.add_assistant("Noted.")
            assert (await keep.memory.distil(session)).added == 1
            assert keep.memory.recall_mode == "hybrid"
            status = await keep.memory.vector_status(ORG)
            assert status is not None and (status.embedded, status.missing) == (1, 0)
            found = await keep.memory.recall(session, query="espresso")
            assert [m.content for m in found] == ["Prefers espresso over tea."]
        assert server.embedding_requests, "embeddings went over the wire"

    with FakeOpenAIServer(responder=lambda body: Reply.json(facts)) as server:
        run(scenario(server))
