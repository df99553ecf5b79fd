"""LangChain threads at their edges (issue 30): a checkpointer shared by tenants never
moves one tenant's thread into another's session; a model restarting its tool-call ids
on a thread whose checkpoint was lost does not wedge it; overlapping runs of one thread
record each message once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from sqlalchemy.util import await_only
from test_langchain import (
    SMALL,
    SYSTEM,
    WeatherModel,
    check_request,
    config,
    find_contact,
    get_weather,
    question,
)

from chatkeep import Chatkeep, Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.errors import ChatkeepError, ForeignThreadState
from chatkeep.integrations.langchain import ChatkeepMiddleware, ChatkeepStore
from chatkeep.integrations.langchain.messages import LANGCHAIN_ID
from chatkeep.integrations.langchain.middleware import Thread, _Options, record
from chatkeep.store.repository import Repository

ORG7, ORG8 = Ref("organization", 7), Ref("organization", 8)
PRIVATE = {"privacy": {"anonymize_pii": True}}
TICKET = "ticket-4711"
ORG7_TEXT = ("Hello, I am Ana Garcia, write to ana.garcia@example.com or call "
             "+44 7911 123456. What is the weather in Paris?")
ORG7_RAW = ["ana.garcia@example.com", "7911 123456", "Ana Garcia", "Paris"]
ORG8_TEXT = "Hi, this is organisation eight: what is the weather in Oslo?"


def shared_agent(keep: Chatkeep | AsyncChatkeep, model: WeatherModel, saver: InMemorySaver,
                 with_store: bool) -> Any:
    """The docs' setup: one agent, one checkpointer, the tenant from each run's context."""
    return create_agent(model, [get_weather, find_contact], system_prompt=SYSTEM,
                        middleware=[ChatkeepMiddleware(keep)], checkpointer=saver,
                        store=ChatkeepStore(keep) if with_store else None)


def said(messages: Sequence[Any]) -> str:
    return json.dumps([getattr(m, "content", None) for m in messages], ensure_ascii=False)


def sent(requests: Sequence[Sequence[BaseMessage]]) -> str:
    return json.dumps([[m.model_dump(mode="json") for m in r] for r in requests],
                      ensure_ascii=False)


# -- item 1: another tenant's thread state -------------------------------------------------


@pytest.mark.parametrize("with_store", [False, True], ids=["no-store", "store"])
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_shared_checkpointer_never_moves_a_thread_across_tenants(
        db_url: str, driver: str, with_store: bool) -> None:
    """Organisation 7 talks on ``ticket-4711``; organisation 8 runs on the same thread id
    through the same checkpointer, which hands it organisation 7's state: refused with
    ``ForeignThreadState`` naming the fix, nothing of it recorded or sent. Organisation 7's
    next run on that state (which now holds 8's input) is refused too, so neither session
    ever holds the other's text."""
    model, saver = WeatherModel(), InMemorySaver()

    def seven(i: int) -> dict[str, Any]:
        return {"messages": [{"role": "user", "content": ORG7_TEXT if i == 0
                              else "And Rome? Thanks, Ana"}]}

    eight = {"messages": [{"role": "user", "content": ORG8_TEXT}]}
    ctx7, ctx8 = {"tenant": "organization:7"}, {"tenant": "organization:8"}

    if driver == "sync":
        with Chatkeep(db_url, config=PRIVATE, dispatcher="inline") as keep:
            graph = shared_agent(keep, model, saver, with_store)
            graph.invoke(seven(0), config(TICKET), context=ctx7)
            calls = len(model.seen)
            with pytest.raises(ForeignThreadState, match="per tenant") as refused:
                graph.invoke(eight, config(TICKET), context=ctx8)
            assert len(model.seen) == calls  # the model got nothing of org 8's run
            with pytest.raises(ForeignThreadState):
                graph.invoke(seven(1), config(TICKET), context=ctx7)
            assert len(model.seen) == calls
            mine = keep.sessions.by_key(TICKET, ORG7).read_messages()
            theirs = keep.sessions.by_key(TICKET, ORG8).read_messages()
    else:
        async def scenario() -> tuple[list[Any], list[Any], pytest.ExceptionInfo[Any]]:
            async with AsyncChatkeep(db_url, config=PRIVATE, dispatcher="inline") as keep:
                graph = shared_agent(keep, model, saver, with_store)
                await graph.ainvoke(seven(0), config(TICKET), context=ctx7)
                calls = len(model.seen)
                with pytest.raises(ForeignThreadState, match="per tenant") as refused:
                    await graph.ainvoke(eight, config(TICKET), context=ctx8)
                assert len(model.seen) == calls
                with pytest.raises(ForeignThreadState):
                    await graph.ainvoke(seven(1), config(TICKET), context=ctx7)
                assert len(model.seen) == calls
                mine = await (await keep.sessions.by_key(TICKET, ORG7)).read_messages()
                theirs = await (await keep.sessions.by_key(TICKET, ORG8)).read_messages()
                return mine, theirs, refused

        mine, theirs, refused = asyncio.run(scenario())
    assert isinstance(refused.value, ChatkeepError)
    assert "checkpointer" in str(refused.value) and TICKET in str(refused.value)
    # Organisation 8's session: its own question only, none of organisation 7's text.
    assert [m.content for m in theirs] == [ORG8_TEXT]
    assert all(raw not in said(theirs) for raw in ORG7_RAW)
    # Organisation 7's session: its own first turn and its own later question only.
    assert "eight" not in said(mine) and "Oslo" not in said(mine)
    assert mine[0].content == ORG7_TEXT and mine[-1].content == "And Rome? Thanks, Ana"
    # No model request ever carried org 8's text (nor org 7's raw values).
    body = sent(model.seen)
    assert "eight" not in body and "ana.garcia@example.com" not in body


def test_the_same_thread_id_in_two_tenants_with_their_own_checkpointers(db_url: str) -> None:
    """The fixes the error names work: one checkpointer per tenant, or a thread id scoped
    by tenant, keeps two conversations apart with no refusal."""
    model = WeatherModel()
    with Chatkeep(db_url, config=PRIVATE, dispatcher="inline") as keep:
        savers = {ORG7: InMemorySaver(), ORG8: InMemorySaver()}
        for tenant, text in ((ORG7, ORG7_TEXT), (ORG8, ORG8_TEXT), (ORG7, "Thanks")):
            shared_agent(keep, model, savers[tenant], False).invoke(
                {"messages": [{"role": "user", "content": text}]}, config(TICKET),
                context={"tenant": tenant})
        shared = shared_agent(keep, model, InMemorySaver(), False)
        for tenant, text in ((ORG7, "Hello seven"), (ORG8, "Hello eight")):
            shared.invoke({"messages": [{"role": "user", "content": text}]},
                          config(f"{tenant}:{TICKET}"), context={"tenant": tenant})
        assert "eight" not in said(keep.sessions.by_key(TICKET, ORG7).read_messages())
        assert all(raw not in said(keep.sessions.by_key(TICKET, ORG8).read_messages())
                   for raw in ORG7_RAW)
        assert keep.sessions.by_key(f"{ORG8}:{TICKET}", ORG8).read_messages()[0].content \
            == "Hello eight"


# -- item 13: a model restarting its tool-call ids -----------------------------------------


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_lost_checkpoint_and_restarted_tool_call_ids_do_not_wedge_the_thread(
        db_url: str, driver: str) -> None:
    """Each run a new process would make: a new checkpointer and a new model, whose
    tool-call ids start again at ``call_0``. The thread goes on; every request pairs each
    call with its results; chatkeep holds every call once, results answering them."""
    runs = 3

    def one(keep: Chatkeep | AsyncChatkeep) -> tuple[Any, WeatherModel]:
        model = WeatherModel()  # ids restart
        return create_agent(model, [get_weather], system_prompt=SYSTEM,
                            middleware=[ChatkeepMiddleware(keep, tenant=ORG7)],
                            checkpointer=InMemorySaver()), model

    models: list[WeatherModel] = []
    if driver == "sync":
        with Chatkeep(db_url, config=SMALL, dispatcher="inline") as keep:
            for _ in range(runs):
                graph, model = one(keep)
                models.append(model)
                out = graph.invoke({"messages": [{"role": "user", "content": question(3)}]},
                                   config("lost"))
                assert "24C" in str(out["messages"][-1].content)
                # The state's ids are the model's own.
                assert out["messages"][1].tool_calls[0]["id"] == "call_0"
            stored = keep.sessions.by_key("lost", ORG7).read_messages()
    else:
        async def scenario() -> list[Any]:
            async with AsyncChatkeep(db_url, config=SMALL, dispatcher="inline") as keep:
                for _ in range(runs):
                    graph, model = one(keep)
                    models.append(model)
                    out = await graph.ainvoke(
                        {"messages": [{"role": "user", "content": question(3)}]},
                        config("lost"))
                    assert "24C" in str(out["messages"][-1].content)
                return list(await (await keep.sessions.by_key("lost", ORG7)).read_messages())

        stored = asyncio.run(scenario())
    for model in models:
        for request in model.seen:
            check_request(request, SMALL["chat"]["max_history_tokens"])
    calls = [c.id for m in stored for c in m.tool_calls]
    assert len(calls) == 3 * runs and len(set(calls)) == len(calls)
    answered = [m.tool_call_id or "" for m in stored if m.role.value == "tool"]
    assert sorted(answered) == sorted(calls)
    assert calls[:3] == ["call_0", "call_1", "call_2"]  # the first run keeps the model's ids


def test_the_worked_example_runs_twice_in_one_folder(tmp_path: Path) -> None:
    """``python examples/langchain_agent.py`` twice in the same folder: the second run's
    model restarts its tool-call ids on the thread the first left in chatkeep."""
    example = Path(__file__).resolve().parents[2] / "examples" / "langchain_agent.py"
    for _ in range(2):
        done = subprocess.run([sys.executable, str(example)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "18C and sunny" in done.stdout
    assert (tmp_path / "langchain_agent.db").exists()


# -- item 14: overlapping runs of one thread -----------------------------------------------

RUNS = 3


def resent(tag: str) -> dict[str, Any]:
    """What an app without a checkpointer sends: the conversation so far (with the ids
    LangChain gave it), then the new question."""
    return {"messages": [HumanMessage("first question", id=f"{tag}-first"),
                         AIMessage("first answer", id=f"{tag}-answer"),
                         HumanMessage("Thanks, that is all for today.", id=f"{tag}-new")]}


def once_each(stored: Sequence[Any]) -> None:
    ids = [m.metadata.get(LANGCHAIN_ID) for m in stored]
    assert len(ids) == len(set(ids)), ids
    assert sum(1 for m in stored if m.content == "Thanks, that is all for today.") == 1


@pytest.mark.parametrize("checkpointer", [False, True], ids=["bare", "checkpointer"])
def test_overlapping_runs_in_threads_record_each_message_once(
        db_url: str, monkeypatch: pytest.MonkeyPatch, checkpointer: bool) -> None:
    """Every run decides what is new before any of them writes (a barrier after each
    run's first ``stored_marks`` / ``marks_after`` read, of the shared input; later reads
    depend on who wrote first and need not come in threes): each message is still
    stored once."""
    barrier = threading.Barrier(RUNS, timeout=60)
    waited: set[str] = set()
    for name in ("stored_marks", "marks_after"):
        original = getattr(Repository, name)

        def waiting(self: Repository, *args: Any, _original: Any = original) -> Any:
            found = _original(self, *args)
            run = threading.current_thread().name
            if run.startswith("run-") and run not in waited:
                waited.add(run)
                with contextlib.suppress(threading.BrokenBarrierError):
                    barrier.wait()
            return found

        monkeypatch.setattr(Repository, name, waiting)
    model = WeatherModel()
    with Chatkeep(db_url, dispatcher="inline") as keep:
        keep.sessions.open("busy", ORG7).add_user("before the runs")
        graph: Any = create_agent(model, [get_weather], system_prompt=SYSTEM,
                                  middleware=[ChatkeepMiddleware(keep, tenant=ORG7)],
                                  checkpointer=InMemorySaver() if checkpointer else None)
        errors: list[BaseException] = []

        def run() -> None:
            try:
                graph.invoke(resent("t"), config("busy"))
            except BaseException as exc:  # reported below
                errors.append(exc)

        workers = [threading.Thread(target=run, name=f"run-{i}") for i in range(RUNS)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        barrier.abort()
        assert not errors, errors
        stored = keep.sessions.by_key("busy", ORG7).read_messages()
        once_each(stored)
        assert [m.role.value for m in stored].count("assistant") == 1 + RUNS
        assert [m.metadata.get(LANGCHAIN_ID) for m in stored[:4]] == [
            None, "t-first", "t-answer", "t-new"]


def test_overlapping_async_runs_record_each_message_once(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The async twin: runs on one event loop, each reaching the same point before any
    writes (an ``asyncio.Barrier`` awaited inside the bridge, once: the runs' first
    lookups, of their shared input; later lookups depend on who wrote first and need not
    come in threes)."""
    barrier: list[asyncio.Barrier] = []
    original = Repository.stored_marks
    passed: list[bool] = []

    def waiting(self: Repository, *args: Any) -> Any:
        found = original(self, *args)
        if barrier and not barrier[0].broken and not passed:
            with contextlib.suppress(asyncio.BrokenBarrierError, TimeoutError):
                await_only(asyncio.wait_for(barrier[0].wait(), 60))
            passed.append(True)
        return found

    monkeypatch.setattr(Repository, "stored_marks", waiting)
    model = WeatherModel()

    async def scenario() -> list[Any]:
        async with AsyncChatkeep(db_url, dispatcher="inline") as keep:
            await (await keep.sessions.open("busy", ORG7)).add_user("before the runs")
            graph: Any = create_agent(model, [get_weather], system_prompt=SYSTEM,
                                      middleware=[ChatkeepMiddleware(keep, tenant=ORG7)])
            barrier.append(asyncio.Barrier(RUNS))
            await asyncio.gather(*(graph.ainvoke(resent("a"), config("busy"))
                                   for _ in range(RUNS)))
            await barrier[0].abort()
            return list(await (await keep.sessions.by_key("busy", ORG7)).read_messages())

    stored = asyncio.run(scenario())
    once_each(stored)
    assert [m.role.value for m in stored].count("assistant") == 1 + RUNS  # each run's answer


# The interleavings behind the overlapping runs, one step at a time: the two tests above
# reach them only when the scheduler happens to (CI's PostgreSQL run once did).

def _answer(tag: str, call: str | None = None) -> AIMessage:
    calls = [{"name": "get_weather", "args": {"city": "Paris"}, "id": call}] if call else []
    return AIMessage("" if call else f"answer {tag}", id=f"run-{tag}", tool_calls=calls)


INTERLEAVINGS = {
    # B records its answer after A's: B's state shares A's input, not A's answer.
    "another run's answer noted last": [["input"], ["input", "A"], ["input", "B"],
                                        ["input", "A", "A-result"]],
    # C's input is stored already (it appends nothing) after A's answer was.
    "a run that appended nothing": [["input"], ["input", "A"], ["input"],
                                    ["input", "A", "A-result"]],
}


@pytest.mark.parametrize("steps", INTERLEAVINGS.values(), ids=INTERLEAVINGS.keys())
def test_interleaved_recordings_of_one_thread_store_each_message_once(
        db_url: str, steps: list[list[str]]) -> None:
    """Runs A, B and C record states of one thread in turn: each message is stored once,
    and A's tool result answers A's call under the model's own id (a run that took A's
    stored answer for new would have found its call id taken and scoped both)."""
    parts: dict[str, list[BaseMessage]] = {
        "input": list(resent("r")["messages"]),
        "A": [_answer("A", call="call_0")], "B": [_answer("B")],
        "A-result": [ToolMessage("18C and sunny", tool_call_id="call_0", id="run-A-result")]}
    options, thread = _Options(title=None, anonymize_pii=False), Thread("interleaved", ORG7)
    with Chatkeep(db_url, dispatcher="inline") as keep:
        for step in steps:
            record(keep, thread, options, [m for part in step for m in parts[part]])
        stored = keep.sessions.by_key("interleaved", ORG7).read_messages()
    ids = [m.metadata.get(LANGCHAIN_ID) for m in stored]
    assert len(ids) == len(set(ids)), ids
    assert set(ids) == {m.id for step in steps for part in step for m in parts[part]}
    assert [c.id for m in stored for c in m.tool_calls] == ["call_0"]
    assert [m.tool_call_id for m in stored if m.role.value == "tool"] == ["call_0"]
