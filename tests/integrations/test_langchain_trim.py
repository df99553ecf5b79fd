"""``ChatkeepMiddleware(trim_state=True)`` (the default) under a real ``create_agent``
agent with a checkpointer of the user's own (``InMemorySaver``, LangGraph's
``SqliteSaver`` / ``AsyncSqliteSaver``): sync (``invoke`` on ``Chatkeep``) and async
(``ainvoke`` on ``AsyncChatkeep``), on SQLite and PostgreSQL.

The checkpoint's messages stay flat in the thread's length while the session records
every message once; the model still gets chatkeep's budgeted history; tool calls and an
interrupted tool still work; another tenant's run on the shared state is still refused;
``trim_state=False`` keeps LangGraph's whole state. And :mod:`.trim`'s rule over values.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command, interrupt
from test_langchain import (
    SMALL,
    SYSTEM,
    WeatherModel,
    check_request,
    find_contact,
    get_weather,
    question,
)

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.errors import ForeignThreadState
from chatkeep.integrations.langchain import ChatkeepMiddleware
from chatkeep.integrations.langchain.messages import LANGCHAIN_ID
from chatkeep.integrations.langchain.middleware import answered, with_removal
from chatkeep.integrations.langchain.trim import folded_ids, settled

ORG, OTHER = Ref("organization", 31), Ref("organization", 32)
BUDGET = SMALL["chat"]["max_history_tokens"]
TURNS = 28

DRIVEN = pytest.mark.parametrize("driven", ["sync", "async"])
SAVERS = pytest.mark.parametrize("saver", ["memory", "sqlite"])


class Run:
    """One keep and one checkpointer, driven sync (``invoke``) or async (``ainvoke``)."""

    def __init__(self, keep: Chatkeep | AsyncChatkeep, saver: BaseCheckpointSaver[Any]
                 ) -> None:
        self.keep, self.saver = keep, saver

    @property
    def sync(self) -> bool:
        return isinstance(self.keep, Chatkeep)

    async def invoke(self, agent: Any, payload: Any, cfg: RunnableConfig,
                     tenant: Ref = ORG) -> Any:
        if self.sync:
            return agent.invoke(payload, cfg, context={"tenant": tenant})
        return await agent.ainvoke(payload, cfg, context={"tenant": tenant})

    async def state(self, agent: Any, cfg: RunnableConfig) -> Any:
        return agent.get_state(cfg) if self.sync else await agent.aget_state(cfg)

    async def stored_ids(self, thread: str, tenant: Ref = ORG) -> list[str]:
        """The LangChain ids the thread's session recorded, in its order."""
        if isinstance(self.keep, Chatkeep):
            messages = self.keep.sessions.by_key(thread, tenant).read_messages()
        else:
            session = await self.keep.sessions.by_key(thread, tenant)
            messages = await session.read_messages()
        return [m.metadata[LANGCHAIN_ID] for m in messages]


@asynccontextmanager
async def running(db_url: str, driven: str, saver: str, tmp_path: Path,
                  **config: Any) -> AsyncIterator[Run]:
    path = tmp_path / f"checkpoints-{uuid.uuid4().hex}.db"
    if driven == "sync":
        connection = sqlite3.connect(path, check_same_thread=False) \
            if saver == "sqlite" else None
        with Chatkeep(db_url, dispatcher="inline", **config) as keep:
            yield Run(keep, SqliteSaver(connection) if connection else InMemorySaver())
        if connection is not None:
            connection.close()
        return
    aconnection = await aiosqlite.connect(path) if saver == "sqlite" else None
    async with AsyncChatkeep(db_url, dispatcher="inline", **config) as akeep:
        yield Run(akeep, AsyncSqliteSaver(aconnection) if aconnection else InMemorySaver())
    if aconnection is not None:
        await aconnection.close()


def agent_for(run: Run, model: WeatherModel, tools: list[Any] | None = None,
              **options: Any) -> Any:
    return create_agent(model, tools or [get_weather, find_contact], system_prompt=SYSTEM,
                        middleware=[ChatkeepMiddleware(run.keep, **options)],
                        checkpointer=run.saver)


def ask(i: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": question(i)}]}


def cfg(thread: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def check_pairs(messages: list[BaseMessage]) -> None:
    """Every tool result in the state follows its call, and every call before the
    state's current turn has all of its results."""
    calls: dict[str, int] = {}
    answered: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            calls.update({c["id"] or "": 0 for c in message.tool_calls})
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in calls, messages
            answered.add(message.tool_call_id)
    head = {c["id"] for m in settled(messages) if isinstance(m, AIMessage)
            for c in m.tool_calls}
    assert head <= answered


@DRIVEN
@SAVERS
def test_a_long_thread_keeps_a_flat_checkpoint(db_url: str, driven: str, saver: str,
                                               tmp_path: Path) -> None:
    model, thread = WeatherModel(), f"t-{uuid.uuid4()}"

    async def scenario() -> None:
        async with running(db_url, driven, saver, tmp_path, config=SMALL) as run:
            agent = agent_for(run, model)
            sizes: list[int] = []
            seen: list[str] = []  # every message id the thread ever held, in order
            for i in range(TURNS):
                out = await run.invoke(agent, ask(i), cfg(thread))
                kept = (await run.state(agent, cfg(thread))).values["messages"]
                assert [m.id for m in kept] == [m.id for m in out["messages"]]
                assert isinstance(kept[-1], AIMessage) and "C and" in str(kept[-1].content)
                check_pairs(kept)
                seen += [m.id for m in kept if m.id not in seen]
                sizes.append(len(kept))
            stored = await run.stored_ids(thread)
            # The session holds every message once, in the thread's order (the trimmed
            # state still anchors where the session ends).
            assert stored == seen and len(stored) > 100
            # Flat: the last turns' checkpoints hold no more messages than the first
            # ones after the first folds, and a small part of the thread.
            assert max(sizes[-8:]) <= max(sizes[4:14]), sizes
            assert max(sizes[-8:]) * 4 < len(stored), sizes
        for request in model.seen:  # the model still gets chatkeep's budgeted history
            check_request(request, BUDGET)

    asyncio.run(scenario())


@DRIVEN
@SAVERS
def test_trim_state_off_keeps_the_whole_state(db_url: str, driven: str, saver: str,
                                              tmp_path: Path) -> None:
    model, thread = WeatherModel(), f"t-{uuid.uuid4()}"

    async def scenario() -> None:
        async with running(db_url, driven, saver, tmp_path, config=SMALL) as run:
            agent = agent_for(run, model, trim_state=False)
            for i in range(12):
                await run.invoke(agent, ask(i), cfg(thread))
            kept = (await run.state(agent, cfg(thread))).values["messages"]
            assert [m.id for m in kept] == await run.stored_ids(thread)
        for request in model.seen:
            check_request(request, BUDGET)
        assert len(model.seen[-1]) < len(kept)  # folds happened: the budget cut the request

    asyncio.run(scenario())


@tool
def book_flight(city: str) -> str:
    """Book a flight to a city, once a human approves it."""
    answer = interrupt({"approve": f"book a flight to {city}?"})
    return f"booked {city}" if answer == "yes" else f"not booked: {answer}"


class Booker(WeatherModel):
    """Asks for ``book_flight`` when the user says "book"."""

    def _answer(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, HumanMessage) and "book" in str(last.text).lower():
            return AIMessage("", tool_calls=[{"name": "book_flight", "args": {"city": "Oslo"},
                                              "id": f"call_book_{next(self.ids)}",
                                              "type": "tool_call"}])
        return super()._answer(messages)


@DRIVEN
@SAVERS
def test_an_interrupted_tool_resumes_on_a_trimmed_state(db_url: str, driven: str,
                                                        saver: str, tmp_path: Path) -> None:
    model, thread = Booker(), f"t-{uuid.uuid4()}"

    async def scenario() -> None:
        async with running(db_url, driven, saver, tmp_path, config=SMALL) as run:
            agent = agent_for(run, model, [get_weather, book_flight])
            for i in range(10):
                await run.invoke(agent, ask(i), cfg(thread))
            before = await run.stored_ids(thread)
            first = await run.invoke(agent, {"messages": [
                {"role": "user", "content": "Please book Oslo for me"}]}, cfg(thread))
            assert first["__interrupt__"][0].value == {"approve": "book a flight to Oslo?"}
            paused = await run.state(agent, cfg(thread))
            assert paused.next == ("tools",)
            kept = paused.values["messages"]
            assert len(kept) < len(before)  # trimmed, yet the open turn is whole
            assert isinstance(kept[-2], HumanMessage) and "book" in str(kept[-2].text)
            assert isinstance(kept[-1], AIMessage) and kept[-1].tool_calls
            done = await run.invoke(agent, Command(resume="yes"), cfg(thread))
            assert done["messages"][-1].text == "booked Oslo"
            results = [m for m in done["messages"] if isinstance(m, ToolMessage)]
            assert results and results[-1].content == "booked Oslo"
            stored = await run.stored_ids(thread)
            assert len(stored) == len(set(stored)) == len(before) + 4
        # The resumed call went out with its result right after it.
        check_request(model.seen[-1], BUDGET)
        assert any(isinstance(m, ToolMessage) and m.content == "booked Oslo"
                   for m in model.seen[-1])

    asyncio.run(scenario())


@DRIVEN
def test_another_tenant_on_a_trimmed_shared_state_is_refused(db_url: str, driven: str,
                                                             tmp_path: Path) -> None:
    """A checkpointer keyed by ``thread_id`` alone, shared by two tenants: the state the
    first tenant left (trimmed) still names its messages, so the other's run is refused
    and records none of them."""
    thread = f"t-{uuid.uuid4()}"

    async def scenario() -> None:
        async with running(db_url, driven, "memory", tmp_path, config=SMALL) as run:
            agent = agent_for(run, WeatherModel())
            for i in range(10):
                await run.invoke(agent, ask(i), cfg(thread))
            theirs = await run.stored_ids(thread)
            kept = (await run.state(agent, cfg(thread))).values["messages"]
            assert len(kept) < len(theirs)
            with pytest.raises(ForeignThreadState):
                await run.invoke(agent, ask(11), cfg(thread), tenant=OTHER)
            mine = await run.stored_ids(thread, OTHER)
            assert not set(mine) & set(theirs)

    asyncio.run(scenario())


# -- the rule, over values -------------------------------------------------------------


def call(message_id: str, *call_ids: str) -> AIMessage:
    return AIMessage("", id=message_id, tool_calls=[
        {"name": "get_weather", "args": {"city": "Oslo"}, "id": c, "type": "tool_call"}
        for c in call_ids])


def result(message_id: str, call_id: str) -> ToolMessage:
    return ToolMessage("2C", id=message_id, tool_call_id=call_id)


STATE: list[BaseMessage] = [
    HumanMessage("one", id="h1"), call("a1", "c1", "c2"), result("t1", "c1"),
    result("t2", "c2"), AIMessage("done", id="a2"),
    HumanMessage("two", id="h2"), AIMessage("sure", id="a3"),
    HumanMessage("three", id="h3"), call("a4", "c3"),
]
EVERYTHING = {m.id for m in STATE if m.id}


def recorded_as(ids: set[str]) -> Callable[[list[str]], set[str]]:
    return lambda asked: set(asked) & ids


def test_the_current_turn_always_stays() -> None:
    gone = folded_ids(STATE, set(), recorded_as(EVERYTHING))
    assert gone == ["h1", "a1", "t1", "t2", "a2", "h2", "a3"]
    assert settled(STATE) == STATE[:7]
    assert folded_ids(STATE[:1], set(), recorded_as(EVERYTHING)) == []
    assert folded_ids([AIMessage("x", id="x")], set(), recorded_as({"x"})) == []


def test_unfolded_and_unrecorded_messages_stay() -> None:
    assert folded_ids(STATE, {"h2", "a3"}, recorded_as(EVERYTHING)) == \
        ["h1", "a1", "t1", "t2", "a2"]
    assert folded_ids(STATE, set(), recorded_as(EVERYTHING - {"h2"})) == \
        ["h1", "a1", "t1", "t2", "a2", "a3"]
    asked: list[list[str]] = []

    def recorded(ids: list[str]) -> set[str]:
        asked.append(ids)
        return set(ids)

    assert folded_ids(STATE, EVERYTHING - {"h3", "a4"}, recorded) == []
    assert asked == []  # nothing could go: the store is not asked


def test_a_tool_call_and_its_results_go_together() -> None:
    # One result of the call is not folded: the call and both results stay.
    assert folded_ids(STATE, {"t2"}, recorded_as(EVERYTHING)) == ["h1", "a2", "h2", "a3"]
    assert folded_ids(STATE, {"a1"}, recorded_as(EVERYTHING)) == ["h1", "a2", "h2", "a3"]
    assert folded_ids(STATE, set(), recorded_as(EVERYTHING - {"t1"})) == \
        ["h1", "a2", "h2", "a3"]


@pytest.mark.parametrize("driven", ["sync"])
def test_the_trim_comes_with_the_answer_in_the_models_own_step(db_url: str, driven: str,
                                                               tmp_path: Path) -> None:
    """No graph step of the middleware's own after a model call (a checkpoint and its
    writes fewer per call): the model step's update adds the recorded answer and removes
    what the session has folded."""
    model, thread = WeatherModel(), f"t-{uuid.uuid4()}"

    async def scenario() -> None:
        async with running(db_url, driven, "memory", tmp_path, config=SMALL) as run:
            agent = agent_for(run, model)
            assert not [n for n in agent.get_graph().nodes if n.endswith(".after_model")]
            removed: list[str] = []
            for i in range(TURNS):
                for update in agent.stream(ask(i), cfg(thread), stream_mode="updates",
                                           context={"tenant": ORG}):
                    for node, values in update.items():
                        # one update, or (a command beside the answer) a list of them
                        parts = values if isinstance(values, list) else [values]
                        messages = [m for part in parts for m in
                                    (part or {}).get("messages") or []]
                        gone = [m.id for m in messages if isinstance(m, RemoveMessage)]
                        if gone:
                            assert node == "model"
                            assert any(isinstance(m, AIMessage) for m in messages)
                            removed += gone
            stored = await run.stored_ids(thread)
            assert removed and set(removed) <= set(stored)
            kept = (await run.state(agent, cfg(thread))).values["messages"]
            assert not {m.id for m in kept} & set(removed)
            assert [m.id for m in kept] == stored[-len(kept):]

    asyncio.run(scenario())


def test_an_answer_without_an_id_is_recorded_under_the_id_the_state_keeps() -> None:
    state: list[BaseMessage] = [HumanMessage("Hi", id="h-1")]
    out, after = answered(state, ModelResponse(result=[AIMessage("Hello")]))
    assert isinstance(out, ModelResponse)
    given = out.result[0].id
    assert given and [m.id for m in after] == ["h-1", given]
    kept = AIMessage("Kept", id="a-1")
    assert answered(state, kept) == (kept, [*state, kept])
    removal = with_removal(out, ["h-0"])
    assert isinstance(removal, ExtendedModelResponse) and removal.model_response is out
    assert removal.command is not None
    assert [m.id for m in removal.command.update["messages"]] == ["h-0"]
    assert with_removal(out, []) is out
