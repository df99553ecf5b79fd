"""Quotas on a LangChain v1 agent (issue 33): ``ChatkeepMiddleware`` reserves every model
call of a run on the thread tenant's quota before it is sent (the history's and the
tools' count plus the call's output ceiling), refuses one the quota cannot hold with
nothing sent, settles each at its answer's ``usage_metadata`` and releases one that
failed before its answer. A real HTTP chat model (``WireChatModel``) against the strict
fake server, which counts the requests; sync (``invoke``) and async (``ainvoke``), on
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langchain_wire import WireChatModel

from chatkeep import Chatkeep, QuotaExceeded, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.langchain import ChatkeepMiddleware
from chatkeep.integrations.langchain.middleware import output_ceiling
from chatkeep.store.schema import chat_reservations
from chatkeep.testing import FakeOpenAIServer, Reply

ORG, OTHER, USER = Ref("organization", 5), Ref("organization", 6), Ref("user", 2)
CEILING = 777
CONFIG = {"quotas": {"output_ceiling": CEILING}}


@tool
def lookup(order: str) -> str:
    """The status of an order."""
    return f"order {order}: shipped"


def tool_then_answer(body: dict[str, Any]) -> Reply:
    """A tool call for a question, the answer once the tool's result is in: two model
    calls a run, each reporting its usage."""
    if body["messages"][-1]["role"] == "tool":
        return Reply.ok("It shipped.", prompt_tokens=60, completion_tokens=7)
    return Reply.calls(("call_1", "lookup", json.dumps({"order": "A7"})),
                       prompt_tokens=40, completion_tokens=5)


@pytest.fixture
def observer(db_url: str) -> Iterator[Chatkeep]:
    """A second keep on the test database: sets the quotas and reads them (also from
    the fake server's thread, while a call is in flight)."""
    with Chatkeep(db_url, dispatcher="inline") as keep:
        yield keep


def run(db_url: str, mode: str, server: FakeOpenAIServer, tenant: Ref, *,
        max_tokens: int | None = None, thread: str = "ticket-1") -> Any:
    """One agent run (``invoke`` on a ``Chatkeep`` or ``ainvoke`` on an
    ``AsyncChatkeep``) asking about an order; returns its result."""
    model = WireChatModel(base_url=server.base_url, max_tokens=max_tokens)
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    inputs = {"messages": [{"role": "user", "content": "Where is order A7?"}]}
    context = {"tenant": tenant, "actor": USER}
    if mode == "sync":
        with Chatkeep(db_url, config=CONFIG, dispatcher="inline") as keep:
            agent: Any = create_agent(model, [lookup], middleware=[ChatkeepMiddleware(keep)])
            return agent.invoke(inputs, config, context=context)

    async def scenario() -> Any:
        async with AsyncChatkeep(db_url, config=CONFIG, dispatcher="inline") as akeep:
            agent: Any = create_agent(model, [lookup],
                                      middleware=[ChatkeepMiddleware(akeep)])
            return await agent.ainvoke(inputs, config, context=context)

    return asyncio.run(scenario())


def held_during_calls(server: FakeOpenAIServer, observer: Chatkeep,
                      answer: Callable[[dict[str, Any]], Reply]) -> list[int]:
    """Make ``server`` note, at each request, what ``ORG``'s quota holds reserved."""
    seen: list[int] = []

    def responder(body: dict[str, Any]) -> Reply:
        quota = observer.quotas.get(ORG)
        seen.append(-1 if quota is None else quota.reserved)
        return answer(body)

    server.responder = responder
    return seen


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_over_quota_is_refused_with_no_request_and_another_tenant_runs(
        db_url: str, mode: str, observer: Chatkeep) -> None:
    observer.quotas.set(ORG, tokens=500)  # less than the output ceiling alone
    with FakeOpenAIServer(tool_then_answer) as server:
        with pytest.raises(QuotaExceeded) as refused:
            run(db_url, mode, server, ORG)
        assert refused.value.tenant == ORG and refused.value.remaining == 500
        assert server.requests == [] and server.raw_requests == []
        quota = observer.quotas.get(ORG)
        assert quota is not None and (quota.spent, quota.reserved) == (0, 0)
        observer.quotas.set(OTHER, tokens=100_000)
        out = run(db_url, mode, server, OTHER)  # the same thread id, another tenant
    assert out["messages"][-1].content == "It shipped."
    assert len(server.requests) == 2 and not server.rejected
    other = observer.quotas.get(OTHER)
    assert other is not None and (other.spent, other.reserved) == (112, 0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_model_call_of_a_tool_run_is_reserved_then_settled(
        db_url: str, mode: str, observer: Chatkeep) -> None:
    observer.quotas.set(ORG, tokens=100_000)
    observer.quotas.set(ORG, tokens=50_000, actor=USER)
    with FakeOpenAIServer() as server:
        seen = held_during_calls(server, observer, tool_then_answer)
        out = run(db_url, mode, server, ORG, max_tokens=300)
    assert isinstance(out["messages"][-1], AIMessage)
    assert len(server.requests) == 2 and not server.rejected
    assert all(body["max_tokens"] == 300 for body in server.requests)
    # Each call was held while it was in flight: its input's count plus the ceiling.
    assert len(seen) == 2 and all(300 < held < 300 + 400 for held in seen), seen
    assert seen[1] > seen[0]  # the second call carries the tool call and its result
    for actor in (None, USER):
        quota = observer.quotas.get(ORG, actor=actor)
        assert quota is not None and (quota.spent, quota.reserved) == (40 + 5 + 60 + 7, 0)
    with observer.engine.connect() as conn:
        assert conn.execute(chat_reservations.select()).fetchall() == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_call_without_a_ceiling_reserves_the_configured_one(
        db_url: str, mode: str, observer: Chatkeep) -> None:
    observer.quotas.set(ORG, tokens=100_000)
    with FakeOpenAIServer() as server:
        seen = held_during_calls(server, observer, tool_then_answer)
        run(db_url, mode, server, ORG)
    assert "max_tokens" not in server.requests[0]
    assert len(seen) == 2 and all(CEILING < held < CEILING + 400 for held in seen), seen
    quota = observer.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (112, 0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_before_the_answer_releases_the_call(
        db_url: str, mode: str, observer: Chatkeep) -> None:
    observer.quotas.set(ORG, tokens=100_000)
    with FakeOpenAIServer() as server:
        server.script(Reply.error(500, "overloaded"))
        with pytest.raises(openai.InternalServerError):
            run(db_url, mode, server, ORG, max_tokens=300)
    assert len(server.requests) == 1
    quota = observer.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (0, 0)


def test_an_answer_without_usage_counts_its_reservation(db_url: str,
                                                        observer: Chatkeep) -> None:
    observer.quotas.set(ORG, tokens=100_000)
    with FakeOpenAIServer() as server:
        seen = held_during_calls(server, observer, lambda body: Reply.ok("Hello."))
        model = NoUsageModel(base_url=server.base_url, max_tokens=200)
        with Chatkeep(db_url, config=CONFIG, dispatcher="inline") as keep:
            agent: Any = create_agent(model, [], middleware=[ChatkeepMiddleware(keep)])
            agent.invoke({"messages": [{"role": "user", "content": "Hi"}]},
                         {"configurable": {"thread_id": "t"}}, context={"tenant": ORG})
    quota = observer.quotas.get(ORG)
    assert quota is not None and (quota.spent, quota.reserved) == (seen[0], 0)


class NoUsageModel(WireChatModel):
    """A chat model whose answers report no usage."""

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        result = super()._generate(*args, **kwargs)
        for generation in result.generations:
            assert isinstance(generation.message, AIMessage)
            generation.message.usage_metadata = None
        return result


def test_the_output_ceiling_is_read_from_settings_bindings_and_fields() -> None:
    model = WireChatModel(base_url="http://127.0.0.1:9", max_tokens=64)
    assert output_ceiling(model) == 64
    assert output_ceiling(model, {"max_completion_tokens": 32}) == 32
    assert output_ceiling(model.bind(max_output_tokens=16)) == 16
    bare = WireChatModel(base_url="http://127.0.0.1:9")
    assert output_ceiling(bare) is None
    assert output_ceiling(bare, {"max_tokens": 0, "temperature": 1}) is None
    assert output_ceiling(bare.bind(max_tokens=True)) is None
