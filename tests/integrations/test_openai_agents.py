"""The OpenAI Agents SDK on chatkeep: ``Runner.run`` for real, offline (the SDK's own
OpenAI models against the strict local fake), and the ``Session`` protocol exercised
the way the SDK's own session tests do."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunContextWrapper,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from chatkeep import Ref, SessionNotFound
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.testing import AgentModel, FakeOpenAIServer

set_tracing_disabled(True)  # nothing leaves this machine
ORG, OTHER = Ref("organization", 1), Ref("organization", 2)
WEATHER = {"Paris": "18C and sunny", "Rome": "24C and clear", "Oslo": "2C and snowing"}


@function_tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return WEATHER.get(city, "unknown")


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


class World:
    """An async keep on the test database, the fake server and the agent model behind it."""

    def __init__(self, db_url: str, **config: Any) -> None:
        self.db_url, self.config = db_url, config
        self.model = AgentModel(reasoning=True)
        self.server = FakeOpenAIServer(responder=self.model.openai)

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.server.base_url, api_key="k", max_retries=0)

    def keep(self) -> AsyncChatkeep:
        return AsyncChatkeep(self.db_url, model=self.client(), config=self.config)

    def agent(self, api: str = "responses") -> Agent[Any]:
        model_class: Any = OpenAIResponsesModel if api == "responses" \
            else OpenAIChatCompletionsModel
        return Agent(name="weather", instructions="Answer weather questions with the tool.",
                     tools=[get_weather],
                     model=model_class(model="gpt-x", openai_client=self.client()))


@pytest.fixture
def world(db_url: str) -> Any:
    w = World(db_url)
    with w.server:
        yield w


@pytest.mark.parametrize("model_api", ["responses", "chat"])
def test_runner_multi_turn_with_single_and_parallel_tool_calls(world: World,
                                                              model_api: str) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG, actor=Ref("user", 1))
            agent = world.agent(model_api)
            first = await Runner.run(agent, "What is the weather in Paris?", session=session,
                                     hooks=session.billing_hooks())
            assert "18C and sunny" in first.final_output
            second = await Runner.run(agent, "What is the weather in Rome, Oslo and Paris?",
                                      session=session, hooks=session.billing_hooks())
            assert all(w in second.final_output for w in ("24C", "2C", "18C"))
            third = await Runner.run(agent, "Thanks!", session=session,
                                     hooks=session.billing_hooks())
            assert third.final_output == "echo: Thanks!"
            stored = await (await keep.sessions.get(session.session_id)).read_messages()
            calls = [c.id for m in stored for c in m.tool_calls]
            assert len(calls) == 4 and len({m.tool_call_id for m in stored if m.tool_call_id}) == 4
            # Billed like every other model call, and the ledger agrees.
            row = (await keep.sessions.get(session.session_id)).row
            assert row.total_tokens > 0
            (line,) = [u for u in await keep.usage(ORG) if u.purpose == "chat"]
            assert line.calls == 5  # 2 + 2 model calls for the tool turns, 1 for "Thanks"
        assert world.server.rejected == []

    run(scenario())


def test_runner_across_a_compression(db_url: str) -> None:
    world = World(db_url, chat={"max_history_tokens": 400, "recent_messages_min": 2})
    world.model = AgentModel(reasoning=True)
    world.server.responder = _summaries_and(world.model.openai)

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            agent = world.agent()
            for i in range(6):
                result = await Runner.run(agent, f"({i}) What is the weather in Rome and Oslo?",
                                          session=session)
                assert "24C" in result.final_output and "2C" in result.final_output
            chat = await keep.sessions.get(session.session_id)
            assert chat.summary_watermark > 0 and chat.summary
            items = await session.get_items()
            assert items[0]["role"] == "system" and "Summary" in items[0]["content"]
        assert world.server.rejected == []

    with world.server:
        run(scenario())


def _summaries_and(responder: Any) -> Any:
    """The agent model, except for chatkeep's own summariser calls (chat completions whose
    system prompt asks for a running summary)."""
    from chatkeep.testing import Reply

    def answer(body: dict[str, Any]) -> Any:
        system = (body.get("messages") or [{}])[0].get("content", "")
        if isinstance(system, str) and "summary" in system.lower() and "input" not in body:
            return Reply.ok("Summary: the user asked about the weather in several cities.")
        return responder(body)

    return answer


def test_runner_with_privacy_sends_no_raw_pii(db_url: str) -> None:
    world = World(db_url, privacy={"anonymize_pii": True})

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG, actor=Ref("user", 7))
            agent = world.agent()
            await Runner.run(agent, "I'm travelling, write to ana.garcia@example.com or call "
                             "+44 7911 123456. What is the weather in Paris?", session=session)
            await Runner.run(agent, "What is the weather in Rome?", session=session)
            history = await session.get_items()
            assert "<EMAIL_1>" in json.dumps(history)

    with world.server:
        run(scenario())
    # The SDK sends the first input itself; from the second run on, the history comes from
    # chatkeep, redacted.
    later = [b for b in world.server.bodies() if "Rome" in b]
    assert later and all("ana.garcia@example.com" not in b and "7911 123456" not in b
                         for b in later)


def test_tenants_never_cross(world: World) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            mine = await ChatkeepSession.open(keep, tenant=ORG)
            await mine.add_items([{"role": "user", "content": "secret plan"}])
            with pytest.raises(SessionNotFound):
                await ChatkeepSession.open(keep, tenant=OTHER, session_id=mine.session_id)
            routed = RunContextWrapper(context={"tenant": OTHER})
            with pytest.raises(SessionNotFound):
                await mine.get_items(wrapper=routed)
            same = RunContextWrapper(context={"tenant": ORG})
            assert (await mine.get_items(wrapper=same))[0]["content"] == "secret plan"

    run(scenario())


def test_protocol_ordering_limit_pop_clear_as_the_sdk_tests_do(world: World) -> None:
    items: list[Any] = [
        {"role": "user", "content": "Hello"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Hi there", "annotations": []}]},
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}', "id": "fc_1", "status": "completed"},
        {"type": "function_call_output", "call_id": "c1", "output": "2C and snowing"},
    ]

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            assert await session.get_items() == [] and await session.pop_item() is None
            await session.add_items(items)
            assert await session.get_items() == items  # exactly what was added
            assert await session.get_items(limit=2) == items[-2:]
            assert await session.pop_item() == items[-1]
            # A call without its output is never handed out as history.
            with pytest.raises(Exception, match="without a result"):
                await session.get_items()
            assert await session.pop_item() == items[-2]
            assert await session.get_items() == items[:3]
            await session.add_items(items[3:])  # the retried tail: same call id again
            assert await session.get_items() == items
            await session.clear_session()
            assert await session.get_items() == []
            record = await (await keep.sessions.get(session.session_id)).read_messages()
            assert len(record) == 7 and all(m.retracted_at is not None for m in record)

    run(scenario())


def test_two_runs_on_one_session_append_whole_batches(world: World) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            batches = [[{"role": "user", "content": f"{tag}{i}"} for i in range(5)]
                       for tag in "ab"]
            await asyncio.gather(*(session.add_items(b) for b in batches))
            texts = [i["content"] for i in await session.get_items()]
            assert sorted(texts) == sorted(t["content"] for b in batches for t in b)
            # Each batch is contiguous: one transaction, consecutive seqs.
            first = texts[0][0]
            assert texts == [f"{first}{i}" for i in range(5)] + \
                [f"{'b' if first == 'a' else 'a'}{i}" for i in range(5)]

    run(scenario())
