"""Every wire format in and out: record from each, replay to each, typed errors for bad input."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from chatkeep import Chatkeep, ConfigError, HistoryCompressor, InvalidMessage, Ref
from chatkeep.sessions import ChatSession

ORG = Ref("organization", 1)
SYSTEM = "You are a weather assistant."
THINKING = {"type": "thinking", "thinking": "The user wants two cities.", "signature": "c2ln"}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [],
             "encrypted_content": "gAAAA-opaque"}


def chat_completion(content: str | None, calls: list[tuple[str, str]] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
            for cid, city in calls]
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def responses_response(text: str | None, calls: list[tuple[str, str]] = ()) -> dict[str, Any]:
    output: list[dict[str, Any]] = [REASONING]
    if text:
        output.append({"type": "message", "id": "msg_1", "role": "assistant",
                       "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    output.extend({"type": "function_call", "id": f"fc_{cid}", "call_id": cid,
                   "name": "get_weather", "arguments": json.dumps({"city": city}),
                   "status": "completed"} for cid, city in calls)
    return {"id": "resp_1", "object": "response", "created_at": 1, "model": "o-x",
            "status": "completed", "output": output, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 20, "output_tokens": 7, "total_tokens": 27,
                      "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 3}}}


def anthropic_message(text: str | None, calls: list[tuple[str, str]] = ()) -> dict[str, Any]:
    content: list[dict[str, Any]] = [THINKING]
    if text:
        content.append({"type": "text", "text": text})
    content.extend({"type": "tool_use", "id": cid, "name": "get_weather",
                    "input": {"city": city}} for cid, city in calls)
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": content, "stop_reason": "tool_use" if calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 30, "output_tokens": 9,
                      "cache_read_input_tokens": 100}}


CALLS = [("call_p", "Paris"), ("call_r", "Rome")]
RESPONSES = {"openai_chat": chat_completion, "openai_responses": responses_response,
             "anthropic_messages": anthropic_message}


def record_open_turn(s: ChatSession, recorded_in: str) -> None:
    s.add_user("Weather in Paris and Rome?")
    s.add_assistant_response(RESPONSES[recorded_in]("Checking both.", CALLS))
    s.add_tool_result("call_p", "18C")
    s.add_tool_result("call_r", "24C")


@pytest.mark.parametrize("recorded_in", list(RESPONSES))
def test_a_conversation_recorded_in_one_format_replays_in_every_format(
        keep: Chatkeep, recorded_in: str) -> None:
    s = keep.sessions.create(tenant=ORG)
    record_open_turn(s, recorded_in)
    stored = s.messages[1]
    assert stored.content == "Checking both." and [c.id for c in stored.tool_calls] == \
        ["call_p", "call_r"]
    assert json.loads(stored.tool_calls[0].arguments) == {"city": "Paris"}

    chat = keep.compressor.build_history(s, SYSTEM)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool", "tool"]
    assert "thinking" not in json.dumps(chat) and "reasoning" not in json.dumps(chat)

    items = keep.compressor.build_history(s, SYSTEM, format="openai_responses")
    kinds = [i.get("type", i.get("role")) for i in items]
    native_reasoning = recorded_in == "openai_responses"
    assert kinds == ["system", "user", *(["reasoning"] if native_reasoning else []),
                     "assistant", "function_call", "function_call", "function_call_output",
                     "function_call_output"]
    if native_reasoning:
        assert items[2] == REASONING  # verbatim, encrypted_content untouched
        assert items[4]["id"] == "fc_call_p"

    anth = keep.compressor.build_history(s, SYSTEM, format="anthropic_messages")
    assert anth.system == SYSTEM
    assert [m["role"] for m in anth] == ["user", "assistant", "user"]
    blocks = anth[1]["content"]
    if recorded_in == "anthropic_messages":
        assert blocks[0] == THINKING  # signed thinking handed back unmodified, first
        blocks = blocks[1:]
    assert blocks[0] == {"type": "text", "text": "Checking both."}
    assert blocks[1] == {"type": "tool_use", "id": "call_p", "name": "get_weather",
                         "input": {"city": "Paris"}}
    # Parallel results share one user message.
    assert [b["tool_use_id"] for b in anth[2]["content"]] == ["call_p", "call_r"]


@pytest.mark.parametrize("recorded_in", list(RESPONSES))
def test_usage_and_model_are_billed_from_every_format(keep: Chatkeep, recorded_in: str) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("hi")
    s.add_assistant_response(RESPONSES[recorded_in]("hello"))
    expected = {"openai_chat": 15, "openai_responses": 27, "anthropic_messages": 139}
    assert s.total_tokens == expected[recorded_in]
    (line,) = keep.usage(ORG)
    assert line.model in ("gpt-x", "o-x", "claude-x")


def test_sdk_objects_messages_and_streams_are_read(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("hi")
    completion = ChatCompletion.model_validate(chat_completion("from the SDK"))
    assert s.add_assistant_response(completion).content == "from the SDK"
    s.add_user("again")
    assert s.add_assistant_response(completion.choices[0].message).content == "from the SDK"
    s.add_user("stream it")
    chunks = [ChatCompletionChunk.model_validate({
        "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}) for delta in [
        {"role": "assistant", "content": "Let me "},
        {"content": "check."},
        {"tool_calls": [{"index": 0, "id": "call_s", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"ci'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Oslo"}'}}]},
    ]]
    streamed = s.add_assistant_response(chunks)
    assert streamed.content == "Let me check."
    assert streamed.tool_calls[0].id == "call_s"
    assert json.loads(streamed.tool_calls[0].arguments) == {"city": "Oslo"}
    s.add_tool_result("call_s", "2C")
    s.add_user("responses")
    message = s.add_assistant_response(Response.model_validate(responses_response("ok")))
    assert message.native["openai_responses"]["reasoning"] == [REASONING]


def test_request_side_payloads_are_recorded_in_each_format(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.record([{"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
              {"role": "assistant", "content": [THINKING, {
                  "type": "tool_use", "id": "t1", "name": "get_weather",
                  "input": {"city": "Oslo"}}]},
              {"role": "user", "content": [
                  {"type": "tool_result", "tool_use_id": "t1", "content": "2C",
                   "is_error": False},
                  {"type": "text", "text": "and tomorrow?"}]}],
             format="anthropic_messages")
    assert [(m.role.value, m.content) for m in s.messages] == [
        ("user", "Weather in Oslo?"), ("assistant", None), ("tool", "2C"),
        ("user", "and tomorrow?")]
    s.record([{"type": "function_call", "call_id": "f1", "name": "get_weather",
               "arguments": "{}"},
              {"type": "function_call_output", "call_id": "f1", "output": "sunny"},
              {"role": "assistant", "content": "Sunny."}], format="openai_responses")
    s.record([{"role": "user", "content": "thanks"}], format="openai_chat")
    roles = [m.role.value for m in s.messages]
    assert roles[4:] == ["assistant", "tool", "assistant", "user"]


@pytest.mark.parametrize(("fmt", "payload", "error"), [
    ("openai_responses", [{"type": "web_search_call", "id": "x"}], "unknown"),
    ("openai_responses", [{"type": "function_call_output", "call_id": "nope", "output": "x"}],
     "no matching earlier tool call"),
    ("openai_chat", [{"role": "tool", "tool_call_id": "ghost", "content": "x"}],
     "no matching earlier tool call"),
    ("openai_chat", [{"role": "function", "content": "x"}], "unknown role"),
    ("openai_chat", [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
     "cannot be stored"),
    ("anthropic_messages", [{"role": "system", "content": "x"}], "role must be"),
    ("anthropic_messages", [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "n", "input": "not an object"}]}],
     "must be an object"),
    ("anthropic_messages", [{"role": "assistant", "content": [
        {"type": "server_tool_use", "id": "t", "name": "web_search", "input": {}}]}],
     "unknown"),
])
def test_malformed_payloads_are_typed_errors_and_write_nothing(
        keep: Chatkeep, fmt: str, payload: Any, error: str) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("first")
    with pytest.raises(InvalidMessage, match=error):
        s.record([{"role": "user", "content": "batched"}, *payload]
                 if fmt != "anthropic_messages" else payload, format=fmt)
    assert [m.content for m in s.refresh().messages] == ["first"]
    assert s.message_count == 1


def test_a_second_result_for_one_call_is_refused_atomically(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("q")
    s.add_assistant_response(chat_completion(None, [("c1", "Paris")]))
    with pytest.raises(InvalidMessage, match="already answered"):
        s.record([{"role": "tool", "tool_call_id": "c1", "content": "a"},
                  {"role": "tool", "tool_call_id": "c1", "content": "b"}], format="openai_chat")
    assert s.message_count == 2


@pytest.mark.parametrize("response", [
    {"object": "response", "output": [{"type": "computer_call", "id": "x"}]},
    {"object": "response", "output": []},
    {"choices": []},
    {"type": "message", "content": [{"type": "mystery"}]},
    {"hello": "world"},
    [],
])
def test_malformed_responses_are_typed_errors(keep: Chatkeep, response: Any) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("q")
    with pytest.raises(InvalidMessage):
        s.add_assistant_response(response)
    assert s.message_count == 1


def test_async_clients_are_refused_at_construction(db_url: str) -> None:
    for client in (openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1"),
                   anthropic.AsyncAnthropic(api_key="k", base_url="http://127.0.0.1:9")):
        with pytest.raises(ConfigError, match="async"):
            HistoryCompressor(client)
        with pytest.raises(ConfigError, match="async"):
            Chatkeep(db_url, model=client, dispatcher="inline")


def test_unknown_format_is_a_typed_error(keep: Chatkeep) -> None:
    from chatkeep import InvalidArgument

    s = keep.sessions.create(tenant=ORG)
    s.add_user("q")
    with pytest.raises(InvalidArgument, match="unknown wire format"):
        keep.compressor.build_history(s, SYSTEM, format="gemini")  # type: ignore[call-overload]
    with pytest.raises(InvalidArgument, match="system_prompt"):
        keep.compressor.build_history(s, None)  # type: ignore[call-overload]
