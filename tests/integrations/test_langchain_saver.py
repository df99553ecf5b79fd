"""``ChatkeepSaver`` under a real ``create_agent`` agent with ``ChatkeepMiddleware``.

Turns sync (``invoke``) and async (``ainvoke``) on SQLite and PostgreSQL; a checkpoint's
size flat in the thread's length (its messages refer to the session's log); an
interrupted tool resumed; ``get_state`` and its history; two tenants on one
``thread_id``; ``delete_thread`` leaving no byte of the thread in the SQLite file.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.types import Command, interrupt
from test_langchain import SYSTEM, WeatherModel, find_contact, get_weather, question

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.errors import InvalidArgument
from chatkeep.integrations.langchain import ChatkeepMiddleware, ChatkeepSaver
from chatkeep.integrations.langchain.messages import LANGCHAIN_ID
from chatkeep.store.schema import chat_checkpoints

ORG7, ORG8 = Ref("organization", 7), Ref("organization", 8)
USER = Ref("user", 3)
THREAD = "ticket-4711"


def run_config(thread: str = THREAD, **configurable: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, **configurable}}


def build(keep: Chatkeep | AsyncChatkeep, saver: ChatkeepSaver,
          tools: list[Any] | None = None) -> Any:
    return create_agent(WeatherModel(), tools or [get_weather, find_contact],
                        system_prompt=SYSTEM, middleware=[ChatkeepMiddleware(keep)],
                        checkpointer=saver)


def turns(keep: Chatkeep | AsyncChatkeep, agent: Any, count: int, *, start: int = 0,
          thread: str = THREAD, tenant: Ref = ORG7, in_config: bool = False,
          config_tenant: Ref | None = None, actor: Ref | None = None) -> list[Any]:
    """Run ``count`` turns (``invoke`` on a Chatkeep, ``ainvoke`` on an AsyncChatkeep);
    ``in_config``: the tenant in the config too (for a saver reading it from there)."""
    inputs = [{"messages": [{"role": "user", "content": question(i)}]}
              for i in range(start, start + count)]
    cfg = run_config(thread, tenant=str(config_tenant or tenant)) if in_config \
        else run_config(thread)
    context: dict[str, Any] = {"tenant": tenant}
    if actor is not None:
        context["actor"] = actor
    if isinstance(keep, Chatkeep):
        return [agent.invoke(i, cfg, context=context) for i in inputs]

    async def drive() -> list[Any]:
        return [await agent.ainvoke(i, cfg, context=context) for i in inputs]
    return asyncio.run(drive())


def state_of(keep: Chatkeep | AsyncChatkeep, agent: Any, cfg: RunnableConfig) -> Any:
    if isinstance(keep, Chatkeep):
        return agent.get_state(cfg)
    return asyncio.run(agent.aget_state(cfg))


def stored_rows(db_url: str, tenant: Ref = ORG7, thread: str = THREAD,
                ) -> list[dict[str, Any]]:
    """The saver's stored rows of a thread (root namespace, oldest first), read with a
    plain keep: ``checkpoint`` (JSON text, ``None`` once pruned), ``blobs``, ``writes``."""
    with Chatkeep(db_url) as reader:
        row = reader.repository.find_session(thread, tenant)
        assert row is not None
        c = chat_checkpoints.c
        with reader.engine.connect() as conn:
            found = conn.execute(chat_checkpoints.select().where(
                c.session_id == row.id, c.ns == "").order_by(c.checkpoint_id))
            return [dict(r._mapping) for r in found]


def open_keep(db_url: str, driven: str) -> Any:
    return Chatkeep(db_url, dispatcher="inline") if driven == "sync" else \
        AsyncChatkeep(db_url, dispatcher="inline")


def close_keep(keep: Any) -> None:
    if isinstance(keep, Chatkeep):
        keep.close()
    else:
        asyncio.run(keep.close())


DRIVEN = pytest.mark.parametrize("driven", ["sync", "async"])


@DRIVEN
def test_turns_recorded_once_and_state_read_back_from_the_log(db_url: str,
                                                               driven: str) -> None:
    keep = open_keep(db_url, driven)
    try:
        agent = build(keep, ChatkeepSaver(keep))
        outs = turns(keep, agent, 4, actor=USER)  # the checkpointer opens the session
        # The state continues over turns: each run starts from the checkpoint.
        assert [sum(isinstance(m, HumanMessage) for m in o["messages"]) for o in outs] \
            == [1, 2, 3, 4]
        state = state_of(keep, agent, run_config(tenant=str(ORG7)))
        final = outs[-1]["messages"]
        assert [(m.type, m.id, m.text) for m in state.values["messages"]] == \
            [(m.type, m.id, m.text) for m in final]
        calls = [c["id"] for m in state.values["messages"] if isinstance(m, AIMessage)
                 for c in m.tool_calls]
        answers = [m.tool_call_id for m in state.values["messages"]
                   if isinstance(m, ToolMessage)]
        assert calls and sorted(calls) == sorted(answers)
    finally:
        close_keep(keep)
    with Chatkeep(db_url) as reader:
        session = reader.sessions.by_key(THREAD, ORG7)
        assert session.actor == USER
        marks = [m.metadata.get(LANGCHAIN_ID) for m in session.read_messages()]
        assert len(marks) == len(set(marks)) == len(final)  # each message stored once
    # The newest messages blob refers to the log for all but the last step's output.
    blobs = {k: v for row in stored_rows(db_url) for k, v in json.loads(row["blobs"]).items()}
    newest = max((k for k in blobs if json.loads(k)[0] == "messages"),
                 key=lambda k: json.loads(k)[1])
    parts = json.loads(blobs[newest][1])
    assert isinstance(parts[0], list) and parts[0][0] == 1
    inline = [p for p in parts if isinstance(p, dict)]
    assert len(inline) <= 1


def checkpoint_bytes(rows: list[dict[str, Any]]) -> list[int]:
    """The stored bytes of each checkpoint's row: its checkpoint, its writes and the
    values first stored with it (the versions it made)."""
    return [len(r["checkpoint"]) + len(r["writes"] or "") + len(r["blobs"])
            for r in rows if r["checkpoint"] is not None]


def test_checkpoint_size_flat_in_the_threads_length(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        agent = build(keep, ChatkeepSaver(keep, tenant=ORG7))
        turns(keep, agent, 4)  # one of each question's shape (one to three cities)
        early = checkpoint_bytes(stored_rows(db_url))
        turns(keep, agent, 16, start=4)
        written = len(checkpoint_bytes(stored_rows(db_url)))
        turns(keep, agent, 4, start=20)  # the same four shapes, on a thread 6x as long
        late = checkpoint_bytes(stored_rows(db_url))[written:]
        messages = len(state_of(keep, agent, run_config()).values["messages"])
    assert messages > 100 and len(late) == len(early)
    # The largest checkpoint of the last four turns is no bigger (a few bytes for longer
    # seq numbers) than the largest of the first four: a copy of the state would be 6x.
    assert max(late) <= max(early) * 1.1, (max(early), max(late))


@tool
def book_flight(city: str) -> str:
    """Book a flight to a city, once a human approves it."""
    answer = interrupt({"approve": f"book a flight to {city}?"})
    return f"booked {city}" if answer == "yes" else f"not booked: {answer}"


@DRIVEN
def test_interrupt_and_resume(db_url: str, driven: str) -> None:
    keep = open_keep(db_url, driven)
    try:
        model = WeatherModel()
        ask = {"messages": [{"role": "user", "content": "Please book Paris"}]}
        model_answer = AIMessage("", tool_calls=[{"name": "book_flight",
                                                  "args": {"city": "Paris"},
                                                  "id": "call_book", "type": "tool_call"}])
        original = model._answer

        def answer(messages: list[BaseMessage]) -> AIMessage:
            if "book" in str(messages[-1].text).lower() and \
                    isinstance(messages[-1], HumanMessage):
                return model_answer
            return original(messages)

        object.__setattr__(model, "_answer", answer)
        agent = create_agent(model, [book_flight], system_prompt=SYSTEM,
                             middleware=[ChatkeepMiddleware(keep)],
                             checkpointer=ChatkeepSaver(keep, tenant=ORG7))
        cfg, context = run_config(), {"tenant": ORG7}
        if isinstance(keep, Chatkeep):
            first = agent.invoke(ask, cfg, context=context)
            paused = agent.get_state(cfg)
            done = agent.invoke(Command(resume="yes"), cfg, context=context)
            history = list(agent.get_state_history(cfg))
        else:
            async def drive() -> tuple[Any, Any, Any, list[Any]]:
                first = await agent.ainvoke(ask, cfg, context=context)
                paused = await agent.aget_state(cfg)
                done = await agent.ainvoke(Command(resume="yes"), cfg, context=context)
                return first, paused, done, [s async for s in agent.aget_state_history(cfg)]
            first, paused, done, history = asyncio.run(drive())
        assert first["__interrupt__"][0].value == {"approve": "book a flight to Paris?"}
        assert paused.next == ("tools",) and paused.interrupts
        tools = [m for m in done["messages"] if isinstance(m, ToolMessage)]
        assert [m.content for m in tools] == ["booked Paris"]
        assert done["messages"][-1].text == "booked Paris"
        assert len(history) >= 5 and history[0].values["messages"][-1].text == "booked Paris"
    finally:
        close_keep(keep)


@DRIVEN
def test_two_tenants_on_one_thread_never_see_each_others_state(db_url: str,
                                                               driven: str) -> None:
    keep = open_keep(db_url, driven)
    try:
        saver = ChatkeepSaver(keep)  # the docs' setup: one agent, the tenant from context
        agent = build(keep, saver)
        seven = turns(keep, agent, 2, tenant=ORG7)
        eight = turns(keep, agent, 1, start=2, tenant=ORG8)
        more = turns(keep, agent, 1, start=3, tenant=ORG7)
        assert sum(isinstance(m, HumanMessage) for m in seven[-1]["messages"]) == 2
        assert [m.text for m in eight[0]["messages"] if isinstance(m, HumanMessage)] == \
            [question(2)]
        assert sum(isinstance(m, HumanMessage) for m in more[0]["messages"]) == 3
        mine = state_of(keep, agent, run_config(tenant=str(ORG7))).values["messages"]
        theirs = state_of(keep, agent, run_config(tenant=str(ORG8))).values["messages"]
        assert [m.id for m in mine] == [m.id for m in more[0]["messages"]]
        assert [m.id for m in theirs] == [m.id for m in eight[0]["messages"]]
        assert not {m.id for m in mine} & {m.id for m in theirs}
        # A context and a config naming two tenants: refused before anything is read.
        with pytest.raises(InvalidArgument, match="tenant"):
            turns(keep, agent, 1, start=4, tenant=ORG8, in_config=True,
                  config_tenant=ORG7)
        with pytest.raises(InvalidArgument, match="no tenant"):
            state_of(keep, agent, run_config())
        # A saver built for one tenant refuses a run naming another.
        with pytest.raises(InvalidArgument, match="is for organization:7"):
            state_of(keep, build(keep, ChatkeepSaver(keep, tenant=ORG7)),
                     run_config(tenant=str(ORG8)))
    finally:
        close_keep(keep)


def sqlite_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


@DRIVEN
def test_delete_thread_leaves_no_bytes_of_the_thread(tmp_path: Path, driven: str) -> None:
    path = tmp_path / "chat.db"
    db_url = f"sqlite:///{path}"
    keep = open_keep(db_url, driven)
    marker = "Zanzibar-7f3q"
    try:
        saver = ChatkeepSaver(keep, tenant=ORG7)
        agent = build(keep, saver)
        cfg, context = run_config(), {"tenant": ORG7}
        ask = {"messages": [{"role": "user", "content": f"Paris? my code is {marker}"}]}
        other = {"messages": [{"role": "user", "content": "Rome? kept-thread-text"}]}
        if isinstance(keep, Chatkeep):
            agent.invoke(ask, cfg, context=context)
            agent.invoke(other, run_config("kept"), context=context)
            assert marker.encode() in sqlite_bytes(path)
            saver.delete_thread(THREAD)
            gone = agent.get_state(cfg)
        else:
            async def drive() -> Any:
                await agent.ainvoke(ask, cfg, context=context)
                await agent.ainvoke(other, run_config("kept"), context=context)
                assert marker.encode() in sqlite_bytes(path)
                await saver.adelete_thread(THREAD)
                return await agent.aget_state(cfg)
            gone = asyncio.run(drive())
        assert gone.values == {}
    finally:
        close_keep(keep)
    data = sqlite_bytes(path)
    assert marker.encode() not in data
    assert b"kept-thread-text" in data


def test_keep_last_bounds_a_threads_checkpoints(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        agent = build(keep, ChatkeepSaver(keep, tenant=ORG7, keep_last=3))
        outs = turns(keep, agent, 3)
        history = list(agent.get_state_history(run_config()))
        state = agent.get_state(run_config())
    rows = stored_rows(db_url)
    kept = {r["checkpoint_id"] for r in rows if r["checkpoint"] is not None}
    assert len(kept) == 3 and len(history) == 3
    assert {r["checkpoint_id"] for r in rows if r["writes"] is not None} <= kept
    # A dropped checkpoint's row stays only for values a kept one reads.
    read = {h for r in rows if r["checkpoint"] is not None for h in json.loads(r["holders"])}
    assert {r["checkpoint_id"] for r in rows} - kept <= read
    # The newest checkpoint still holds the whole thread (its messages from the log).
    assert [m.id for m in state.values["messages"]] == [m.id for m in outs[-1]["messages"]]
    assert sum(isinstance(m, HumanMessage) for m in outs[-1]["messages"]) == 3
    with pytest.raises(InvalidArgument):
        ChatkeepSaver(keep, tenant=ORG7, keep_last=0)


def test_a_shared_saver_deletes_one_tenants_thread_through_scoped(db_url: str) -> None:
    with Chatkeep(db_url, dispatcher="inline") as keep:
        saver = ChatkeepSaver(keep)
        agent = build(keep, saver)
        turns(keep, agent, 1, tenant=ORG7)
        turns(keep, agent, 1, tenant=ORG8)
        with pytest.raises(InvalidArgument, match="no tenant"):
            saver.delete_thread(THREAD)  # it gets no config: which tenant's thread?
        saver.scoped(ORG8).delete_thread(THREAD)
        assert keep.repository.find_session(THREAD, ORG8) is None
        assert agent.get_state(run_config(tenant=str(ORG8))).values == {}
        left = agent.get_state(run_config(tenant=str(ORG7))).values["messages"]
        assert [m.text for m in left if isinstance(m, HumanMessage)] == [question(0)]


def test_a_thread_deleted_behind_the_savers_back_starts_over(db_url: str) -> None:
    """The saver remembers a thread's session between writes; a session deleted
    elsewhere (not through this saver) is looked up again: the next run writes to the
    new session, never to the deleted one's id."""
    with Chatkeep(db_url, dispatcher="inline") as keep:
        agent = build(keep, ChatkeepSaver(keep, tenant=ORG7))
        turns(keep, agent, 1)
        row = keep.repository.find_session(THREAD, ORG7)
        assert row is not None
        keep.sessions.delete(row.id, ORG7)
        outs = turns(keep, agent, 1, start=1)
        assert sum(isinstance(m, HumanMessage) for m in outs[0]["messages"]) == 1
        fresh = keep.repository.find_session(THREAD, ORG7)
        assert fresh is not None and fresh.id != row.id
        state = agent.get_state(run_config())
        assert [m.id for m in state.values["messages"]] == \
            [m.id for m in outs[0]["messages"]]
