"""Pydantic AI runs on the tenant's quota (issue 33): every model request of a
``ChatkeepHistory`` run is reserved before it is sent (its input as the budget counts it,
plus its output ceiling: the request's ``max_tokens``, else ``quotas.output_ceiling``),
settled to the usage its response reports (a streamed one when the stream ends) and
released when it fails before a response. Pydantic AI's own ``OpenAIChatModel`` runs
against the strict fake Chat Completions server, which counts the requests it got."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelAPIError, ModelHTTPError, ModelRetry
from pydantic_ai.messages import ModelResponse
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from streaming_runs import streamed_turn

from chatkeep import Chatkeep, QuotaExceeded, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.pydantic_ai import (
    ChatkeepConversationStore,
    ChatkeepHistory,
    PreparedRequest,
)
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 1)
OTHER = Ref("organization", 2)
USER = Ref("user", 3)


def chat_model(base_url: str) -> OpenAIChatModel:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    return OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))


def quota(keep: Chatkeep | AsyncChatkeep, tenant: Ref, tokens: int) -> Any:
    return keep.quotas.set(tenant, tokens=tokens, window="day")


async def state(keep: Chatkeep | AsyncChatkeep, tenant: Ref) -> tuple[int, int]:
    """``(spent, reserved)`` of the tenant's quota."""
    got = await keep.quotas.get(tenant) if isinstance(keep, AsyncChatkeep) \
        else keep.quotas.get(tenant)
    assert got is not None
    return got.spent, got.reserved


async def set_quota(keep: Chatkeep | AsyncChatkeep, tenant: Ref, tokens: int) -> None:
    result = quota(keep, tenant, tokens)
    if isinstance(keep, AsyncChatkeep):
        await result


def open_keep(kind: str, db_url: str) -> Chatkeep | AsyncChatkeep:
    if kind == "async":
        return AsyncChatkeep(db_url, dispatcher="inline")
    return Chatkeep(db_url, dispatcher="inline")


async def close(keep: Chatkeep | AsyncChatkeep) -> None:
    if isinstance(keep, AsyncChatkeep):
        await keep.close()
    else:
        keep.close()


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_over_quota_sends_nothing_and_other_tenants_run(db_url: str, kind: str) -> None:
    """A tenant whose quota cannot hold the request is refused with ``QuotaExceeded``
    before anything is sent (the server received nothing); another tenant's run goes
    ahead and is settled to what its response reported; nothing stays reserved."""

    async def scenario(server: FakeOpenAIServer) -> None:
        keep = open_keep(kind, db_url)
        try:
            store = ChatkeepConversationStore(keep)
            agent: Agent[Any, Any] = Agent(chat_model(server.base_url),
                                           capabilities=[ChatkeepHistory(store)])
            await set_quota(keep, ORG, 1000)  # below the default output ceiling (4096)
            await set_quota(keep, OTHER, 100_000)
            with pytest.raises(QuotaExceeded):
                await agent.run("Hello there", conversation=await store.for_run(
                    "q", scope=ORG), metadata={"tenant": ORG})
            assert len(server.requests) == 0
            assert await state(keep, ORG) == (0, 0)

            server.script(Reply.ok("Hi.", prompt_tokens=30, completion_tokens=7))
            result = await agent.run("Hello there", conversation=await store.for_run(
                "q", scope=OTHER), metadata={"tenant": OTHER})
            assert result.output == "Hi." and len(server.requests) == 1
            assert await state(keep, OTHER) == (37, 0)
            assert await state(keep, ORG) == (0, 0)
        finally:
            await close(keep)

    with FakeOpenAIServer() as server:
        asyncio.run(scenario(server))
        assert not server.rejected, server.rejected


def test_every_request_of_a_run_is_settled_to_its_usage(db_url: str) -> None:
    """A run with a tool round makes two model requests: each is reserved and settled to
    its own response's usage, so the quota spent what the provider reported, and the
    reservation held the request's input plus its ``max_tokens`` (a quota that holds
    that, but not ``quotas.output_ceiling``, lets the run through)."""
    prepared: list[PreparedRequest] = []
    held: list[int] = []

    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(
                chat_model(server.base_url), model_settings=ModelSettings(max_tokens=64),
                capabilities=[ChatkeepHistory(store, on_request=prepared.append)])

            @agent.tool_plain
            async def weather(city: str) -> str:
                """The weather in a city."""
                held.append((await state(keep, ORG))[1])  # reserved while the run waits
                return f"sunny in {city}"

            await set_quota(keep, ORG, 1000)
            server.script(Reply.calls(("c1", "weather", '{"city": "Oslo"}'),
                                      prompt_tokens=30, completion_tokens=7),
                          Reply.ok("Sunny.", prompt_tokens=45, completion_tokens=3))
            result = await agent.run("Weather in Oslo?",
                                     conversation=await store.for_run("w"))
            assert result.output == "Sunny."
            assert await state(keep, ORG) == (30 + 7 + 45 + 3, 0)
            assert result.usage.input_tokens + result.usage.output_tokens == 85

    with FakeOpenAIServer() as server:
        asyncio.run(scenario(server))
        assert len(server.requests) == 2 and not server.rejected
    assert held == [0]  # the first request was settled before the tool ran
    assert len(prepared) == 2 and all(p.request_tokens > p.tokens >= 0 for p in prepared)


@pytest.mark.parametrize("failure", ["http_400", "refused"])
def test_an_error_before_the_response_releases(db_url: str, failure: str) -> None:
    """A request answered with a 4xx, or whose connection is refused, gives its
    reservation back: nothing spent, nothing reserved."""

    async def scenario(base_url: str) -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(base_url),
                                           capabilities=[ChatkeepHistory(store)])
            await set_quota(keep, ORG, 100_000)
            with pytest.raises((ModelHTTPError, ModelAPIError)):
                await agent.run("Hello", conversation=await store.for_run("e"))
            assert await state(keep, ORG) == (0, 0)

    if failure == "refused":
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        asyncio.run(scenario(f"http://127.0.0.1:{port}/v1"))
        return
    with FakeOpenAIServer() as server:
        server.script(Reply.error(400, "bad request"))
        asyncio.run(scenario(server.base_url))
        assert len(server.requests) == 1


@pytest.mark.parametrize("mode", ["run_stream", "iter", "run_stream_events"])
def test_a_streamed_run_settles_when_its_stream_ends(db_url: str, mode: str) -> None:
    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server.base_url),
                                           capabilities=[ChatkeepHistory(store)])
            await set_quota(keep, ORG, 100_000)
            server.script(Reply.ok("A streamed answer.", prompt_tokens=21,
                                   completion_tokens=4))
            _, shown = await streamed_turn(mode, agent, store, "s", "Stream please")
            assert shown == "A streamed answer."
            assert await state(keep, ORG) == (25, 0)
            await set_quota(keep, ORG, 26)
            with pytest.raises(QuotaExceeded):
                await streamed_turn(mode, agent, store, "s", "Again")
            assert await state(keep, ORG) == (25, 0)

    with FakeOpenAIServer() as server:
        asyncio.run(scenario(server))
        assert len(server.requests) == 1 and not server.rejected


def test_run_sync_on_a_sync_keep_reserves_the_actor_too(db_url: str) -> None:
    """``agent.run_sync`` on a ``Chatkeep``: the actor's narrower quota refuses with
    nothing sent; once it holds the request, the run is settled on both quotas."""
    keep = Chatkeep(db_url, dispatcher="inline")
    try:
        with FakeOpenAIServer() as server:
            store = ChatkeepConversationStore(keep, tenant=ORG, actor=USER)
            agent: Agent[Any, Any] = Agent(chat_model(server.base_url),
                                           capabilities=[ChatkeepHistory(store)])
            keep.quotas.set(ORG, tokens=100_000)
            keep.quotas.set(ORG, tokens=100, actor=USER)
            conversation = asyncio.run(store.for_run("sync"))
            with pytest.raises(QuotaExceeded):
                agent.run_sync("Hello", conversation=conversation)
            assert len(server.requests) == 0
            keep.quotas.set(ORG, tokens=10_000, actor=USER)
            server.script(Reply.ok("Hello.", prompt_tokens=12, completion_tokens=2))
            result = agent.run_sync("Hello", conversation=conversation)
            assert result.output == "Hello." and len(server.requests) == 1
            for actor in (None, USER):
                got = keep.quotas.get(ORG, actor=actor)
                assert got is not None and (got.spent, got.reserved) == (14, 0)
    finally:
        keep.close()


def test_a_stream_the_app_stops_counts_and_a_refused_stream_releases(db_url: str) -> None:
    """A stream the application stops reading (it raises mid-stream) may have been billed:
    its reservation counts at the reserved amount (the request's tokens plus the output
    ceiling). A streamed request the server refuses (HTTP 400) is released."""
    prepared: list[PreparedRequest] = []

    class Stop(Exception):
        pass

    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server.base_url), capabilities=[
                ChatkeepHistory(store, on_request=prepared.append)])
            await set_quota(keep, ORG, 100_000)
            server.script(Reply.ok("A long streamed answer.", prompt_tokens=21,
                                   completion_tokens=4))
            with pytest.raises(Stop):
                async with agent.run_stream("Stream", conversation=await store.for_run(
                        "stop")) as stream:
                    async for _ in stream.stream_text(delta=True, debounce_by=None):
                        raise Stop
            reserved = prepared[-1].request_tokens + keep.config.quotas.output_ceiling
            assert await state(keep, ORG) == (reserved, 0)

            server.script(Reply.error(400, "bad request"))
            with pytest.raises((ModelHTTPError, ModelAPIError)):
                async with agent.run_stream("Again", conversation=await store.for_run(
                        "stop")) as stream:
                    await stream.get_output()
            assert await state(keep, ORG) == (reserved, 0)

    with FakeOpenAIServer() as server:
        asyncio.run(scenario(server))
        assert len(server.requests) == 2


@pytest.mark.parametrize("streamed", [False, True])
def test_a_response_a_hook_rejects_is_settled_to_its_usage(db_url: str,
                                                            streamed: bool) -> None:
    """Another capability rejects the first response (``ModelRetry`` from its
    ``after_model_request``): the provider answered and billed it, so its reservation is
    settled to that response's usage, not released; the retry is reserved and settled
    in its turn."""

    @dataclass
    class RejectFirst(AbstractCapability[Any]):
        rejected: list[str] = field(default_factory=list)

        async def after_model_request(self, ctx: RunContext[Any], *,
                                      request_context: ModelRequestContext,
                                      response: ModelResponse) -> ModelResponse:
            if not self.rejected:
                self.rejected.append("once")
                raise ModelRetry("say it again")
            return response

    async def scenario(server: FakeOpenAIServer) -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepConversationStore(keep, tenant=ORG)
            agent: Agent[Any, Any] = Agent(chat_model(server.base_url), capabilities=[
                ChatkeepHistory(store), RejectFirst()])
            await set_quota(keep, ORG, 100_000)
            server.script(Reply.ok("First.", prompt_tokens=20, completion_tokens=3),
                          Reply.ok("Second.", prompt_tokens=30, completion_tokens=4))
            if streamed:
                saved, _ = await streamed_turn("run_stream_events", agent, store, "r", "Hi")
                assert saved.result.output == "Second."
            else:
                result = await agent.run("Hi", conversation=await store.for_run("r"))
                assert result.output == "Second."
            assert await state(keep, ORG) == (20 + 3 + 30 + 4, 0)

    with FakeOpenAIServer() as server:
        asyncio.run(scenario(server))
        assert len(server.requests) == 2
