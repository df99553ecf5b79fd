"""The OpenAI Agents SDK on chatkeep: ``Runner.run`` for real, offline (the SDK's own
OpenAI models against the strict local fake), and the ``Session`` protocol exercised
the way the SDK's own session tests do."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Coroutine, Sequence
from datetime import UTC, datetime
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
from sqlalchemy import update

from chatkeep import IncompleteToolTurn, InvalidReference, PrivacyError, Ref, SessionNotFound
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.store.schema import chat_messages
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


async def plain(items: Awaitable[Sequence[Any]]) -> list[dict[str, Any]]:
    """Input items as plain dicts (the SDK types them as a union of TypedDicts)."""
    return [dict(item) for item in await items]


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
            chat = await keep.sessions.by_key(session.session_id, ORG)
            stored = await chat.read_messages()
            calls = [c.id for m in stored for c in m.tool_calls]
            assert len(calls) == 4 and len({m.tool_call_id for m in stored if m.tool_call_id}) == 4
            # Billed like every other model call, and the ledger agrees.
            row = (await keep.sessions.get_unscoped(chat.id)).row
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
            chat = await keep.sessions.by_key(session.session_id, ORG)
            assert chat.summary_watermark > 0 and chat.summary
            items = await session.get_items()
            assert items[0]["role"] == "system" and "Summary" in items[0]["content"]
        assert world.server.rejected == []

    with world.server:
        run(scenario())


def _summaries_and(responder: Any) -> Any:
    """The agent model, except for chatkeep's own summarizer calls (chat completions whose
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
            stored = await (await session.conversation()).read_messages()
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
            await (await plain.conversation()).set_anonymize_pii(False)
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
            # What the app shows has the user's own value; the run's items keep what the
            # model wrote (and saw).
            assert result.final_output == "I will write to ana.garcia@example.com."
            assert "<EMAIL_1>" in json.dumps(result.to_input_list())
            kept = await session.run(world.agent("chat"), "again", restore=False)
            assert kept.final_output == "I will write to <EMAIL_1>."
            stored = await (await session.conversation()).read_messages()
            assert stored[-1].content == "I will write to ana.garcia@example.com."
            assert stored[1].content == "I will write to ana.garcia@example.com."
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
            # The same key in another tenant names another conversation: empty.
            theirs = await ChatkeepSession.open(keep, tenant=OTHER, session_id=mine.session_id)
            assert await theirs.get_items() == []
            await theirs.add_items([{"role": "user", "content": "their plan"}])
            assert [i["content"] for i in await plain(mine.get_items())] == ["secret plan"]
            assert (await theirs.conversation()).id != (await mine.conversation()).id
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
            # A call waiting for its output is handed back, as the SDK's sessions do (its
            # runner deals with it); chatkeep's own build_history refuses it.
            assert await session.get_items() == items[:4]
            chat = await session.conversation()
            with pytest.raises(IncompleteToolTurn, match="without a result"):
                await keep.compressor.build_history(chat, "", format="openai_responses")
            assert await session.pop_item() == items[-2]
            assert await session.get_items() == items[:3]
            await session.add_items(items[3:])  # the retried tail: same call id again
            assert await session.get_items() == items
            await session.clear_session()
            assert await session.get_items() == []
            # as the SDK's own sessions do, the items are gone, not hidden
            assert await (await session.conversation()).read_messages() == []

    run(scenario())


def test_a_backdated_newest_item_is_still_the_latest(world: World) -> None:
    """Order is the order of appends, not of stored times (the SDK's own test of this
    rewrites its table's created_at; this rewrites chatkeep's)."""
    items: list[Any] = [{"role": "user", "content": f"turn {n}"} for n in range(1, 4)]

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            for item in items:
                await session.add_items([item])
            chat = await session.conversation()
            newest = max(m.seq for m in await chat.read_messages())
            async with keep.engine.begin() as conn:  # a later append, clock set back
                moved = await conn.execute(update(chat_messages).where(
                    chat_messages.c.session_id == chat.id, chat_messages.c.seq == newest,
                ).values(created_at=datetime(2000, 1, 1, tzinfo=UTC)))
            assert moved.rowcount == 1
            assert await session.get_items() == items
            assert await session.get_items(limit=1) == items[-1:]
            assert await session.pop_item() == items[-1]
            assert await session.get_items() == items[:-1]

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


def test_the_session_id_is_the_applications_key(world: World) -> None:
    async def scenario() -> None:
        async with world.keep() as keep:
            session = ChatkeepSession(keep, "support-4711", tenant=ORG, actor=Ref("user", 3),
                                      title="Ticket 4711")
            # Reading a key nobody wrote to creates nothing.
            assert await session.get_items() == [] and await session.pop_item() is None
            await session.clear_session()
            with pytest.raises(SessionNotFound):
                await keep.sessions.by_key("support-4711", ORG)
            await session.add_items([{"role": "user", "content": "My order is late."}])
            chat = await keep.sessions.by_key("support-4711", ORG)
            assert chat.key == "support-4711" and chat.title == "Ticket 4711"
            assert chat.actor == Ref("user", 3)
            # Another object on the same key (another worker, a restart) is the same
            # conversation; the first write of two at once creates one session.
            again = ChatkeepSession(keep, "support-4711", tenant=ORG, actor=Ref("user", 3))
            assert [i["content"] for i in await plain(again.get_items())] == ["My order is late."]
            fresh = [ChatkeepSession(keep, "support-4712", tenant=ORG) for _ in range(3)]
            await asyncio.gather(*(s.add_items([{"role": "user", "content": f"w{i}"}])
                                   for i, s in enumerate(fresh)))
            ids = {(await s.conversation()).id for s in fresh}
            assert len(ids) == 1 and len(await fresh[0].get_items()) == 3

    run(scenario())


def test_session_settings_default_like_the_sdks_and_limit_get_items(world: World) -> None:
    from agents.memory import SessionSettings

    async def scenario() -> None:
        async with world.keep() as keep:
            session = ChatkeepSession(keep, "settings", tenant=ORG)
            assert session.session_settings == SessionSettings()
            await session.add_items([{"role": "user", "content": f"m{i}"} for i in range(5)])
            limited = ChatkeepSession(keep, "settings", tenant=ORG,
                                      session_settings={"limit": 2})
            assert limited.session_settings == SessionSettings(limit=2)
            assert [i["content"] for i in await plain(limited.get_items())] == ["m3", "m4"]
            assert [i["content"] for i in await plain(limited.get_items(limit=3))] == \
                ["m2", "m3", "m4"]
            assert await limited.get_items(limit=0) == []
            assert len(await limited.get_items(limit=-1)) == 5  # as SQLite's LIMIT -1
            with pytest.raises(TypeError):
                ChatkeepSession(keep, "settings", tenant=ORG, session_settings={"limitt": 1})

    run(scenario())


def test_closed_turns_keep_their_tool_items_in_the_sdk_replay_only(world: World) -> None:
    """``get_items`` returns a closed turn's reasoning, call and output as the SDK's own
    sessions do; chatkeep's ``build_history`` still replays closed turns as text."""

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            agent = world.agent()
            await Runner.run(agent, "What is the weather in Paris?", session=session)
            await Runner.run(agent, "Thanks!", session=session)
            items = await plain(session.get_items())
            kinds = [i.get("type", "message") for i in items]
            assert kinds.count("function_call") == 1 and kinds.count("reasoning") >= 1
            (output,) = [i for i in items if i.get("type") == "function_call_output"]
            assert output["output"] == "18C and sunny"
            assert items[0] == {"role": "user", "content": "What is the weather in Paris?"}
            assert items[-1]["content"][0]["text"] == "echo: Thanks!"
            assert await plain(session.get_items(limit=3)) == items[-3:]
            chat = await session.conversation()
            text_only = await plain(keep.compressor.build_history(
                chat, "", format="openai_responses"))
            assert all("type" not in i or i["type"] == "message" for i in text_only)
            assert len(text_only) < len(items)

    run(scenario())


def test_the_sdk_replay_is_redacted_and_folded_without_splitting_a_tool_turn(
        db_url: str) -> None:
    world = World(db_url, chat={"max_history_tokens": 600, "recent_messages_min": 2},
                  privacy={"anonymize_pii": True})
    world.server.responder = _summaries_and(world.model.openai)

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            agent = world.agent()
            await session.run(agent, "Write to ana.garcia@example.com. Weather in Paris?")
            for i in range(5):
                await session.run(agent, f"({i}) What is the weather in Rome and Oslo?")
            items = await plain(session.read_items())
            assert "ana.garcia" not in json.dumps(items)
            assert items[0]["role"] == "system" and "Summary" in items[0]["content"]
            chat = await keep.sessions.by_key(session.session_id, ORG)
            assert chat.summary_watermark > 0
            # What is left after the fold is whole: every output after its call, every
            # call after its reasoning (the strict fake rejects anything else, too).
            calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
            assert all(i["call_id"] in calls for i in items
                       if i.get("type") == "function_call_output")
            for before, item in itertools.pairwise(items):
                if item.get("type") == "function_call" and before.get("type") != \
                        "function_call":
                    assert before.get("type") == "reasoning", (before, item)
        assert world.server.rejected == []

    with world.server:
        run(scenario())


def test_a_fold_of_the_sdk_replay_ends_only_between_whole_tool_turns() -> None:
    from chatkeep.history.plan import fold_cuts
    from chatkeep.messages import Message, Role, ToolCall

    def message(seq: int, role: Role, content: str | None = None, *, calls: tuple[str, ...] = (),
                answers: str | None = None) -> Message:
        return Message("s", seq, role, content, tuple(ToolCall(c, "f", "{}") for c in calls),
                       answers)

    messages = [
        message(1, Role.USER, "hi"),                       # 0
        message(2, Role.ASSISTANT),                        # 1 reasoning, alone
        message(3, Role.ASSISTANT, calls=("a", "b")),      # 2
        message(4, Role.TOOL, "A", answers="a"),           # 3
        message(5, Role.TOOL, "B", answers="b"),           # 4
        message(6, Role.ASSISTANT, "done"),                # 5
        message(7, Role.USER, "again"),                    # 6
        message(8, Role.ASSISTANT, calls=("c",)),          # 7: answered in the open turn
        message(9, Role.ASSISTANT, calls=("d",)),          # 8: never answered
    ]
    cuts = fold_cuts(messages, later=[message(10, Role.TOOL, "C", answers="c")])
    # Not after the reasoning (2), not between a call and its outputs (3, 4), not after
    # a call the open turn answers (8, 9); a call nobody answers does not block.
    assert cuts == {0, 1, 5, 6, 7}


def test_a_bounded_read_is_one_query_and_equals_the_replays_tail(world: World) -> None:
    """``get_items(limit)`` reads what the limit asks for (issue 37 item 2): the newest
    live items in one query, exactly the tail the whole replay would give; a limit that
    reaches into the summary (or a redacting session, or a tail over budget) is answered
    by the whole replay."""
    from sqlalchemy import event

    turns = []
    for i in range(30):
        turns += [{"role": "user", "content": f"question {i}"},
                  {"type": "function_call", "call_id": f"c{i}", "name": "get_weather",
                   "arguments": '{"city": "Oslo"}', "id": f"fc_{i}", "status": "completed"},
                  {"type": "function_call_output", "call_id": f"c{i}", "output": f"{i}C"},
                  {"type": "message", "role": "assistant", "id": f"m{i}",
                   "status": "completed",
                   "content": [{"type": "output_text", "text": f"It is {i}C.",
                                "annotations": []}]}]

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.add_items(turns)
            whole = await session.get_items()
            engine = (await keep.core()).engine
            statements: list[str] = []

            def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
                statements.append(statement)

            for limit in (1, 2, 5, 20, 119, 120, 500):
                event.listen(engine, "before_cursor_execute", count)
                try:
                    bounded = await session.get_items(limit=limit)
                finally:
                    event.remove(engine, "before_cursor_execute", count)
                assert bounded == whole[-limit:], (limit, bounded[:2], whole[-limit:][:2])
            reads = [s for s in statements if "chat_messages" in s]
            assert len(reads) == 7, reads  # one query per call, whatever the limit

    run(scenario())
