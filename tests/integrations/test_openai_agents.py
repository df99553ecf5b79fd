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

from chatkeep import InvalidReference, PrivacyError, Ref, SessionNotFound
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.testing import AgentModel, FakeOpenAIServer, Reply

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


RAW_FORMS = ["ana.garcia@example.com", "ANA.GARCIA@EXAMPLE.COM", "7911 123456", "7911123456"]


@pytest.mark.parametrize("how", ["run", "run_sync", "run_streamed"])
def test_every_request_of_a_run_is_redacted_the_first_one_too(db_url: str, how: str) -> None:
    """The SDK sends a run's new input before the session stores it: the filter that
    ``session.run*`` installs redacts it, and every later request of the run (tool outputs
    included) with it."""
    world = World(db_url, privacy={"anonymize_pii": True})
    first = ("I'm travelling, write to ana.garcia@example.com or call +44 7911 123456. "
             "What is the weather in Paris?")

    async def turn(session: ChatkeepSession, agent: Agent[Any], text: str) -> None:
        if how == "run":
            await session.run(agent, text)
            return
        streamed = session.run_streamed(agent, text)
        async for _ in streamed.stream_events():
            pass

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG, actor=Ref("user", 7))
            # (The fake streams Chat Completions; its Responses endpoint does not stream.)
            agent = world.agent("chat" if how == "run_streamed" else "responses")
            await turn(session, agent, first)
            await turn(session, agent, "What is the weather in Rome?")
            stored = await (await keep.sessions.get(session.session_id)).read_messages()
            assert any("ana.garcia@example.com" in (m.content or "") for m in stored), \
                "the record keeps the real text"

    with world.server:
        if how == "run_sync":
            # run_sync reuses the thread's default loop: the keep is opened on that loop
            # (one keep on many loops is the reliability issue's, not this test's).
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                keep = world.keep()
                session = loop.run_until_complete(ChatkeepSession.open(keep, tenant=ORG))
                agent = world.agent()
                session.run_sync(agent, first)
                session.run_sync(agent, "What is the weather in Rome?")
                loop.run_until_complete(keep.close())
            finally:
                asyncio.set_event_loop(None)
                loop.close()
        else:
            run(scenario())
    bodies = world.server.bodies()
    assert len(bodies) >= 4
    for body in bodies:
        assert all(raw not in body for raw in RAW_FORMS), body[:600]
    assert any("<EMAIL_1>" in b for b in bodies)
    assert world.server.rejected == []


def test_a_run_that_bypasses_the_filter_is_refused_before_anything_is_sent(
        db_url: str) -> None:
    world = World(db_url, privacy={"anonymize_pii": True})

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            with pytest.raises(PrivacyError, match=r"session\.run"):
                await Runner.run(world.agent(), "mail ana.garcia@example.com",
                                 session=session)
            # A session that does not redact runs with the plain Runner as before.
            plain = await ChatkeepSession.open(keep, tenant=ORG)
            await (await keep.sessions.get(plain.session_id)).set_anonymize_pii(False)
            plain = ChatkeepSession(keep, plain.session_id, tenant=ORG)
            await Runner.run(world.agent(), "What is the weather in Paris?", session=plain)

    with world.server:
        run(scenario())
    assert all("ana.garcia" not in b for b in world.server.bodies())


def test_model_output_in_placeholders_is_stored_with_real_values(db_url: str) -> None:
    world = World(db_url, privacy={"anonymize_pii": True})
    world.server.responder = lambda body: Reply.ok("I will write to <EMAIL_1>.")

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await session.run(world.agent("chat"), "mail ana.garcia@example.com")
            assert result.final_output == "I will write to <EMAIL_1>."
            stored = await (await keep.sessions.get(session.session_id)).read_messages()
            assert stored[-1].content == "I will write to ana.garcia@example.com."
            with pytest.raises(PrivacyError):
                await session.get_items()  # outside a run: refused on a redacting session
            items = await session.read_items()  # replayed, redacted again
            assert "<EMAIL_1>" in json.dumps(items)
            assert "ana.garcia" not in json.dumps(items)

    with world.server:
        run(scenario())


@pytest.mark.parametrize("named", ["organization:2", {"type": "organization", "id": 2},
                                   {"type": "organization", "id": "2"}, Ref("organization", "2")])
def test_a_tenant_named_in_any_shape_is_checked(world: World, named: Any) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.add_items([{"role": "user", "content": "hello"}])
            with pytest.raises(SessionNotFound):
                await session.get_items(wrapper=RunContextWrapper(context={"tenant": named}))
            same = {"tenant": "organization:1"}
            assert await session.get_items(wrapper=RunContextWrapper(context=same))

    run(scenario())


def test_an_unreadable_tenant_in_the_run_context_is_a_typed_error(world: World) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            with pytest.raises(InvalidReference):
                await session.get_items(wrapper=RunContextWrapper(context={"tenant": 12}))

    run(scenario())


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
