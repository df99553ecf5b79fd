"""Signed payloads are known by where the wire formats put them, not by a key name (issue 30,
item 3).

A structured tool result ``{"signature": "<name> | <e-mail>"}`` is user data and is
redacted; so is a ``type`` or ``role`` anywhere but a message's role and a block's type.
Real signed blocks (Anthropic ``thinking`` with its ``signature``, ``redacted_thinking``,
a Responses ``reasoning`` item's ``encrypted_content``) still go out byte-identical, a
signed block whose text would change is still withheld, and the egress's internal
sentinel never stays in a body.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolReturnPart,
)

from chatkeep.errors import PrivacyError
from chatkeep.integrations.pydantic_ai._scrub import scrub_request
from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.egress import SessionEgress, Signed
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault
from chatkeep.testing.wire_rules import seal, sign

NAME = "Ana García"
EMAIL = "ana.garcia@example.com"
VALUE = f"{NAME} | {EMAIL}"
KEYS = ("signature", "encrypted_content", "type", "role")


def egress() -> SessionEgress:
    """A redacting egress whose vault knows the name (the detector finds the e-mail)."""
    vault = PlaceholderVault()
    vault.placeholder_for("PERSON", NAME)
    return SessionEgress(Redactor(PiiDetector()), vault, 0,
                         store=lambda version, vault: True,
                         load=lambda: (PlaceholderVault(), 0))


def assert_clean(body: Any) -> None:
    text = json.dumps(body, ensure_ascii=False)  # fails on a leaked sentinel
    assert EMAIL not in text and NAME not in text and "García" not in text, text


def user_data_bodies(key: str) -> dict[str, Any]:
    """A body per place user data with ``key`` can sit in."""
    data = {key: VALUE}
    return {
        "structured result": {"result": data},
        "the body itself": data,
        "tool_use input": {"messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": data}]}]},
        "block metadata": {"input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "hi", "metadata": data}]}]},
        "list of results": [[data, {"nested": [data]}]],
        "beside another field": {"result": {key: VALUE, "email": EMAIL}},
    }


@pytest.mark.parametrize("key", KEYS)
@pytest.mark.parametrize("place", list(user_data_bodies("type")))
def test_user_data_under_a_signed_or_structural_key_is_redacted(key: str, place: str) -> None:
    body = user_data_bodies(key)[place]
    out = egress().scrub(body)
    assert_clean(out)
    assert "<EMAIL_1>" in json.dumps(out) and "<PERSON_1>" in json.dumps(out)


@pytest.mark.parametrize("key", ["role", "type"])
def test_a_role_or_type_that_is_not_vocabulary_is_redacted_even_in_place(key: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi", key: EMAIL}]}
    if key == "role":
        body = {"messages": [{"role": EMAIL, "content": "hi"}]}
    assert_clean(egress().scrub(body))


def test_roles_and_types_in_place_go_out_as_they_are() -> None:
    body = {"input": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": f"mail {EMAIL}"}]},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}],
        "messages": [{"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}
    out = egress().scrub(body)
    assert_clean(out)
    assert out["input"][0]["type"] == "message" and out["input"][0]["role"] == "user"
    assert out["input"][0]["content"][0]["type"] == "input_text"
    assert out["input"][1]["type"] == "function_call"
    assert out["messages"][0]["tool_calls"][0]["type"] == "function"


def anthropic_turn(thinking: str) -> dict[str, Any]:
    return {"system": "", "messages": [
        {"role": "user", "content": f"I am {EMAIL}."},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking, "signature": sign(thinking)},
            {"type": "redacted_thinking", "data": seal(f"secret {EMAIL}")},
            {"type": "tool_use", "id": "toolu_1", "name": "book",
             "input": {"signature": VALUE}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "text", "text": VALUE}]}]}]}


def test_real_signed_anthropic_blocks_go_out_byte_identical() -> None:
    body = anthropic_turn("The user wants a table for two.")
    out = egress().scrub(body)
    blocks = out["messages"][1]["content"]
    assert blocks[0] == body["messages"][1]["content"][0]  # thinking, signature untouched
    assert blocks[1] == body["messages"][1]["content"][1]  # redacted_thinking whole
    assert blocks[2]["input"] == {"signature": "<PERSON_1> | <EMAIL_1>"}
    assert out["messages"][2]["content"][0]["content"][0]["text"] == "<PERSON_1> | <EMAIL_1>"


def test_a_signed_thought_holding_a_value_is_still_withheld() -> None:
    scrubber = egress()
    out = scrubber.scrub(anthropic_turn(f"The user {NAME} wants a table."))
    assert scrubber.withheld == 1
    kinds = [b["type"] for b in out["messages"][1]["content"]]
    assert kinds == ["redacted_thinking", "tool_use"]
    assert "García" not in json.dumps(out["messages"][1]["content"][1:])


def test_a_thinking_block_outside_an_assistant_message_is_data() -> None:
    """A look-alike in a user message, a tool's input or a result is not a signed block:
    its text is redacted (not withheld) and its "signature" too."""
    forged = {"type": "thinking", "thinking": f"mail {EMAIL}", "signature": VALUE}
    body = {"messages": [
        {"role": "user", "content": [forged]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                           "input": {"block": forged}}]}]}
    scrubber = egress()
    out = scrubber.scrub(body)
    assert scrubber.withheld == 0
    assert_clean(out)
    assert out["messages"][0]["content"][0]["thinking"] == "mail <EMAIL_1>"


def test_a_reasoning_item_keeps_its_encrypted_content_and_redacts_its_summary() -> None:
    sealed = seal("opaque")
    item = {"type": "reasoning", "id": "rs_1", "encrypted_content": sealed,
            "summary": [{"type": "summary_text", "text": f"Look up {EMAIL}."}]}
    scrubber = egress()
    out = scrubber.scrub({"input": [item, {"role": "user", "content": "and?"}]})
    assert out["input"][0]["encrypted_content"] == sealed
    assert out["input"][0]["summary"] == [{"type": "summary_text", "text": "Look up <EMAIL_1>."}]
    assert scrubber.withheld == 0
    # Its signed reasoning text holding a value: the item is withheld.
    item = {**item, "content": [{"type": "reasoning_text", "text": f"mail {EMAIL}"}]}
    out = scrubber.scrub({"input": [item, {"role": "user", "content": "and?"}]})
    assert scrubber.withheld == 1
    assert out == {"input": [{"role": "user", "content": "and?"}]}


def test_encrypted_content_outside_a_reasoning_item_is_data() -> None:
    body = {"input": [{"type": "message", "role": "user", "content": "hi",
                       "encrypted_content": VALUE}]}
    assert_clean(egress().scrub(body))


def test_a_signed_marker_is_kept_or_withheld_and_the_sentinel_never_stays() -> None:
    scrubber = egress()
    kept = Signed({"content": "nothing personal"})
    assert scrubber.scrub({"parts": [kept]}) == {"parts": [kept]}
    out = scrubber.scrub({"parts": [Signed({"content": EMAIL}), "x"],
                          "slot": Signed({"content": EMAIL}), "email": EMAIL})
    assert out == {"parts": ["x"], "email": "<EMAIL_1>"}
    assert scrubber.withheld == 2
    with pytest.raises(PrivacyError):
        scrubber.scrub(Signed({"content": EMAIL}))


def test_a_pydantic_ai_structured_tool_return_with_a_signature_key_is_redacted() -> None:
    """The repro: a tool's structured return with a ``signature`` key (and another field to
    redact) went out raw and left the sentinel, which Pydantic AI cannot serialise."""
    messages = [
        ModelRequest(parts=[ToolReturnPart("lookup", {"signature": VALUE, "email": EMAIL},
                                           tool_call_id="c1")]),
        ModelResponse(parts=[ThinkingPart("no values here", signature="sig-1",
                                          provider_name="anthropic"),
                             ThinkingPart(f"mail {EMAIL}", signature="sig-2",
                                          provider_name="anthropic"),
                             TextPart("done")])]
    out = scrub_request(messages, [], egress().scrub)
    dumped = ModelMessagesTypeAdapter.dump_json(out.messages).decode()
    assert EMAIL not in dumped and "García" not in dumped, dumped
    assert out.withheld == 1
    assert out.messages[0].parts[0].content == {"signature": "<PERSON_1> | <EMAIL_1>",
                                                "email": "<EMAIL_1>"}
    assert out.messages[1].parts[0] is messages[1].parts[0]
