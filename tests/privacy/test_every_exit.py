"""Every field of a built history is an exit: object keys in tool arguments, a Chat
``name``, reasoning summaries, annotations and extra keys of items handed back as
recorded, a value first detected late in the request, a value cut by the clip. And the
signed fields that cannot be redacted: ``encrypted_content`` goes out byte-identical, a
signed thinking block holding a value is withheld (issue 20, items 4-7, 10, 11)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from chatkeep import Chatkeep, Ref, ToolCall
from chatkeep.testing import FakeAnthropicServer, Reply
from chatkeep.testing.wire_rules import seal, sign

ORG = Ref("organization", 1)
EMAIL = "ana.garcia@example.com"
CARD = "4111 1111 1111 1111"
FORMATS = ["openai_chat", "openai_responses", "anthropic_messages"]


def redacting(make_keep: Callable[..., Chatkeep], **chat: Any) -> Chatkeep:
    return make_keep(config={"privacy": {"anonymize_pii": True},
                             "chat": {"max_history_tokens": 20_000, **chat}})


def sent(history: Any) -> str:
    """Everything that would leave: the messages, and Anthropic's system text."""
    return json.dumps([list(history), getattr(history, "system", "")], ensure_ascii=False)


def assert_no_raw(text: str, *values: str) -> None:
    for value in values:
        for form in {value, value.replace(" ", ""), value.upper()}:
            assert form not in text, f"raw {form!r} left in {text[:400]}"


@pytest.mark.parametrize("fmt", FORMATS)
def test_keys_of_tool_arguments_are_redacted(make_keep: Callable[..., Chatkeep],
                                             fmt: str) -> None:
    keep = redacting(make_keep)
    session = keep.sessions.create(ORG)
    session.add_user("Look these up please.")
    session.add_assistant(tool_calls=[ToolCall("call_1", "lookup",
                                               json.dumps({EMAIL: {"card": CARD}}))])
    session.add_tool_result("call_1", {"found": True})
    history = keep.compressor.build_history(session, "", format=fmt)
    assert_no_raw(sent(history), EMAIL, CARD)
    assert "<EMAIL_1>" in sent(history)


def test_the_chat_name_field_is_redacted(make_keep: Callable[..., Chatkeep]) -> None:
    keep = redacting(make_keep)
    session = keep.sessions.create(ORG)
    session.record([{"role": "user", "name": "ana.garcia@example.com", "content": "hi"}],
                   format="openai_chat")
    history = keep.compressor.build_history(session, "")
    assert_no_raw(sent(history), EMAIL)


def test_reasoning_summaries_are_redacted_and_encrypted_content_is_byte_identical(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = redacting(make_keep)
    session = keep.sessions.create(ORG)
    blob = seal("opaque reasoning")
    session.record([
        {"role": "user", "content": "Where do I send it?"},
        {"type": "reasoning", "id": "rs_1", "encrypted_content": blob,
         "summary": [{"type": "summary_text", "text": f"The user is {EMAIL}."}]},
        {"type": "function_call", "call_id": "c1", "name": "route", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ], format="openai_responses")
    history = keep.compressor.build_history(session, "", format="openai_responses")
    assert_no_raw(sent(history), EMAIL)
    reasoning = [i for i in history if i.get("type") == "reasoning"]
    assert reasoning and reasoning[0]["encrypted_content"] == blob


def test_an_item_handed_back_as_recorded_carries_no_value_in_any_field(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = redacting(make_keep)
    session = keep.sessions.create(ORG)
    session.record([
        {"role": "user", "content": "Who wrote it?"},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "See the page.", "annotations": [
             {"type": "url_citation", "url": f"https://example.org/u/{EMAIL}",
              "title": f"Profile of {EMAIL}", "start_index": 0, "end_index": 3}]}]},
    ], format="openai_responses")
    history = keep.compressor.build_history(session, "", format="openai_responses")
    assert_no_raw(sent(history), EMAIL)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_value_detected_late_is_redacted_early_in_the_same_request(
        make_keep: Callable[..., Chatkeep], fmt: str) -> None:
    """The name is only detectable in the last message ("my name is ..."): the first
    message, which holds it bare, must not carry it raw either."""
    keep = redacting(make_keep)
    session = keep.sessions.create(ORG)
    session.add_user("Please ask for Margarethe Vandenberghe at the desk.")
    session.add_assistant("Sure.")
    session.add_user("By the way, my name is Margarethe Vandenberghe.")
    history = keep.compressor.build_history(session, "", format=fmt)
    text = sent(history)
    assert "Vandenberghe" not in text, text


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_clipped_message_never_leaves_part_of_a_value(
        make_keep: Callable[..., Chatkeep], fmt: str) -> None:
    keep = redacting(make_keep, max_message_tokens=60)
    session = keep.sessions.create(ORG)
    # The card sits where the clip's head ends: clipped first, 12 of its digits went out.
    for offset in range(0, 40, 3):
        text = "word " * (30 + offset) + f"card {CARD} " + "tail " * 200
        session.add_user(text)
        session.add_assistant("ok")
    history = keep.compressor.build_history(session, "", format=fmt)
    assert history.info.clipped > 0
    text = sent(history)
    assert "1111 1111" not in text and "11111111" not in text, text
    assert "<CREDIT_CARD_1" not in text.replace("<CREDIT_CARD_1>", ""), "a split placeholder"


def thinking_turn(session: Any, thinking_text: str) -> None:
    session.add_user("Book me a table.")
    session.record([{"role": "assistant", "content": [
        {"type": "thinking", "thinking": thinking_text, "signature": sign(thinking_text)},
        {"type": "tool_use", "id": "toolu_1", "name": "book", "input": {"party": 2}}]}],
        format="anthropic_messages")
    session.add_tool_result("toolu_1", "booked")


def test_a_signed_thinking_block_holding_a_value_is_withheld_and_the_fake_agrees(
        make_keep: Callable[..., Chatkeep]) -> None:
    """Policy (fail closed): a signed block whose text holds a detected value is never
    sent. Without extended thinking the request is accepted; with it, the provider refuses
    the turn (the block is required there), and still no raw byte has left."""
    keep = redacting(make_keep)
    session = keep.sessions.create(ORG)
    session.add_user(f"I am {EMAIL}.")
    session.add_assistant("Hello.")
    thinking_turn(session, f"The user {EMAIL} wants a table.")
    history = keep.compressor.build_history(session, "", format="anthropic_messages")
    assert history.info.withheld == 1
    assert_no_raw(sent(history), EMAIL)
    with FakeAnthropicServer(responder=lambda body: Reply.ok("Done.")) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
        client.messages.create(model="claude-x", max_tokens=200, system=history.system,
                               messages=list(history))
        with pytest.raises(anthropic.BadRequestError):
            client.messages.create(model="claude-x", max_tokens=4000, system=history.system,
                                   messages=list(history),
                                   thinking={"type": "enabled", "budget_tokens": 1024})
        assert all(EMAIL not in body for body in server.bodies())


def test_a_signed_thinking_block_without_values_goes_back_byte_identical(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = redacting(make_keep)
    session = keep.sessions.create(ORG)
    thinking_turn(session, "The user wants a table for two.")
    history = keep.compressor.build_history(session, "", format="anthropic_messages")
    assert history.info.withheld == 0
    blocks = [b for m in history for b in m["content"] if isinstance(b, dict)
              and b.get("type") == "thinking"]
    assert blocks == [{"type": "thinking", "thinking": "The user wants a table for two.",
                       "signature": sign("The user wants a table for two.")}]
    with FakeAnthropicServer(responder=lambda body: Reply.ok("Done.")) as server:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="k", max_retries=0)
        client.messages.create(model="claude-x", max_tokens=4000, system=history.system,
                               messages=list(history),
                               thinking={"type": "enabled", "budget_tokens": 1024})
