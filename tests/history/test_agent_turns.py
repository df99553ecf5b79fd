"""The open turn's tool plumbing: replayed verbatim and complete, never folded; closed
turns replay text only; pinned system messages; IncompleteToolTurn."""

from __future__ import annotations

import json

import pytest

from chatkeep import Chatkeep, HistoryCompressor, IncompleteToolTurn, Ref, ToolCall
from chatkeep.config import ChatConfig
from chatkeep.formats import openai_responses
from chatkeep.history.plan import message_cost, plan_history
from chatkeep.history.turns import open_turn, split_turns
from chatkeep.messages import Message, Role
from chatkeep.tokens import HeuristicCounter

ORG = Ref("organization", 1)
SYSTEM = "You are a weather assistant."


def msg(seq: int, role: str, content: str | None = None, *, calls: tuple[str, ...] = (),
        answers: str | None = None) -> Message:
    return Message("s", seq, Role(role), content,
                   tuple(ToolCall(c, "get_weather", json.dumps({"city": c})) for c in calls),
                   answers)


def test_the_issue_loop_replays_the_call_and_its_result(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("What is the weather in Paris?")
    first = keep.compressor.build_history(s, SYSTEM)
    assert [m["role"] for m in first] == ["system", "user"]
    s.add_assistant(tool_calls=[ToolCall("call_1", "weather", '{"city": "Paris"}')])
    s.add_tool_result("call_1", "18C and sunny")
    second = keep.compressor.build_history(s, SYSTEM)
    assert second[1:] == [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C and sunny"},
    ]
    # The answer closes the turn: from the next turn on only its text replays.
    s.add_assistant("It is 18C and sunny in Paris.")
    s.add_user("And tomorrow?")
    third = keep.compressor.build_history(s, SYSTEM)
    assert [(m["role"], m["content"]) for m in third[1:]] == [
        ("user", "What is the weather in Paris?"),
        ("assistant", "It is 18C and sunny in Paris."),
        ("user", "And tomorrow?")]


def test_parallel_calls_replay_every_result_in_stored_order(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("Weather in Paris, Rome and Oslo?")
    s.add_assistant("Looking up three cities.", tool_calls=[
        ToolCall(f"c{i}", "weather", json.dumps({"city": c}))
        for i, c in enumerate(["Paris", "Rome", "Oslo"])])
    s.add_tool_result("c2", "Oslo: 2C")
    s.add_tool_result("c0", "Paris: 18C")
    s.add_tool_result("c1", "Rome: 24C")
    # A second round in the same open turn.
    s.add_assistant(tool_calls=[ToolCall("c3", "forecast", "{}")])
    s.add_tool_result("c3", "dry all week")
    history = keep.compressor.build_history(s, SYSTEM)
    assert [m["role"] for m in history] == ["system", "user", "assistant", "tool", "tool",
                                            "tool", "assistant", "tool"]
    assert history[2]["content"] == "Looking up three cities."
    assert [m["tool_call_id"] for m in history if m["role"] == "tool"] == ["c2", "c0", "c1",
                                                                           "c3"]


def test_unanswered_call_is_a_typed_error_naming_the_ids(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("Weather in Paris and Rome?")
    s.add_assistant(tool_calls=[ToolCall("a", "w"), ToolCall("b", "w")])
    with pytest.raises(IncompleteToolTurn) as err:
        keep.compressor.build_history(s, SYSTEM)
    assert err.value.call_ids == ["a", "b"]
    s.add_tool_result("a", "18C")
    with pytest.raises(IncompleteToolTurn, match="b"):
        keep.compressor.build_history(s, SYSTEM)
    s.add_tool_result("b", "24C")
    assert keep.compressor.build_history(s, SYSTEM)[-1]["tool_call_id"] == "b"


def test_an_abandoned_call_is_closed_by_the_next_user_message(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("Weather in Paris?")
    s.add_assistant(tool_calls=[ToolCall("a", "w")])
    s.add_user("Never mind, what about jokes?")
    history = keep.compressor.build_history(s, SYSTEM)
    assert [(m["role"], m["content"]) for m in history[1:]] == [
        ("user", "Weather in Paris?"), ("user", "Never mind, what about jokes?")]


def test_closed_plumbing_never_replays_and_the_open_turn_never_folds(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    hc = HistoryCompressor(None, max_history_tokens=700, recent_messages_min=2)
    for i in range(12):
        s.add_user(f"U{i} " + "question " * 40)
        s.add_assistant(tool_calls=[ToolCall(f"c{i}", "lookup", json.dumps({"q": f"ARG{i}"}))])
        s.add_tool_result(f"c{i}", f"RESULT{i} " * 30)
        if i < 11:
            s.add_assistant(f"A{i} " + "answer " * 40)
    history = hc.build_history(s, SYSTEM)
    assert history.compressed and s.summary_watermark > 0
    assert "RESULT" not in (s.summary or "") and "ARG" not in (s.summary or "")
    tail = history[-3:]
    assert tail[0]["role"] == "user" and tail[0]["content"].startswith("U11")
    assert tail[1]["tool_calls"][0]["id"] == "c11"
    assert tail[2] == {"role": "tool", "tool_call_id": "c11", "content": "RESULT11 " * 30}
    closed = history[1:-3]
    assert all("tool_calls" not in m and m["role"] != "tool" for m in closed)
    assert not any("RESULT" in str(m["content"]) for m in closed)
    # The watermark never enters the open turn.
    open_start = next(m.seq for m in s.messages if m.content and m.content.startswith("U11"))
    assert s.summary_watermark < open_start


def test_system_messages_added_mid_session_are_pinned_in_order(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    hc = HistoryCompressor(None, max_history_tokens=600)
    s.add_system("Answer in French.")
    for i in range(10):
        s.add_user(f"U{i} " + "word " * 40)
        s.add_assistant(f"A{i} " + "word " * 40)
        if i == 4:
            s.add_system("Be brief.")
    history = hc.build_history(s, SYSTEM)
    assert s.summary_watermark > 10  # both instructions are below the watermark now
    assert [m["content"] for m in history[:3]] == [SYSTEM, "Answer in French.", "Be brief."]
    assert history[3]["content"].startswith("Summary of the earlier conversation")
    assert "Be brief" not in (s.summary or "") and "French" not in (s.summary or "")


def test_budget_defaults_follow_the_budget() -> None:
    for budget in (1000, 400):
        hc = HistoryCompressor(None, max_history_tokens=budget)
        assert hc.config.summary_limit == max(16, budget // 10)


def test_a_budget_smaller_than_the_protected_tail_returns_it_without_folding(
        keep: Chatkeep) -> None:
    calls: list[int] = []

    class Counting:
        def summarize(self, previous, messages, language):  # type: ignore[no-untyped-def]
            from chatkeep.history import SummaryResult

            calls.append(len(messages))
            return SummaryResult("S")

    s = keep.sessions.create(tenant=ORG)
    hc = HistoryCompressor(Counting(), max_history_tokens=400, recent_messages_min=4)
    s.add_user("U0 " + "long " * 400)
    s.add_assistant("A0 " + "long " * 400)
    for _ in range(3):
        history = hc.build_history(s, SYSTEM)
        assert history.over_budget and "nothing can be folded" in (history.over_budget_reason or "")
        assert [m["content"][:2] for m in history[1:]] == ["U0", "A0"]
    assert calls == []
    # Growing the session: folds happen in batches, not on every turn.
    for i in range(1, 8):
        s.add_user(f"U{i} " + "long " * 400)
        s.add_assistant(f"A{i} " + "long " * 400)
        hc.build_history(s, SYSTEM)
    assert 0 < len(calls) <= 7


def test_plan_is_pure_and_counts_framing() -> None:
    counter = HeuristicCounter()
    messages = [msg(1, "user", "hi"), msg(2, "assistant", calls=("x",)),
                msg(3, "tool", "r", answers="x")]
    plan = plan_history(system_text="sys", pinned_before=[], summary=None, messages=messages,
                        config=ChatConfig(), counter=counter,
                        redact=lambda text, context=None: text.upper(),
                        format="openai_chat")
    assert [m.content for m in plan.outgoing.messages] == ["HI", None, "R"]
    # Keys go through the filter too (a key can hold an e-mail address or a name).
    assert plan.outgoing.messages[1].tool_calls[0].arguments == '{"CITY": "X"}'
    assert plan.tokens > sum(counter.count(t) for t in ("sys", "hi", "r"))
    assert not plan.fold and plan.over_budget_reason is None


def test_a_recorded_item_is_priced_once_as_it_goes_out() -> None:
    """A Responses item recorded whole goes out instead of the text it holds: the planner
    prices it as that item (the text once, plus the item's framing), while reasoning kept
    beside a text goes out on top of it and is priced on top of it."""
    counter = HeuristicCounter()
    text = "The clause 4.2 limits liability to the fees paid in the last year. " * 20
    [draft] = openai_responses.from_wire([{
        "id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}]}])
    recorded = Message(session_id="s", seq=1, role=Role.ASSISTANT, content=draft.content,
                       native=draft.native)
    sent = openai_responses.message_to_items(recorded)
    cost = message_cost(recorded, counter, openai_responses.NAME)
    wire = counter.count(json.dumps(sent, ensure_ascii=False))
    assert counter.count(text) < cost <= wire + 16
    # Reasoning goes out as items of its own before the text: priced on top of it.
    reasoning = [{"type": "reasoning", "id": "rs_1", "summary": [
        {"type": "summary_text", "text": "Look up clause 4.2. " * 30}]}]
    reasoned = Message(session_id="s", seq=1, role=Role.ASSISTANT, content=text,
                       native={openai_responses.NAME: {"reasoning": reasoning}})
    items = openai_responses.message_to_items(reasoned)
    assert len(items) == 2
    assert message_cost(reasoned, counter, openai_responses.NAME) >= \
        counter.count(json.dumps(items, ensure_ascii=False)) - 16


def test_split_turns_and_open_turn_rules() -> None:
    closed = [msg(1, "user", "a"), msg(2, "assistant", "b")]
    assert split_turns(closed).current == () and not split_turns(closed).open
    pending = [*closed, msg(3, "user", "c")]
    assert [m.seq for m in split_turns(pending).current] == [3]
    waiting = [*pending, msg(4, "assistant", calls=("k",))]
    with pytest.raises(IncompleteToolTurn):
        open_turn(split_turns(waiting).current)
    # A late result for a call of an earlier turn is not replayed as an orphan.
    late = [msg(1, "user", "a"), msg(2, "assistant", calls=("old",)), msg(3, "user", "b"),
            msg(4, "assistant", calls=("new",)), msg(5, "tool", "late", answers="old"),
            msg(6, "tool", "ok", answers="new")]
    assert [m.seq for m in open_turn(split_turns(late).current)] == [3, 4, 6]
