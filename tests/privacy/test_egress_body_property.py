"""The egress over whole request bodies, generated (issue 30, items 3 and 7).

A sibling of ``test_egress_property`` that needs no database, so it runs many more
examples: hypothesis builds request bodies in each wire shape (Chat Completions and
Anthropic ``messages``, Responses and Agents SDK ``input``, Pydantic AI's request slots,
and bodies of no known shape) and places the six value kinds, each in any surface form
(``ALL_FORMS``: the older ones and those of issue 30, item 7), in text, in structured tool
arguments and results under any key (``signature``, ``encrypted_content``, ``type`` and
``role`` included), in the visible text of real signed blocks, and beside real signed
fields. Each value is written plain once in a user message, where the detector learns it.

After ``scrub``: no raw or normalised form of any value is left (``egress_helpers.leaks``,
which also decodes base64 and hex runs and squeezes out spelt-out letters), except inside
the provider-encrypted fields, which must be byte-identical to what was recorded; a
signed block whose text held a value is withheld (never sent redacted), one whose text
did not is sent byte-identical; and the body serialises as JSON (no sentinel left).
"""

from __future__ import annotations

import json
from typing import Any

from egress_helpers import ALL_FORMS, KINDS, POOLS, assert_never_raw, written
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.egress import SessionEgress
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault
from chatkeep.testing.wire_rules import seal, sign

PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
#: Keys a structured result may use: the ones the wire formats give a meaning, and others.
KEYS = ("signature", "encrypted_content", "type", "role", "summary", "content", "note")
SHAPES = ("chat", "anthropic", "responses", "pydantic_ai", "unknown")
REDACTOR = Redactor(PiiDetector())


def egress() -> SessionEgress:
    return SessionEgress(REDACTOR, PlaceholderVault(), 0, store=lambda version, vault: True,
                         load=lambda: (PlaceholderVault(), 0))


def learnt(values: dict[str, str]) -> str:
    """The user text every value is learnt from (the name with its cue)."""
    return " ".join(f"By the way, my name is {v}." if k == "name" else f"Note {v} please."
                    for k, v in values.items())


copies = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(ALL_FORMS)),
                  min_size=1, max_size=8)
structured = st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(KINDS),
                                st.sampled_from(ALL_FORMS)), min_size=1, max_size=4)


def result_object(values: dict[str, str], fields: list[tuple[str, str, str]]) -> Any:
    """A structured tool result: the drawn keys holding the drawn values, nested once."""
    flat = {key: f"{key}: {written(values[kind], form)}" for key, kind, form in fields}
    return {"status": "found", "record": flat, "items": [flat]}


def build(shape: str, values: dict[str, str], text: list[str], args: Any, result: Any,
          thought: str) -> tuple[Any, dict[str, Any]]:
    """A body of ``shape`` and its real signed parts (what must go out as recorded)."""
    user = learnt(values) + " " + " ".join(text)
    signed: dict[str, Any] = {}
    if shape == "chat":
        body: Any = {"messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "lookup", "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps(result)}]}
    elif shape == "anthropic":
        block = {"type": "thinking", "thinking": thought, "signature": sign(thought)}
        opaque = {"type": "redacted_thinking", "data": seal("hidden reasoning")}
        signed = {"thinking": block, "redacted": opaque}
        body = {"system": "Be brief.", "messages": [
            {"role": "user", "content": user},
            {"role": "assistant", "content": [
                block, opaque, {"type": "tool_use", "id": "t1", "name": "lookup", "input": args}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "text", "text": json.dumps(result)}]}]}]}
    elif shape == "responses":
        item = {"type": "reasoning", "id": "rs_1", "encrypted_content": seal("opaque"),
                "summary": [{"type": "summary_text", "text": thought}]}
        signed = {"reasoning": item}
        body = {"instructions": "Be brief.", "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": user}]},
            item,
            {"type": "function_call", "call_id": "c1", "name": "lookup",
             "arguments": json.dumps(args)},
            {"type": "function_call_output", "call_id": "c1", "output": json.dumps(result)}]}
    elif shape == "pydantic_ai":  # the request scrub's slots: parts hold plain data
        body = {"instructions": ["Be brief."], "messages": [
            {"instructions": None, "parts": [[{"content": user}], [{"args": {"value": args}}]]},
            {"instructions": None, "parts": [[{"content": result}]]}]}
    else:
        body = {"payload": {"user": user, "args": args, "result": result}}
    return body, signed


@PROPERTY
@given(values=st.fixed_dictionaries({k: st.sampled_from(POOLS[k]) for k in KINDS}),
       shape=st.sampled_from(SHAPES), in_text=copies, in_args=structured,
       in_result=structured, thought_value=st.none() | st.sampled_from(KINDS),
       thought_form=st.sampled_from(ALL_FORMS))
def test_no_value_leaves_a_scrubbed_body(values: dict[str, str], shape: str,
                                         in_text: list[tuple[str, str]],
                                         in_args: list[tuple[str, str, str]],
                                         in_result: list[tuple[str, str, str]],
                                         thought_value: str | None, thought_form: str) -> None:
    text = [written(values[kind], form) for kind, form in in_text]
    thought = "The user wants a lookup." if thought_value is None else \
        f"Look up {written(values[thought_value], thought_form)}."
    body, signed = build(shape, values, text, result_object(values, in_args),
                         result_object(values, in_result), thought)
    scrubber = egress()
    out = scrubber.scrub(body)
    sent = json.dumps(out, ensure_ascii=False)  # fails on a leaked sentinel
    # The provider-encrypted fields are opaque bytes: the check reads around them.
    for part in signed.values():
        for key in ("encrypted_content", "data"):
            if key in part:
                sent = sent.replace(part[key], "")
    assert_never_raw([(shape, sent)], values)
    if "thinking" in signed:
        kept = [b for m in out["messages"] for b in m["content"]
                if isinstance(b, dict) and b.get("type") in ("thinking", "redacted_thinking")]
        assert signed["redacted"] in kept
        assert (signed["thinking"] in kept) is (thought_value is None)
        assert scrubber.withheld == (thought_value is not None)
    if "reasoning" in signed:
        item = next(i for i in out["input"] if i.get("type") == "reasoning")
        assert item["encrypted_content"] == signed["reasoning"]["encrypted_content"]
        assert scrubber.withheld == 0  # a summary is not signed: redacted, kept
