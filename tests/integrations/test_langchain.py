"""LangChain v1 and LangGraph on chatkeep: ``create_agent`` run for real, offline, with a
langchain-core fake chat model that answers from what it is sent (tool calls included),
sync (``invoke`` on ``Chatkeep``) and async (``ainvoke`` on ``AsyncChatkeep``); and the
LangGraph ``BaseStore`` over chatkeep's memories."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field

from chatkeep import Chatkeep, InvalidArgument, InvalidReference, Ref, SessionNotFound
from chatkeep.aio import AsyncChatkeep
from chatkeep.errors import ConfigError, SessionKeyConflict
from chatkeep.integrations.langchain import (
    ChatkeepMiddleware,
    ChatkeepStore,
    namespace_of,
    parse_namespace,
)
from chatkeep.integrations.langchain.messages import LANGCHAIN_ID
from chatkeep.integrations.langchain.middleware import TAIL
from chatkeep.memory.embedders import HashEmbedder
from chatkeep.tokens import HeuristicCounter

ORG, OTHER = Ref("organization", 1), Ref("organization", 2)
USER = Ref("user", 7)
SYSTEM = "You are a weather assistant. Use get_weather for every city asked about."
WEATHER = {"Paris": "18C and sunny", "Rome": "24C and clear", "Oslo": "2C and snowing"}
SMALL = {"chat": {"max_history_tokens": 300, "recent_messages_min": 2,
                  "summary_max_tokens": 60}}
RAW_FORMS = ["ana.garcia@example.com", "ANA.GARCIA@EXAMPLE.COM", "7911 123456", "7911123456",
             "luis.mora@example.org"]


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return WEATHER.get(city, "unknown")


@tool
def find_contact(name: str) -> str:
    """The e-mail address of a colleague."""
    return f"{name}: luis.mora@example.org"


class WeatherModel(GenericFakeChatModel):
    """langchain-core's ``GenericFakeChatModel`` answering from its input, so a run takes
    as many model calls as a real one: a question naming cities is answered with one
    ``get_weather`` call per city (parallel calls), a question naming a colleague with a
    ``find_contact`` call, tool results with their texts, anything else with an echo.
    Every input it was sent is kept in ``seen``."""

    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    ids: Iterator[int] = Field(default_factory=itertools.count)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> WeatherModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        self.messages = iter([self._answer(messages)])
        return super()._generate(messages, stop, run_manager, **kwargs)

    def _answer(self, messages: list[BaseMessage]) -> AIMessage:
        usage = UsageMetadata(input_tokens=11, output_tokens=3, total_tokens=14)
        last = messages[-1]
        if isinstance(last, ToolMessage):
            results: list[str] = []
            for message in reversed(messages):
                if not isinstance(message, ToolMessage):
                    break
                results.insert(0, str(message.content))
            return AIMessage("; ".join(results), usage_metadata=usage)
        text = str(last.text)
        calls = [{"name": "get_weather", "args": {"city": c}} for c in WEATHER if c in text]
        if "colleague" in text:
            calls.append({"name": "find_contact", "args": {"name": "Luis"}})
        if calls:
            return AIMessage("", usage_metadata=usage, tool_calls=[
                {**c, "id": f"call_{next(self.ids)}", "type": "tool_call"} for c in calls])
        return AIMessage(f"echo: {text[:60]}", usage_metadata=usage)


def agent(keep: Chatkeep | AsyncChatkeep, model: WeatherModel, **options: Any) -> Any:
    return create_agent(model, [get_weather, find_contact], system_prompt=SYSTEM,
                        middleware=[ChatkeepMiddleware(keep, **options)],
                        checkpointer=InMemorySaver())


def question(i: int) -> str:
    cities = ["Paris", "Rome and Oslo", "Oslo", "Paris, Rome and Oslo"][i % 4]
    return (f"({i}) What is the weather in {cities}? I am planning a trip next week with "
            "my family and want to pack the right clothes for every stop.")


def config(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def tokens(messages: Sequence[BaseMessage]) -> int:
    """What a request carries, counted as chatkeep counts (text and tool-call arguments)."""
    counter = HeuristicCounter()
    return sum(counter.count(str(m.text)) + sum(
        counter.count(c["name"] + json.dumps(c["args"]))
        for c in getattr(m, "tool_calls", ())) for m in messages)


def check_request(messages: Sequence[BaseMessage], budget: int) -> None:
    """One model request: the system prompt first, within the budget, and every tool
    call sent with each of its results right after it (and no result without its call)."""
    assert isinstance(messages[0], SystemMessage) and SYSTEM in str(messages[0].text)
    assert tokens(messages) <= budget
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = sorted(c["id"] or "" for c in message.tool_calls)
            after = messages[index + 1:index + 1 + len(ids)]
            assert all(isinstance(m, ToolMessage) for m in after), messages
            assert sorted(m.tool_call_id for m in after if isinstance(m, ToolMessage)) == ids
        if isinstance(message, ToolMessage):
            before = index - 1
            while isinstance(messages[before], ToolMessage):
                before -= 1
            caller = messages[before]
            assert isinstance(caller, AIMessage)
            assert message.tool_call_id in {c["id"] for c in caller.tool_calls}


def grown(before: Sequence[BaseMessage], after: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The state after a turn is the state before it plus the turn: never rewritten."""
    assert [(m.id, m.content) for m in after[:len(before)]] == \
        [(m.id, m.content) for m in before]
    return list(after[len(before):])


def expected_new(i: int) -> int:
    """Messages one question adds to the state: user, calls, one result per city, answer."""
    return 3 + question(i).count("Paris") + question(i).count("Rome") + \
        question(i).count("Oslo")


TURNS = 9


# -- the middleware ------------------------------------------------------------------------


def test_sync_agent_many_turns_within_budget_tools_whole_state_untouched(db_url: str) -> None:
    model = WeatherModel()
    thread = f"thread-{uuid.uuid4()}"
    with Chatkeep(db_url, config=SMALL, dispatcher="inline") as keep:
        graph = agent(keep, model, tenant=ORG, actor=USER, trim_state=False)
        state: list[BaseMessage] = []
        for i in range(TURNS):
            out = graph.invoke({"messages": [{"role": "user", "content": question(i)}]},
                               config(thread))
            new = grown(state, out["messages"])
            assert len(new) == expected_new(i)
            assert isinstance(new[-1], AIMessage) and "C and" in str(new[-1].content)
            state = out["messages"]
        assert graph.get_state(config(thread)).values["messages"] == state
        budget = SMALL["chat"]["max_history_tokens"]
        for request in model.seen:
            check_request(request, budget)
        assert len(model.seen[-1]) < len(state)  # the budget is doing its job

        session = keep.sessions.by_key(thread, ORG)
        assert session.key == thread and session.actor == USER
        stored = session.read_messages()
        # Every message of the thread, once, in the thread's order.
        assert [m.metadata[LANGCHAIN_ID] for m in stored] == [m.id for m in state]
        assert [m.role.value for m in stored] == [
            {"human": "user", "ai": "assistant", "tool": "tool"}[m.type] for m in state]
        assert session.summary_watermark > 0 and session.summary
        # Every model call billed to the session (and its tenant) with the usage it reported.
        assert session.total_tokens == 14 * len(model.seen)
        (line,) = [u for u in keep.usage(ORG) if u.purpose == "chat"]
        assert line.calls == len(model.seen)


def test_async_agent_many_turns_within_budget_tools_whole_state_untouched(db_url: str) -> None:
    model = WeatherModel()
    thread = f"thread-{uuid.uuid4()}"

    async def scenario() -> None:
        async with AsyncChatkeep(db_url, config=SMALL, dispatcher="inline") as keep:
            graph = agent(keep, model, trim_state=False)
            state: list[BaseMessage] = []
            for i in range(TURNS):
                out = await graph.ainvoke(
                    {"messages": [{"role": "user", "content": question(i)}]},
                    config(thread), context={"tenant": "organization:1", "actor": USER})
                new = grown(state, out["messages"])
                assert len(new) == expected_new(i)
                state = out["messages"]
            for request in model.seen:
                check_request(request, SMALL["chat"]["max_history_tokens"])
            session = await keep.sessions.by_key(thread, ORG)
            stored = await session.read_messages()
            assert [m.metadata[LANGCHAIN_ID] for m in stored] == [m.id for m in state]
            assert session.summary_watermark > 0
            assert session.total_tokens == 14 * len(model.seen)

    asyncio.run(scenario())


def test_thread_id_is_the_sessions_key_and_a_thread_resumes_its_session(db_url: str) -> None:
    model = WeatherModel()
    saver = InMemorySaver()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        def make() -> Any:
            return create_agent(model, [get_weather], system_prompt=SYSTEM,
                                middleware=[ChatkeepMiddleware(keep, tenant=ORG)],
                                checkpointer=saver)

        make().invoke({"messages": [{"role": "user", "content": "Hello"}]}, config("a"))
        make().invoke({"messages": [{"role": "user", "content": "Hi there"}]}, config("b"))
        # A new agent on the same thread carries on the same conversation.
        make().invoke({"messages": [{"role": "user", "content": "Weather in Rome?"}]},
                      config("a"))
        a, b = keep.sessions.by_key("a", ORG), keep.sessions.by_key("b", ORG)
        assert a.id != b.id
        assert [m.content for m in a.read_messages() if m.role.value == "user"] == \
            ["Hello", "Weather in Rome?"]
        assert [m.content for m in b.read_messages()] == ["Hi there", "echo: Hi there"]
        assert {s.key for s in keep.sessions.list(ORG)} == {"a", "b"}
        # The model got the earlier turn of thread "a" from chatkeep.
        assert any(isinstance(m, HumanMessage) and m.content == "Hello"
                   for m in model.seen[-1])


def test_the_session_outlives_the_checkpointer(db_url: str) -> None:
    """A thread whose checkpoint is gone (a new process on ``InMemorySaver``) carries on
    from chatkeep; an instruction the application adds to the session goes out pinned."""
    model = WeatherModel()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        agent(keep, model, tenant=ORG).invoke(
            {"messages": [{"role": "user", "content": "What is the weather in Oslo?"}]},
            config("long"))
        session = keep.sessions.by_key("long", ORG)
        session.add_system("Answer in one short sentence.")
        fresh = agent(keep, model, tenant=ORG)  # a new, empty checkpointer
        out = fresh.invoke({"messages": [{"role": "user", "content": "And tomorrow?"}]},
                           config("long"))
        assert len(out["messages"]) == 2  # LangGraph's state: only this run's
        sent = model.seen[-1]
        assert [type(m).__name__ for m in sent] == [
            "SystemMessage", "SystemMessage", "HumanMessage", "AIMessage", "HumanMessage"]
        assert sent[1].content == "Answer in one short sentence."
        assert [m.content for m in sent[2:]] == [
            "What is the weather in Oslo?", "2C and snowing", "And tomorrow?"]
        stored = session.read_messages()
        assert [m.content for m in stored if m.role.value == "user"] == [
            "What is the weather in Oslo?", "And tomorrow?"]
        assert len(stored) == 7  # 4 + the instruction + the new question and its answer


def test_without_a_checkpointer_chatkeep_alone_keeps_the_thread(db_url: str) -> None:
    """No checkpointer: each run's state is only its input, so nothing anchors it in the
    session's tail; the store is asked which of its ids are recorded, and only the new
    messages are, however far back the resent ones were (beyond the tail read)."""
    model = WeatherModel()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        bare = create_agent(model, [get_weather], system_prompt=SYSTEM,
                            middleware=[ChatkeepMiddleware(keep, tenant=ORG)])
        first = HumanMessage("Hello, I am planning a trip.", id="first-question")
        bare.invoke({"messages": [first]}, config("solo"))
        turns = TAIL // 2 + 4  # two messages a turn: the first question leaves the tail
        for i in range(turns):
            bare.invoke({"messages": [{"role": "user", "content": f"note {i}"}]},
                        config("solo"))
        session = keep.sessions.by_key("solo", ORG)
        assert session.message_count == 2 * (turns + 1)
        # The app resends the first question with a new one: only the new one is recorded.
        bare.invoke({"messages": [first, HumanMessage("And Rome?", id="new-question")]},
                    config("solo"))
        stored = session.read_messages()
        assert [m.metadata.get(LANGCHAIN_ID) for m in stored].count("first-question") == 1
        # The new question, its call, the call's result, the answer.
        assert len(stored) == 2 * (turns + 1) + 4
        assert [m.role.value for m in stored[-4:]] == ["user", "assistant", "tool", "assistant"]
        assert stored[-4].content == "And Rome?"
        # The model was sent chatkeep's history: earlier notes included.
        assert any(isinstance(m, HumanMessage) and m.content == f"note {turns - 1}"
                   for m in model.seen[-1])


def test_a_run_ending_with_a_return_direct_result_records_it(db_url: str) -> None:
    """A ``return_direct`` tool ends the run with its result and no model call after it:
    ``after_agent`` records it; a run ending with the model's answer records nothing more
    there (``after_model`` did)."""

    @tool(return_direct=True)
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return WEATHER.get(city, "unknown")

    model = WeatherModel()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        direct = create_agent(model, [get_weather], system_prompt=SYSTEM,
                              middleware=[ChatkeepMiddleware(keep, tenant=ORG)],
                              checkpointer=InMemorySaver())
        out = direct.invoke({"messages": [{"role": "user", "content": "Weather in Rome?"}]},
                            config("direct"))
        assert isinstance(out["messages"][-1], ToolMessage)
        stored = keep.sessions.by_key("direct", ORG).read_messages()
        assert [m.role.value for m in stored] == ["user", "assistant", "tool"]
        assert stored[-1].content == "24C and clear"
        out = direct.invoke({"messages": [{"role": "user", "content": "Thanks!"}]},
                            config("direct"))
        stored = keep.sessions.by_key("direct", ORG).read_messages()
        assert [m.role.value for m in stored] == ["user", "assistant", "tool", "user",
                                                  "assistant"]
        assert len({m.metadata[LANGCHAIN_ID] for m in stored}) == 5


def test_tenants_never_cross(db_url: str) -> None:
    model = WeatherModel()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        graph = agent(keep, model)
        graph.invoke({"messages": [{"role": "user", "content": "secret plan for org 1"}]},
                     config("shared"), context={"tenant": ORG})
        # The same thread id in another tenant (and another checkpointer) is another session.
        other = agent(keep, model)
        other.invoke({"messages": [{"role": "user", "content": "hello from org 2"}]},
                     config("shared"), context={"tenant": OTHER})
        assert all("secret" not in str(m.content) for m in model.seen[-1])
        mine, theirs = keep.sessions.by_key("shared", ORG), keep.sessions.by_key("shared",
                                                                                 OTHER)
        assert mine.id != theirs.id
        assert theirs.read_messages()[0].content == "hello from org 2"
        with pytest.raises(SessionNotFound):
            keep.sessions.get(mine.id, tenant=OTHER)
        # A middleware pinned to a tenant refuses a run whose context names another.
        pinned = agent(keep, model, tenant=ORG)
        with pytest.raises(SessionNotFound):
            pinned.invoke({"messages": [{"role": "user", "content": "hi"}]}, config("x"),
                          context={"tenant": "organization:2"})
        with pytest.raises(InvalidReference):
            graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, config("y"),
                         context={"tenant": 12})
        with pytest.raises(InvalidArgument, match="tenant"):
            graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, config("z"))
        # A thread opened for one actor is never served to another.
        graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, config("mine"),
                     context={"tenant": ORG, "actor": "user:1"})
        with pytest.raises(SessionKeyConflict):
            graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, config("mine"),
                         context={"tenant": ORG, "actor": "user:2"})
        with pytest.raises(InvalidArgument, match="actor"):
            agent(keep, model, tenant=ORG, actor=USER).invoke(
                {"messages": [{"role": "user", "content": "hi"}]}, config("yours"),
                context={"actor": "user:2"})


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_raw_personal_data_never_reaches_the_model(db_url: str, driver: str) -> None:
    """Redacting session: the first request of a run, tool results (a value first seen in
    one), and every later request carry placeholders only; the record keeps real text."""
    model = WeatherModel()
    first = ("I'm travelling, write to ana.garcia@example.com or call +44 7911 123456. "
             "What is the weather in Paris? And ask my colleague.")
    follow = "Did you mail ANA.GARCIA@EXAMPLE.COM yet? What about Rome?"
    settings = {**SMALL, "privacy": {"anonymize_pii": True}}

    def check(stored: Sequence[Any]) -> None:
        assert any("ana.garcia@example.com" in (m.content or "") for m in stored)
        assert any("luis.mora@example.org" in (m.content or "") for m in stored)

    if driver == "sync":
        with Chatkeep(db_url, config=settings, dispatcher="inline") as keep:
            graph = agent(keep, model, tenant=ORG)
            for text in (first, follow, "thanks"):
                graph.invoke({"messages": [{"role": "user", "content": text}]}, config("p"))
            check(keep.sessions.by_key("p", ORG).read_messages())
    else:
        async def scenario() -> None:
            async with AsyncChatkeep(db_url, config=settings, dispatcher="inline") as keep:
                graph = agent(keep, model, tenant=ORG)
                for text in (first, follow, "thanks"):
                    await graph.ainvoke({"messages": [{"role": "user", "content": text}]},
                                        config("p"))
                check(await (await keep.sessions.by_key("p", ORG)).read_messages())

        asyncio.run(scenario())
    assert len(model.seen) >= 5
    sent = [json.dumps([m.model_dump(mode="json") for m in request]) for request in model.seen]
    for body in sent:
        assert all(raw not in body for raw in RAW_FORMS), body[:800]
    assert all("<EMAIL_1>" in body for body in sent)
    assert any("<EMAIL_2>" in body for body in sent)  # the colleague's, from a tool result
    assert any("<PHONE_1>" in body for body in sent)


def test_model_output_in_placeholders_is_stored_with_real_values(db_url: str) -> None:
    class Writer(WeatherModel):
        def _answer(self, messages: list[BaseMessage]) -> AIMessage:
            return AIMessage("I will write to <EMAIL_1>.")

    model = Writer()
    with Chatkeep(db_url, config={"privacy": {"anonymize_pii": True}},
                  dispatcher="inline") as keep:
        graph = agent(keep, model, tenant=ORG)
        out = graph.invoke({"messages": [{"role": "user", "content": "mail ana@example.com"}]},
                           config("w"))
        # The thread keeps (and the app shows) the real value; so does chatkeep's record.
        assert out["messages"][-1].content == "I will write to ana@example.com."
        stored = keep.sessions.by_key("w", ORG).read_messages()
        assert stored[-1].content == "I will write to ana@example.com."
        assert model.seen[-1][-1].content == "mail <EMAIL_1>"
        graph.invoke({"messages": [{"role": "user", "content": "ok"}]}, config("w"))
        replayed = json.dumps([m.model_dump(mode="json") for m in model.seen[-1]])
        assert "<EMAIL_1>" in replayed and "ana@example.com" not in replayed


def test_system_message_blocks_and_recalled_memories_go_out_scrubbed(db_url: str) -> None:
    model = WeatherModel()
    settings = {"privacy": {"anonymize_pii": True}, "memory": {"recall_in_history": True}}
    with Chatkeep(db_url, config=settings, dispatcher="inline") as keep:
        ChatkeepStore(keep).put(namespace_of(ORG, "actor", USER), "new",
                                {"content": "Prefers temperatures in Celsius"})
        system = SystemMessage(content=[
            {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "Escalations go to ops.lead@example.net."}])
        graph = create_agent(model, [get_weather], system_prompt=system,
                             middleware=[ChatkeepMiddleware(keep, tenant=ORG, actor=USER)],
                             checkpointer=InMemorySaver())
        graph.invoke({"messages": [{"role": "user", "content": "Celsius please, Oslo?"}]},
                     config("s"))
        sent = model.seen[0][0]
        assert isinstance(sent, SystemMessage) and isinstance(sent.content, list)
        first, second, memories = sent.content
        assert first == {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
        assert "ops.lead@example.net" not in json.dumps(sent.content)
        assert "<EMAIL_" in second["text"]  # type: ignore[index]
        assert "Prefers temperatures in Celsius" in memories["text"]  # type: ignore[index]


def test_a_tool_turn_resumed_after_an_interrupted_run_is_never_split(db_url: str) -> None:
    """The run stops after the model asked for tools (``interrupt_before``): chatkeep
    holds the call; the resumed run records the results and sends them with their call."""
    model = WeatherModel()
    with Chatkeep(db_url, config=SMALL, dispatcher="inline") as keep:
        graph = create_agent(model, [get_weather], system_prompt=SYSTEM,
                             middleware=[ChatkeepMiddleware(keep, tenant=ORG)],
                             checkpointer=InMemorySaver(), interrupt_before=["tools"])
        graph.invoke({"messages": [{"role": "user", "content": question(3)}]}, config("i"))
        stored = keep.sessions.by_key("i", ORG).read_messages()
        assert [len(m.tool_calls) for m in stored] == [0, 3]
        out = graph.invoke(None, config("i"))
        assert "24C" in str(out["messages"][-1].content)
        check_request(model.seen[-1], SMALL["chat"]["max_history_tokens"])
        assert [m.role.value for m in keep.sessions.by_key("i", ORG).read_messages()] == \
            ["user", "assistant", "tool", "tool", "tool", "assistant"]


def test_a_run_needs_a_thread_and_the_matching_keep(db_url: str) -> None:
    model = WeatherModel()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        bare = create_agent(model, [get_weather], middleware=[ChatkeepMiddleware(keep,
                                                                                 tenant=ORG)])
        with pytest.raises(InvalidArgument, match="thread_id"):
            bare.invoke({"messages": [{"role": "user", "content": "hi"}]})
        with pytest.raises(ConfigError, match="AsyncChatkeep"):
            asyncio.run(agent(keep, model, tenant=ORG).ainvoke(
                {"messages": [{"role": "user", "content": "hi"}]}, config("t")))
    with pytest.raises(ConfigError):
        ChatkeepMiddleware("sqlite://")  # type: ignore[arg-type]

    async def wrong() -> None:
        async with AsyncChatkeep(db_url) as akeep:
            agent(akeep, model, tenant=ORG).invoke(
                {"messages": [{"role": "user", "content": "hi"}]}, config("t"))

    with pytest.raises(ConfigError, match="ainvoke"):
        asyncio.run(wrong())


# -- the store -----------------------------------------------------------------------------

UNMAPPED = "namespace not mapped to chatkeep memories"
UNSUPPORTED = "not supported by chatkeep memories"
PERSONAL = namespace_of(ORG, "actor", USER)
SHARED = namespace_of(ORG, "tenant")
MATTER = namespace_of(ORG, "subject", Ref("matter", 12))


def test_namespace_convention() -> None:
    assert PERSONAL == ("organization:1", "actor", "user:7")
    assert SHARED == ("organization:1", "tenant")
    assert MATTER == ("organization:1", "subject", "matter:12")
    assert namespace_of(ORG, "personal", USER) == PERSONAL
    assert parse_namespace(PERSONAL).target.actor == USER
    for bad in [(), ("memories", "user-7"), ("organization:1",), ("organization:1", "team"),
                ("organization:1", "actor"), ("organization:1", "tenant", "user:7"),
                ("organization:1", "actor", "nobody"), (*PERSONAL, "x")]:
        with pytest.raises(InvalidArgument, match=UNMAPPED):
            parse_namespace(bad)
    with pytest.raises(ValueError):  # as LangGraph's own InvalidNamespaceError is
        parse_namespace(("organization:1", "team"))
    with pytest.raises(InvalidArgument, match=UNMAPPED):
        namespace_of(ORG, "actor")
    with pytest.raises(InvalidArgument, match=UNMAPPED):
        namespace_of(ORG, "actor", Ref("user", "a.b"))


def test_store_put_get_search_across_scopes(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep)
        store.put(PERSONAL, "k1", {"content": "Prefers replies in Spanish"})
        store.put(SHARED, "k2", {"content": "Invoices are approved by the finance team"})
        store.put(MATTER, "k3", {"content": "The hearing for matter 12 is on 3 March"})
        store.put(namespace_of(ORG, "actor", Ref("user", 8)), "k4",
                  {"content": "Prefers replies in French"})

        (spanish,) = store.search(PERSONAL)
        assert spanish.value == {"content": "Prefers replies in Spanish"}
        assert spanish.namespace == PERSONAL and spanish.key.isdigit()
        assert store.get(PERSONAL, spanish.key) == store.get(PERSONAL, spanish.key)
        got = store.get(PERSONAL, spanish.key)
        assert got is not None and got.value == spanish.value
        assert store.get(SHARED, spanish.key) is None  # not in that scope
        assert store.get(PERSONAL, "k1") is None  # keys are chatkeep's memory ids

        everything = store.search(("organization:1",), limit=10)
        assert {tuple(i.namespace) for i in everything} == {
            PERSONAL, SHARED, MATTER, namespace_of(ORG, "actor", Ref("user", 8))}
        actors = store.search(("organization:1", "actor"))
        assert sorted(i.value["content"] for i in actors) == [
            "Prefers replies in French", "Prefers replies in Spanish"]
        # Recall ranks by the query, within the namespace asked.
        hits = store.search(("organization:1",), query="which language for replies?")
        assert {h.value["content"] for h in hits} == {"Prefers replies in Spanish",
                                                       "Prefers replies in French"}
        assert all(h.score is not None for h in hits)
        (hearing,) = store.search(MATTER, query="when is the hearing")
        assert "3 March" in hearing.value["content"]
        assert store.search(PERSONAL, query="hearing") == []
        assert len(store.search(("organization:1",), limit=2)) == 2
        assert len(store.search(("organization:1",), limit=2, offset=3)) == 1

        # The memories are chatkeep's: recall for a session of that actor finds them.
        session = keep.sessions.create(ORG, USER)
        assert {m.content for m in keep.memory.recall(session)} == {
            "Prefers replies in Spanish", "Invoices are approved by the finance team"}

        assert store.list_namespaces(prefix=("organization:1",)) == sorted([
            PERSONAL, SHARED, MATTER, namespace_of(ORG, "actor", Ref("user", 8))])
        assert store.list_namespaces(prefix=("organization:1", "actor"), max_depth=2) == [
            ("organization:1", "actor")]
        assert store.list_namespaces(prefix=("organization:1",), suffix=("user:7",)) == \
            [PERSONAL]
        assert store.list_namespaces(prefix=("organization:1", "*", "matter:12")) == [MATTER]


def test_store_update_supersedes_and_delete_erases(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep)
        store.put(PERSONAL, "new", {"content": "Lives in Porto"})
        (old,) = store.search(PERSONAL)
        store.put(PERSONAL, old.key, {"content": "Lives in Lisbon"})
        (new,) = store.search(PERSONAL)
        assert new.value == {"content": "Lives in Lisbon"} and new.key != old.key
        moved = store.get(PERSONAL, old.key)  # the old key leads to the newest version
        assert moved is not None and moved.key == new.key
        history = keep.memory.list(ORG, include_superseded=True)
        assert {(m.content, m.superseded_by) for m in history} == {
            ("Lives in Lisbon", None), ("Lives in Porto", int(new.key))}
        # The same text twice is one memory.
        store.put(PERSONAL, "again", {"content": "lives in LISBON"})
        assert [i.key for i in store.search(PERSONAL)] == [new.key]
        store.delete(PERSONAL, new.key)
        assert store.search(PERSONAL) == [] and store.get(PERSONAL, new.key) is None
        store.delete(PERSONAL, "12345")  # nothing there: nothing happens


def test_store_never_crosses_tenants(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep)
        store.put(PERSONAL, "new", {"content": "Card ends in 4242, budget 9000 EUR"})
        (mine,) = store.search(PERSONAL)
        theirs = namespace_of(OTHER, "actor", USER)
        # The same scope in another tenant holds nothing, by id, by query or by listing.
        assert store.search(theirs) == [] and store.search(("organization:2",)) == []
        assert store.search(("organization:2",), query="card budget") == []
        assert store.get(theirs, mine.key) is None
        assert store.list_namespaces(prefix=("organization:2",)) == []
        store.delete(theirs, mine.key)  # another tenant's delete cannot reach it
        assert store.get(PERSONAL, mine.key) is not None
        store.put(theirs, mine.key, {"content": "Card ends in 1111"})
        assert [i.value["content"] for i in store.search(PERSONAL)] == [
            "Card ends in 4242, budget 9000 EUR"]
        with pytest.raises(InvalidArgument, match=UNMAPPED):
            store.search(())
        with pytest.raises(InvalidArgument, match=UNMAPPED):
            store.list_namespaces()
        # A store made for one tenant refuses every other tenant's namespace.
        pinned = ChatkeepStore(keep, tenant=OTHER)
        for call in (lambda: pinned.search(PERSONAL), lambda: pinned.get(PERSONAL, mine.key),
                     lambda: pinned.put(PERSONAL, "x", {"content": "y"}),
                     lambda: pinned.list_namespaces(prefix=("organization:1",))):
            with pytest.raises(InvalidArgument, match=UNMAPPED):
                call()
        assert pinned.list_namespaces() == [theirs]


def test_store_refuses_what_memories_cannot_hold(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        store = ChatkeepStore(keep)
        for value in ({"text": "x"}, {"content": "x", "tags": ["a"]}, {"content": 3}):
            with pytest.raises(InvalidArgument, match="content"):
                store.put(PERSONAL, "k", value)
        with pytest.raises(InvalidArgument, match=UNSUPPORTED):
            store.search(PERSONAL, filter={"kind": "fact"})
        with pytest.raises(InvalidArgument, match=UNSUPPORTED):
            store.put(PERSONAL, "k", {"content": "x"}, index=["title"])
        with pytest.raises(InvalidArgument, match="ttl"):  # a time to live is minutes > 0
            store.put(PERSONAL, "k", {"content": "x"}, ttl=-5)
        with pytest.raises(InvalidArgument):
            store.put(PERSONAL, "k", {"content": "   "})
        with pytest.raises(ConfigError, match="sync methods"):
            asyncio.run(store.asearch(PERSONAL))
        assert store.search(PERSONAL) == []


def test_store_recall_by_meaning_embeds_masked_text(db_url: str,
                                                    requires_pgvector: None) -> None:
    embedder = HashEmbedder(64, model="fake-embed",
                            synonyms={"espresso": "coffee", "coffee": "coffee"})
    with Chatkeep(db_url, dispatcher="inline", embedder=embedder) as keep:
        store = ChatkeepStore(keep)
        store.put(PERSONAL, "a", {"content": "Drinks espresso, ask ana.garcia@example.com"})
        store.put(PERSONAL, "b", {"content": "Works from the Lisbon office"})
        status = keep.memory.vector_status(ORG)
        assert status is not None and status.embedded == 2 and status.missing == 0
        sent = [text for call in embedder.calls for text in call]
        assert sent and all("ana.garcia@example.com" not in text for text in sent)
        hits = store.search(PERSONAL, query="what kind of coffee?")
        assert hits and "espresso" in hits[0].value["content"]


def test_async_store_same_operations(db_url: str) -> None:
    async def scenario() -> None:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            store = ChatkeepStore(keep, tenant=ORG)
            await store.aput(PERSONAL, "new", {"content": "Prefers replies in Spanish"})
            await store.aput(SHARED, "new", {"content": "Office closes at 18:00"})
            (item,) = await store.asearch(PERSONAL, query="replies language")
            got = await store.aget(PERSONAL, item.key)
            assert got is not None and got.value == {"content": "Prefers replies in Spanish"}
            assert await store.alist_namespaces() == sorted([PERSONAL, SHARED])
            with pytest.raises(InvalidArgument, match=UNMAPPED):
                await store.asearch(namespace_of(OTHER, "tenant"))
            await store.adelete(PERSONAL, item.key)
            assert await store.asearch(PERSONAL) == []
            with pytest.raises(ConfigError, match="sync"):
                store.search(SHARED)

    asyncio.run(scenario())


def test_agent_tools_use_the_store_through_the_runtime(db_url: str) -> None:
    """A tool writes and reads long-term memory through ``runtime.store``; the middleware
    recalls it into a later thread of the same actor."""

    @tool
    def remember(fact: str, runtime: ToolRuntime) -> str:
        """Remember a fact about the user."""
        assert runtime.store is not None
        runtime.store.put(namespace_of(ORG, "actor", USER), "new", {"content": fact})
        return "remembered"

    class Rememberer(WeatherModel):
        def _answer(self, messages: list[BaseMessage]) -> AIMessage:
            last = messages[-1]
            if isinstance(last, HumanMessage) and "remember" in str(last.text):
                return AIMessage("", tool_calls=[{
                    "name": "remember", "args": {"fact": "Allergic to peanuts"},
                    "id": f"call_{next(self.ids)}", "type": "tool_call"}])
            return super()._answer(messages)

    model = Rememberer()
    with Chatkeep(db_url, config={"memory": {"recall_in_history": True}},
                  dispatcher="inline") as keep:
        graph = create_agent(model, [remember], system_prompt=SYSTEM,
                             middleware=[ChatkeepMiddleware(keep, tenant=ORG, actor=USER)],
                             checkpointer=InMemorySaver(), store=ChatkeepStore(keep))
        graph.invoke({"messages": [{"role": "user", "content": "please remember this"}]},
                     config("one"))
        graph.invoke({"messages": [{"role": "user", "content": "Any peanuts in it?"}]},
                     config("two"))
        assert "Allergic to peanuts" in str(model.seen[-1][0].text)


def test_importing_without_langchain_names_the_extra() -> None:
    blocker = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('langchain', 'langgraph'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "try:\n"
        "    import chatkeep.integrations.langchain\n"
        "except ImportError as exc:\n"
        "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True,
                          timeout=120, check=True)
    assert "pip install 'chatkeep[langchain]'" in done.stdout, done.stdout + done.stderr


# -- the worked example --------------------------------------------------------------------


def test_the_worked_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        import langchain_agent
    finally:
        sys.path.pop(0)
    result = langchain_agent.main(f"sqlite:///{tmp_path / 'example.db'}")
    printed = capsys.readouterr().out
    assert "18C and sunny" in printed and "24C and clear" in printed
    # The thread's state keeps the unfolded end (trim_state on); chatkeep holds it all.
    assert result["messages_in_thread"] < result["messages_in_session"]
    assert result["summary_watermark"] > 0
    assert result["max_request_tokens"] <= result["budget"]
    assert "Prefers temperatures in Celsius" in result["first_system_message"]
