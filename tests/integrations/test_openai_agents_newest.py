"""``ChatkeepSession.get_items(limit)``'s bounded read (issue 37, point 2): the rows of the
newest live messages become the SDK's items inside the read's trip (``_Tail.fast``),
costed by an upper bound instead of re-serialising each item; whatever it cannot vouch
for goes to the exact path (``Message``s and ``message_cost``, ``_Tail.exact``) or to the
whole replay. Checked here: over varied sessions (SDK items of every kind, the keep's own
messages, pinned instructions, retracted messages, a summary's watermark, clipping and
budget limits, floats, escapes) the answer is the one the exact path gives, and the
replay's own tail wherever the replay folds nothing; the bound is never below
``message_cost`` whatever JSON text the payload was stored as; the fast path answers a
plain SDK session by itself."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkeep import Chatkeep, Ref
from chatkeep.formats.openai_responses import NAME, message_to_items
from chatkeep.history.plan import message_cost
from chatkeep.integrations.openai_agents import session as agents_session
from chatkeep.messages import Role
from chatkeep.store.newest import live_message, read_newest_rows
from chatkeep.tokens import HeuristicCounter
from support import agents_reads as reads
from support.newest import newest_live

ORG = Ref("organization", 1)
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
CONFIG = {"privacy": {"anonymize_pii": False},
          "chat": {"max_history_tokens": 1200, "max_message_tokens": 120}}
TEXTS = st.sampled_from(["ok", "Weather in Oslo?", 'say "hi", then: bye', "line\nbreak\ttab",
                         "Å, ø, ü and 🌧", "x" * 300, "y" * 700, "\\ backslash \u0001",
                         "a, b: c, d: e"])
_counter = itertools.count()


def reference(keep: Chatkeep, session: Any, system_prompt: str,
              limit: int) -> list[Any] | None:
    """The bounded read as the exact path answers it, from ``Message``s (``newest_live``)
    and ``message_cost``: the rule the fast path must match."""
    if keep.privacy.redacts(session):
        return None
    watermark, messages = newest_live(keep.repository.engine, session.id, limit)
    leading = bool(system_prompt) or watermark > 0
    if messages and messages[0].seq <= watermark:
        return None
    if len(messages) < limit and leading:
        return None
    if any(message.role is Role.SYSTEM for message in messages):
        return None
    config, counter = keep.compressor.config, keep.compressor.counter
    costs = [message_cost(message, counter, NAME) for message in messages]
    if any(cost > config.max_message_tokens for cost in costs) or \
            sum(costs) + counter.count(system_prompt) > config.max_history_tokens:
        return None
    items = [item for message in messages for item in message_to_items(message)]
    if len(items) < limit and (len(messages) == limit or leading):
        return None
    return items[-limit:]


@st.composite
def batches(draw: st.DrawFn, index: int) -> list[Any]:
    """One exchange's items, or a keep-API step (a callable on the session)."""
    kind = draw(st.sampled_from(["user", "user_parts", "assistant", "refusal", "call",
                                 "call_dict", "output_files", "reasoning", "float",
                                 "pinned", "keep_api", "retract"]))
    text = draw(TEXTS)
    call = f"call_{index}"
    if kind == "user":
        return [{"role": "user", "content": text}]
    if kind == "user_parts":
        return [{"role": "user", "content": [{"type": "input_text", "text": text},
                                             {"type": "input_text", "text": "!"}]}]
    if kind == "assistant":
        return [{"id": f"msg_{index}", "type": "message", "role": "assistant",
                 "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    if kind == "refusal":
        return [{"id": f"msg_{index}", "type": "message", "role": "assistant",
                 "status": "completed", "content": [{"type": "refusal", "refusal": text}]}]
    if kind in ("call", "call_dict"):
        arguments: Any = {"city": text} if kind == "call_dict" else json.dumps({"city": text})
        return [{"type": "function_call", "call_id": call, "name": "get_weather",
                 "arguments": arguments, "id": f"fc_{index}", "status": "completed"},
                {"type": "function_call_output", "call_id": call, "output": text}]
    if kind == "output_files":
        return [{"type": "function_call", "call_id": call, "name": "scan", "arguments": "{}"},
                {"type": "function_call_output", "call_id": call,
                 "output": [{"type": "input_text", "text": text},
                            {"type": "input_image", "image_url": "https://x.example/a.png"}]}]
    if kind == "reasoning":
        return [{"id": f"rs_{index}", "type": "reasoning",
                 "summary": [{"type": "summary_text", "text": text}]},
                {"id": f"msg_{index}", "type": "message", "role": "assistant",
                 "status": "completed",
                 "content": [{"type": "output_text", "text": "done", "annotations": []}]}]
    if kind == "float":
        return [{"role": "user", "content": text, "score": 0.25}]
    if kind == "pinned":
        return [{"role": "system", "content": text}]
    if kind == "keep_api":
        return [lambda s: (s.add_user(text),
                           s.add_assistant(tool_calls=[{"id": call, "function": {
                               "name": "f", "arguments": "{}"}}]),
                           s.add_tool_result(call, text),
                           s.add_assistant(text))]
    return [lambda s: s.retract_last()]


def build(keep: Chatkeep, steps: list[list[Any]], fold_at: int | None) -> Any:
    session = keep.sessions.open(f"newest-{next(_counter)}", ORG, anonymize_pii=False)
    for step in steps:
        if callable(step[0]):
            step[0](session)
        else:
            session.record(step, format="openai_responses")
    if fold_at is not None:
        last = keep.repository.get_session(session.id)
        keep.repository.compare_and_set_summary(session.id, last.summary_version,
                                                "Earlier: weather questions.",
                                                min(fold_at, last.last_seq))
    return session


@pytest.fixture
def keep(db_url: str) -> Iterator[Chatkeep]:
    """One keep for every example of a property (each example opens sessions of its own)."""
    with Chatkeep(db_url, dispatcher="inline", config=CONFIG) as opened:
        yield opened


@PROPERTY
@given(data=st.data())
def test_the_bounded_read_answers_as_the_exact_path_and_the_replay(keep: Chatkeep,
                                                                   data: Any) -> None:
    steps = [data.draw(batches(i)) for i in range(data.draw(st.integers(0, 12)))]
    session = build(keep, steps, data.draw(st.none() | st.integers(1, 8)))
    prompt = data.draw(st.sampled_from(["", "Answer briefly."]))
    for limit in data.draw(st.lists(st.integers(1, 30), min_size=1, max_size=4)):
        expected = reference(keep, session, prompt, limit)
        assert reads.newest(keep, session, prompt, limit) == expected
        bounded = reads.read(keep, session, prompt, limit, False)
        assert bounded == expected if expected is not None else \
            bounded == reads.read(keep, session, prompt, None, False)
    # Last (the replay may fold): where it folds nothing, its tail is the answer.
    limit = data.draw(st.integers(1, 30))
    expected = reference(keep, session, prompt, limit)
    replay = agents_session._replay(keep, session, prompt)
    if expected is not None and not replay.info.compressed:
        assert list(replay)[-limit:] == expected


def test_a_plain_sdk_session_is_answered_by_the_fast_path_alone(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with Chatkeep(db_url, dispatcher="inline",
                  config={"privacy": {"anonymize_pii": False}}) as keep:
        session = keep.sessions.open("plain", ORG, anonymize_pii=False)
        items: list[Any] = []
        for i in range(15):
            items += [{"role": "user", "content": f"Question {i}: \"quoted\", Å"},
                      {"type": "function_call", "call_id": f"c{i}", "name": "lookup",
                       "arguments": '{"q": 1}', "id": f"fc_{i}", "status": "completed"},
                      {"type": "function_call_output", "call_id": f"c{i}", "output": "42"},
                      {"id": f"rs_{i}", "type": "reasoning", "summary": []},
                      {"id": f"msg_{i}", "type": "message", "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": f"Answer {i}",
                                    "annotations": []}]}]
        session.record(items, format="openai_responses")

        def refused(*args: Any) -> None:
            raise AssertionError("the exact path was asked")

        # psycopg hands JSON columns back decoded: no text to bound, the exact path costs
        # them (asyncpg, the async API's driver, and SQLite hand back the text)
        if keep.repository.engine.dialect.driver != "psycopg":
            monkeypatch.setattr(agents_session._Tail, "exact", refused)
        for limit in (1, 2, 5, 20, 75, 100):
            assert reads.newest(keep, session, "", limit) == items[-limit:]


def test_a_float_or_another_counter_goes_to_the_exact_path(db_url: str) -> None:
    class Counter:
        def count(self, text: str) -> int:
            return len(text.split())

    with Chatkeep(db_url, dispatcher="inline", counter=Counter(),
                  config={"privacy": {"anonymize_pii": False}}) as keep:
        session = keep.sessions.open("other", ORG, anonymize_pii=False)
        items = [{"role": "user", "content": "a b c"}, {"role": "user", "content": "d e"}]
        session.record(items, format="openai_responses")
        tail = agents_session._Tail(keep, "", 2)
        answer = newest_rows_of(keep, session, 2, tail.fast)
        assert isinstance(answer, agents_session._Rows)  # the counter is not the heuristic
        assert reads.newest(keep, session, "", 2) == items
    with Chatkeep(db_url, dispatcher="inline",
                  config={"privacy": {"anonymize_pii": False}}) as keep:
        session = keep.sessions.open("floats", ORG, anonymize_pii=False)
        items = [{"role": "user", "content": "x", "score": 1e5}]
        session.record(items, format="openai_responses")
        tail = agents_session._Tail(keep, "", 1)
        assert isinstance(newest_rows_of(keep, session, 1, tail.fast), agents_session._Rows)
        assert reads.newest(keep, session, "", 1) == items


def newest_rows_of(keep: Chatkeep, session: Any, limit: int, then: Any) -> Any:
    return keep.repository.transport.run(read_newest_rows, session.id, limit, then)


def test_a_limit_past_a_short_history_keeps_what_the_replay_leads_with(db_url: str) -> None:
    """The system prompt is the first of the items ``get_items()`` returns: a limit
    larger than the history returns it too (the bounded read returned the items alone)."""
    with Chatkeep(db_url, dispatcher="inline",
                  config={"privacy": {"anonymize_pii": False}}) as keep:
        session = keep.sessions.open("short", ORG, anonymize_pii=False)
        items = [{"role": "user", "content": "hi"}, {"role": "user", "content": "there"}]
        session.record(items, format="openai_responses")
        whole = reads.read(keep, session, "Answer briefly.", None, False)
        assert whole[0] == {"role": "system", "content": "Answer briefly."}
        assert whole[1:] == items
        for limit in (3, 20):
            assert reads.read(keep, session, "Answer briefly.", limit,
                                        False) == whole
        assert reads.read(keep, session, "Answer briefly.", 2, False) == items
        assert reads.read(keep, session, "", 20, False) == items


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)
ENCODINGS = [{}, {"ensure_ascii": False}, {"separators": (",", ":")},
             {"separators": (",", ":"), "ensure_ascii": False}, {"indent": 1}]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(item=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=5),
       extras=st.fixed_dictionaries({}, optional={
           "reasoning": st.lists(st.dictionaries(st.text(max_size=6), JSON_VALUES,
                                                 max_size=3), max_size=2),
           "call_item_ids": st.dictionaries(st.text(max_size=6), st.text(max_size=6),
                                            max_size=2),
           "x": JSON_VALUES}),
       content=st.none() | st.text(max_size=40), call_id=st.none() | st.text(max_size=8),
       encoding=st.sampled_from(ENCODINGS), per_token=st.sampled_from([1, 2, 3, 4, 7]),
       role=st.sampled_from(["user", "assistant", "tool"]))
def test_the_cost_bound_is_never_below_message_cost(item: dict[str, Any],
                                                    extras: dict[str, Any],
                                                    content: str | None, call_id: str | None,
                                                    encoding: dict[str, Any], per_token: int,
                                                    role: str) -> None:
    """Whatever JSON text the payload was stored as (escaped or not, compact, indented),
    each row's bound is at least ``message_cost`` of the message it stores."""
    native = json.dumps({NAME: {**extras, "item": item}}, **encoding)
    row = (0, 1, role, content, None, call_id, None, native)
    _, total, worst = agents_session._Tail._items([row], per_token)
    exact = message_cost(live_message("s", row), HeuristicCounter(per_token), NAME)
    assert total == worst >= exact


PARTS = st.lists(st.fixed_dictionaries({"type": st.sampled_from(["output_text", "input_text",
                                                                 "text", "refusal"]),
                                        "text": st.sampled_from(["a", "b", "ab"])}),
                 max_size=2)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(kind=st.sampled_from([None, "message", "function_call", "function_call_output",
                             "reasoning"]),
       said=st.sampled_from(["a", "b", "ab"]) | PARTS, content=st.none() | st.sampled_from(
           ["a", "b", "ab", ""]), role=st.sampled_from(["user", "assistant", "tool"]),
       calls=st.sampled_from([None, "null", "[]", json.dumps(
           [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "a"}}])]),
       call_id=st.none() | st.just("c1"), extra=st.booleans())
def test_each_row_becomes_the_items_message_to_items_makes(
        kind: str | None, said: Any, content: str | None, role: str, calls: str | None,
        call_id: str | None, extra: bool) -> None:
    """Row by row, stored text and recorded item agreeing or not (a text changed at rest,
    calls beside a message item, parts that are not text), the fast path's items are
    ``message_to_items``' of the stored message."""
    item: dict[str, Any] = {"role": "assistant", "content": said, "call_id": "c1",
                            "arguments": "a", "output": said}
    if kind is not None:
        item["type"] = kind
    recorded: dict[str, Any] = {"item": item}
    if extra:
        recorded["reasoning"] = [{"id": "rs_1", "type": "reasoning", "summary": []}]
    row = (0, 1, role, content, calls, call_id, None, json.dumps({NAME: recorded}))
    items, _, _ = agents_session._Tail._items([row], 4)
    assert items == message_to_items(live_message("s", row))
