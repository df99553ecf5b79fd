"""The fake LLM servers behave like the hosted APIs at the wire, for the real SDKs.

Valid bodies are answered; broken tool plumbing (orphan results, unanswered calls,
tampered reasoning, misplaced ``system``) gets the provider's HTTP 400, so history code
tested against the fakes fails the way it would in production. The agent model completes
hand-written tool loops in all three APIs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from chatkeep.testing import AgentModel, FakeAnthropicServer, FakeOpenAIServer, Reply, Turn
from chatkeep.testing.agent_model import (
    ToolCallView,
    cities_asked,
    conversation_from_anthropic,
    conversation_from_chat,
    conversation_from_responses,
    decide,
    fake_weather,
    weather_tool,
)
from chatkeep.testing.wire_rules import (
    check_anthropic_messages,
    check_chat_completions,
    check_responses,
    linked_item_id,
    seal,
    sign,
    unseal,
    verify,
)

THREE = "What's the weather in Paris and Rome and Oslo?"
THREE_ANSWER = "Paris: 18C and sunny; Rome: 24C and clear; Oslo: 4C and snowing"


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(responder=AgentModel().openai) as server:
        yield server


@pytest.fixture
def oai(openai_server: FakeOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=openai_server.base_url, api_key="k", max_retries=0,
                         timeout=5.0)


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(responder=AgentModel().anthropic) as server:
        yield server


@pytest.fixture
def claude(anthropic_server: FakeAnthropicServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=anthropic_server.base_url, api_key="k", max_retries=0,
                               timeout=5.0)


def _city(arguments: Any) -> str:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    return str(args["city"])


# --------------------------------------------------------------------------- signing


def test_sign_verify_and_seal_round_trip() -> None:
    sig = sign("step one")
    assert verify("step one", sig)
    assert not verify("step one!", sig)
    assert not verify("step one", sig[:-4] + "AAA=")
    blob = seal("secret reasoning")
    assert unseal(blob) == "secret reasoning"
    payload, _, tail = blob.partition(".")
    assert unseal(payload[:-2] + "xx." + tail) is None
    assert unseal("not-a-blob") is None and unseal(blob + "x") is None


# --------------------------------------------------------------------------- chat rules

CHAT_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}


def _chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages)}


def test_chat_rules_accept_a_complete_tool_loop() -> None:
    body = _chat({"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                 CHAT_CALL, {"role": "tool", "tool_call_id": "c2", "content": "r2"},
                 {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text",
                                                                     "text": "r1"}]},
                 {"role": "assistant", "content": "done"},
                 {"role": "user", "content": [{"type": "text", "text": "more"}]})
    assert check_chat_completions(body) == []


@pytest.mark.parametrize(("messages", "expected"), [
    ([{"role": "user", "content": "q"}, {"role": "tool", "tool_call_id": "c1",
                                          "content": "r"}],
     "must be a response to a preceeding message with 'tool_calls'"),
    ([{"role": "user", "content": "q"}, CHAT_CALL,
      {"role": "tool", "tool_call_id": "c1", "content": "r"},
      {"role": "tool", "tool_call_id": "c2", "content": "r"},
      {"role": "user", "content": "again"},
      {"role": "tool", "tool_call_id": "c1", "content": "late"}],
     "must be a response to a preceeding message with 'tool_calls'"),
    ([{"role": "user", "content": "q"}, CHAT_CALL,
      {"role": "tool", "tool_call_id": "c1", "content": "r"},
      {"role": "user", "content": "next"}],
     "The following tool_call_ids did not have response messages: c2"),
    ([{"role": "user", "content": "q"}, CHAT_CALL],
     "The following tool_call_ids did not have response messages: c1, c2"),
    ([{"role": "user", "content": "q"}, CHAT_CALL,
      {"role": "tool", "tool_call_id": "zz", "content": "r"}],
     "'tool_call_id' of 'zz' not found in 'tool_calls' of previous message"),
    ([{"role": "robot", "content": "q"}], "Invalid value: 'robot'"),
    ([{"role": "user", "content": None}], "Missing required parameter: 'messages[0].content'"),
    ([{"role": "user", "content": 5}], "expected one of a string or array of objects"),
    ([{"role": "system", "content": [{"type": "image_url", "image_url": {}}]}],
     "Invalid value: 'image_url'"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": None}],
     "Missing required parameter: 'messages[1].content'"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "r"}],
     "'messages[1].tool_calls[0].function.arguments': expected a string, but got an object"),
    ([{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": []}],
     "empty array"),
    ([{"role": "tool", "content": "r"}], "'messages[0].tool_call_id'"),
    ([], "[] is too short - 'messages'"),
], ids=["orphan-result", "result-after-user", "one-unanswered", "trailing-call",
        "unknown-id", "bad-role", "null-user-content", "bad-content-type", "bad-system-part",
        "empty-assistant", "dict-arguments", "empty-tool-calls", "tool-without-id",
        "no-messages"])
def test_chat_rules_reject_what_openai_rejects(messages: list[dict[str, Any]],
                                               expected: str) -> None:
    errors = check_chat_completions(_chat(*messages))
    assert any(expected in e for e in errors), errors


def test_chat_rules_check_model_and_stream_options() -> None:
    assert check_chat_completions({"messages": [{"role": "user", "content": "q"}]}) == [
        "you must provide a model parameter"]
    body = {**_chat({"role": "user", "content": "q"}), "stream_options": {"include_usage": True}}
    assert "only allowed when 'stream' is enabled" in check_chat_completions(body)[0]
    assert check_chat_completions({**body, "stream": True}) == []


# --------------------------------------------------------------------------- responses rules


def _responses(*items: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "input": list(items)}


FC = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
FCO = {"type": "function_call_output", "call_id": "c1", "output": "r"}


def test_responses_rules_accept_valid_inputs() -> None:
    rs = {"type": "reasoning", "id": "rs_ab12", "summary": [], "encrypted_content": seal("t")}
    linked = {**FC, "id": linked_item_id("rs_ab12", "fc", 1)}
    assert check_responses({"model": "m", "input": "hello"}) == []
    assert check_responses(_responses(
        {"role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
        rs, linked, FCO,
        {"role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
        {"role": "user", "content": "thanks"})) == []
    # A reasoning item without encrypted_content (stored server-side) is fine too.
    assert check_responses(_responses({"role": "user", "content": "q"},
                                      {"type": "reasoning", "id": "rs_1", "summary": []},
                                      FC, FCO)) == []


@pytest.mark.parametrize(("items", "expected"), [
    ([{"role": "user", "content": "q"}, FCO],
     "No tool call found for function call output with call_id c1"),
    ([FCO, FC], "No tool call found for function call output with call_id c1"),
    ([{"role": "user", "content": "q"}, FC, {"role": "user", "content": "next"}],
     "No tool output found for function call c1"),
    ([{"type": "web_search_call", "id": "ws_1"}], "Invalid value: 'web_search_call'"),
    ([{"role": "tool", "content": "x"}], "Invalid value: 'tool'"),
    ([{"role": "assistant", "content": [{"type": "input_text", "text": "a"}]}],
     "Invalid value: 'input_text'"),
    ([{**FC, "arguments": {"a": 1}}, FCO], "'input[0].arguments': expected a string"),
    ([FC, {"type": "function_call_output", "call_id": "c1"}], "'input[1].output'"),
    ([{"role": "user", "content": "q"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "forged"}, FC, FCO],
     "The encrypted content for item rs_1 could not be verified"),
    ([{"role": "user", "content": "q"}, {"type": "reasoning", "id": "rs_1", "summary": []},
      {"role": "user", "content": "q2"}],
     "Item 'rs_1' of type 'reasoning' was provided without its required following item"),
    ([{"role": "user", "content": "q"}, {**FC, "id": linked_item_id("rs_ab12", "fc", 1)}, FCO],
     "Item 'fc_ab12_1' of type 'function_call' was provided without its required "
     "'reasoning' item: 'rs_ab12'"),
], ids=["orphan-output", "output-before-call", "unanswered-call", "unknown-type",
        "tool-role", "assistant-input-text", "dict-arguments", "missing-output",
        "forged-encrypted-content", "reasoning-without-follower", "fc-without-reasoning"])
def test_responses_rules_reject_what_openai_rejects(items: list[dict[str, Any]],
                                                    expected: str) -> None:
    errors = check_responses(_responses(*items))
    assert any(expected in e for e in errors), errors


def test_responses_rules_reject_an_altered_encrypted_content() -> None:
    blob = seal("I should call f.")
    sig = blob.partition(".")[2]
    altered = seal("I should call g.").partition(".")[0] + "." + sig
    rs = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": altered}
    errors = check_responses(_responses({"role": "user", "content": "q"}, rs, FC, FCO))
    assert errors == ["The encrypted content for item rs_1 could not be verified."]


# --------------------------------------------------------------------------- anthropic rules


def _claude(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "c", "max_tokens": 2048, "messages": list(messages), **extra}


def _use(*ids: str, thinking: str | None = None, sig: str | None = None) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if thinking is not None:
        blocks.append({"type": "thinking", "thinking": thinking,
                       "signature": sig if sig is not None else sign(thinking)})
    blocks += [{"type": "tool_use", "id": i, "name": "f", "input": {}} for i in ids]
    return {"role": "assistant", "content": blocks}


def _results(*ids: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i,
                                         "content": "r"} for i in ids]}


USER = {"role": "user", "content": "q"}


def test_anthropic_rules_accept_a_complete_tool_loop() -> None:
    body = _claude(USER, _use("t1", "t2", thinking="plan"), _results("t2", "t1"),
                   {"role": "assistant", "content": "done"},
                   {"role": "user", "content": "more"}, {"role": "user", "content": "and"},
                   system="sys", thinking={"type": "enabled", "budget_tokens": 1024})
    assert check_anthropic_messages(body) == []
    # Same-role messages merge: the tool_use turn may be split over two messages.
    split = _claude(USER, {"role": "assistant", "content": "Looking."}, _use("t1"),
                    _results("t1"), {"role": "user", "content": [{"type": "text",
                                                                   "text": "thanks"}]})
    assert check_anthropic_messages(split) == []
    # A final assistant message (prefill) may be empty.
    assert check_anthropic_messages(_claude(USER, {"role": "assistant", "content": ""})) == []


@pytest.mark.parametrize(("body", "expected"), [
    ({"max_tokens": 5, "messages": [USER]}, "model: Field required"),
    ({"model": "c", "messages": [USER]}, "max_tokens: Field required"),
    (_claude(), "at least one message is required"),
    (_claude({"role": "system", "content": "s"}, USER), 'Unexpected role "system"'),
    (_claude({"role": "tool", "content": "s"}), "Input should be 'user' or 'assistant'"),
    (_claude({"role": "assistant", "content": "hi"}, USER), "first message must use the"),
    (_claude(USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": "{}"}]}, _results("t1")),
     "messages.1.content.0.input: Input should be a valid dictionary"),
    (_claude(USER, _use("t1", "t2"), _results("t1")),
     "tool_use ids were found without tool_result blocks immediately after: t2"),
    (_claude(USER, _use("t1")), "tool_use ids were found without tool_result blocks"),
    (_claude(USER, _use("t1"), USER, {"role": "assistant", "content": "x"}, _results("t1")),
     "tool_use ids were found without tool_result blocks immediately after: t1"),
    (_claude(USER, {"role": "assistant", "content": "x"}, _results("t9")),
     "unexpected tool_use_id found in tool_result blocks: t9"),
    (_claude(USER, _use("t1"), {"role": "user", "content": [
        {"type": "text", "text": "here"}, {"type": "tool_result", "tool_use_id": "t1"}]}),
     "tool_result blocks must come before any other content"),
    (_claude(USER, _use("t1", thinking="plan", sig=sign("other")), _results("t1")),
     "Invalid signature in thinking block"),
    (_claude(USER, _use("t1", thinking="plan", sig="forged"), _results("t1")),
     "Invalid signature in thinking block"),
    (_claude(USER, _use("t1"), _results("t1"), thinking={"type": "enabled",
                                                         "budget_tokens": 1024}),
     "a final `assistant` message must start with a thinking block"),
    (_claude(USER, thinking={"type": "enabled", "budget_tokens": 100}),
     "greater than or equal to 1024"),
    (_claude(USER, {"role": "assistant", "content": [{"type": "banana"}]}),
     "Input tag 'banana'"),
    (_claude(USER, {"role": "assistant", "content": ""}, USER), "non-empty content"),
    (_claude({"role": "user", "content": [{"type": "text", "text": ""}]}),
     "text content blocks must be non-empty"),
    (_claude(USER, {"role": "assistant", "content": [
        {"type": "redacted_thinking", "data": "forged"}]}, USER), "redacted_thinking"),
], ids=["no-model", "no-max-tokens", "no-messages", "system-message", "bad-role",
        "assistant-first", "input-not-object", "one-unanswered", "trailing-tool-use",
        "result-not-immediately-after", "orphan-result", "text-before-result",
        "altered-thinking-text", "forged-signature", "dropped-thinking", "small-budget",
        "unknown-block", "empty-middle-message", "empty-text-block", "forged-redacted"])
def test_anthropic_rules_reject_what_anthropic_rejects(body: dict[str, Any],
                                                       expected: str) -> None:
    errors = check_anthropic_messages(body)
    assert any(expected in e for e in errors), errors


# --------------------------------------------------------------------------- agent model


def test_cities_and_decisions_are_format_independent() -> None:
    assert cities_asked(THREE) == ["Paris", "Rome", "Oslo"]
    assert cities_asked("weather in Paris, Rome, and Oslo.") == ["Paris", "Rome", "Oslo"]
    assert cities_asked("hello") == []
    tools = {"get_weather"}
    ask = [Turn("user", "weather in Paris")]
    assert decide(ask, tools).calls == (("get_weather", {"city": "Paris"}),)
    assert decide(ask, set()).text == "echo: weather in Paris"  # no tool declared, no call
    done = [*ask, Turn("assistant", tool_calls=(ToolCallView("c", "get_weather",
                                                             {"city": "Paris"}),)),
            Turn("tool", tool_results=(("c", "sunny"),))]
    assert decide(done, tools) == decide(done, set())
    assert decide(done, tools).text == "Paris: sunny"
    assert decide([*done, Turn("assistant", "Paris: sunny"), Turn("user", "thanks")],
                  tools).text == "echo: thanks"
    chat = conversation_from_chat(_chat(
        {"role": "user", "content": "weather in Paris"},
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "sunny"}))
    responses = conversation_from_responses(_responses(
        {"role": "user", "content": "weather in Paris"},
        {"type": "function_call", "call_id": "c", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c", "output": "sunny"}))
    claude = conversation_from_anthropic(_claude(
        {"role": "user", "content": "weather in Paris"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c",
                                           "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c",
                                      "content": [{"type": "text", "text": "sunny"}]}]}))
    assert chat == responses == claude == done


# --------------------------------------------------------------------------- OpenAI server


def test_strict_chat_server_rejects_broken_plumbing_with_openai_400(
        openai_server: FakeOpenAIServer, oai: openai.OpenAI) -> None:
    orphan = [{"role": "user", "content": "q"},
              {"role": "tool", "tool_call_id": "call_1", "content": "r"}]
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="m", messages=orphan)
    error = caught.value.response.json()["error"]
    assert error == {"message": "Invalid parameter: messages with role 'tool' must be a "
                                "response to a preceeding message with 'tool_calls'.",
                     "type": "invalid_request_error", "param": "messages", "code": None}
    unanswered = [{"role": "user", "content": "q"}, CHAT_CALL,
                  {"role": "tool", "tool_call_id": "c1", "content": "r"}]
    with pytest.raises(openai.BadRequestError, match="did not have response messages: c2"):
        oai.chat.completions.create(model="m", messages=unanswered)
    with pytest.raises(openai.BadRequestError, match="did not have response messages"):
        oai.chat.completions.create(model="m", messages=unanswered,
                                    stream=True)
    assert len(openai_server.requests) == 3 and len(openai_server.rejected) == 3
    assert "preceeding message" in openai_server.rejected[0]
    # A rejected request does not consume the script.
    openai_server.script(Reply.ok("scripted"))
    ok = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert ok.choices[0].message.content == "scripted"


def test_lenient_chat_server_answers_anything() -> None:
    with FakeOpenAIServer(strict=False) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        reply = client.chat.completions.create(model="m", messages=[
            {"role": "tool", "tool_call_id": "x", "content": "r"}])
        assert reply.choices[0].message.content == "ok" and server.rejected == []


def run_chat_loop(client: openai.OpenAI, prompt: str) -> tuple[str, int]:
    messages: list[Any] = [{"role": "system", "content": "You are helpful."},
                           {"role": "user", "content": prompt}]
    for turn in range(1, 6):
        completion = client.chat.completions.create(
            model="gpt-fake", messages=messages, tools=[weather_tool("chat")])
        message = completion.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or "", turn
        for call in message.tool_calls:
            assert call.type == "function"
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": fake_weather(_city(call.function.arguments))})
    raise AssertionError("the agent never answered")


def test_agent_model_completes_a_chat_tool_loop(openai_server: FakeOpenAIServer,
                                                oai: openai.OpenAI) -> None:
    assert run_chat_loop(oai, "What is the weather in Paris?") == ("Paris: 18C and sunny", 2)
    assert run_chat_loop(oai, THREE) == (THREE_ANSWER, 2)
    three_calls = openai_server.requests[3]["messages"][2]["tool_calls"]
    assert len(three_calls) == 3 and len({c["id"] for c in three_calls}) == 3
    assert run_chat_loop(oai, "hello") == ("echo: hello", 1)
    assert openai_server.rejected == []


def test_chat_streaming_chunks_parse(openai_server: FakeOpenAIServer,
                                     oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="m", messages=[{"role": "user", "content": THREE}],
        tools=[weather_tool("chat")], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    deltas = [tc for c in chunks[:-1] for tc in c.choices[0].delta.tool_calls or []]
    args: dict[int, str] = {}
    for delta in deltas:
        assert delta.function is not None
        args[delta.index] = args.get(delta.index, "") + (delta.function.arguments or "")
    assert [json.loads(a) for a in args.values()] == [
        {"city": "Paris"}, {"city": "Rome"}, {"city": "Oslo"}]
    assert len([d for d in deltas if d.function and d.function.arguments]) > 3  # in pieces

    openai_server.script(Reply.ok("Hello there, streaming world"))
    text_chunks = list(oai.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    pieces = [c.choices[0].delta.content for c in text_chunks if c.choices[0].delta.content]
    assert len(pieces) > 1 and "".join(pieces) == "Hello there, streaming world"
    assert text_chunks[-1].choices[0].finish_reason == "stop" and text_chunks[-1].usage is None

    with oai.chat.completions.stream(model="m", messages=[{"role": "user", "content": THREE}],
                                     tools=[weather_tool("chat")]) as helper:
        events = [event.type for event in helper]
        final = helper.get_final_completion()
    assert "tool_calls.function.arguments.done" in events
    calls = final.choices[0].message.tool_calls or []
    assert [_city(c.function.arguments) for c in calls] == ["Paris", "Rome", "Oslo"]


def test_responses_endpoint_answers_a_parsed_response(openai_server: FakeOpenAIServer,
                                                      oai: openai.OpenAI) -> None:
    response = oai.responses.create(model="gpt-fake", input="hello", instructions="be nice")
    assert response.output_text == "echo: hello" and response.status == "completed"
    assert response.object == "response" and response.model == "gpt-fake"
    assert response.usage is not None and response.usage.total_tokens == (
        response.usage.input_tokens + response.usage.output_tokens)
    assert openai_server.requests[-1]["instructions"] == "be nice"
    openai_server.script(Reply.calls(("call_x", "lookup", '{"q": 1}'), thinking="look it up"),
                         Reply.ok("scripted answer"))
    called = oai.responses.create(model="m", input="q", reasoning={"effort": "low",
                                                                  "summary": "auto"})
    reasoning, call = called.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "look it up"
    assert reasoning.encrypted_content and unseal(reasoning.encrypted_content) == "look it up"
    assert call.type == "function_call" and (call.call_id, call.name) == ("call_x", "lookup")
    followed = oai.responses.create(model="m", previous_response_id=called.id, input=[
        {"type": "function_call_output", "call_id": "call_x", "output": "1"}])
    assert followed.output_text == "scripted answer"


def test_strict_responses_server_rejects_broken_plumbing(openai_server: FakeOpenAIServer,
                                                         oai: openai.OpenAI) -> None:
    first = oai.responses.create(model="m", input=THREE, tools=[weather_tool("responses")],
                                 reasoning={"effort": "low"})
    items: list[Any] = [{"role": "user", "content": THREE},
                        *(o.model_dump(exclude_none=True) for o in first.output)]
    outputs = [{"type": "function_call_output", "call_id": o.call_id,
                "output": fake_weather(_city(o.arguments))}
               for o in first.output if o.type == "function_call"]
    cases: list[tuple[list[Any], str]] = [
        ([items[0], *outputs], "No tool call found for function call output with call_id"),
        ([*items, *outputs[:2]], "No tool output found for function call"),
        ([*items, *outputs, {"type": "function_call_output", "call_id": "call_999",
                             "output": "x"}], "call_id call_999"),
        ([items[0], *items[2:], *outputs], "without its required 'reasoning' item"),
    ]
    tampered = copy.deepcopy(items)
    blob = tampered[1]["encrypted_content"]
    tampered[1]["encrypted_content"] = ("A" if blob[0] != "A" else "B") + blob[1:]
    cases.append(([*tampered, *outputs], "could not be verified"))
    for case_input, expected in cases:
        with pytest.raises(openai.BadRequestError, match=expected) as caught:
            oai.responses.create(model="m", input=case_input)
        assert caught.value.response.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError, match="Previous response with id 'resp_nope'"):
        oai.responses.create(model="m", previous_response_id="resp_nope", input="x")
    assert len(openai_server.rejected) == len(cases) + 1
    good = oai.responses.create(model="m", input=[*items, *outputs],
                                tools=[weather_tool("responses")])
    assert good.output_text == THREE_ANSWER


def run_responses_loop(client: openai.OpenAI, prompt: str, *,
                       chained: bool = False) -> tuple[str, int]:
    """``chained``: send only the new items with ``previous_response_id`` (server state)."""
    items: list[Any] = [{"role": "user", "content": prompt}]
    previous: str | None = None
    for turn in range(1, 6):
        kwargs: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        response = client.responses.create(
            model="o-fake", input=items, tools=[weather_tool("responses")],
            reasoning={"effort": "low"}, include=["reasoning.encrypted_content"], **kwargs)
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            return response.output_text, turn
        new = [{"type": "function_call_output", "call_id": c.call_id,
                "output": fake_weather(_city(c.arguments))} for c in calls]
        if chained:
            items, previous = new, response.id
        else:
            items += [*(o.model_dump(exclude_none=True) for o in response.output), *new]
    raise AssertionError("the agent never answered")


@pytest.mark.parametrize("chained", [False, True], ids=["full-input", "previous-response-id"])
def test_agent_model_completes_a_responses_tool_loop(
        openai_server: FakeOpenAIServer, oai: openai.OpenAI, chained: bool) -> None:
    assert run_responses_loop(oai, "weather in Rome", chained=chained) == (
        "Rome: 24C and clear", 2)
    assert run_responses_loop(oai, THREE, chained=chained) == (THREE_ANSWER, 2)
    second = openai_server.requests[3]  # the three-city loop's second request
    kinds = [item.get("type") for item in second["input"]]
    if chained:
        assert second["previous_response_id"] and kinds == ["function_call_output"] * 3
    else:
        assert kinds == [None, "reasoning", *["function_call"] * 3,
                         *["function_call_output"] * 3]
    assert openai_server.rejected == []


# --------------------------------------------------------------------------- Anthropic server


def run_claude_loop(client: anthropic.Anthropic, prompt: str, *,
                    thinking: bool) -> tuple[str, int, list[Any]]:
    messages: list[Any] = [{"role": "user", "content": prompt}]
    extra: dict[str, Any] = {"thinking": {"type": "enabled", "budget_tokens": 1024}} \
        if thinking else {}
    for turn in range(1, 6):
        message = client.messages.create(model="claude-fake", max_tokens=2048, system="Be nice.",
                                         tools=[weather_tool("anthropic")],
                                         messages=messages, **extra)
        messages.append({"role": "assistant", "content": message.content})
        uses = [b for b in message.content if b.type == "tool_use"]
        if message.stop_reason != "tool_use":
            assert not uses
            return "".join(b.text for b in message.content if b.type == "text"), turn, messages
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": b.id, "content": fake_weather(_city(b.input))}
            for b in uses]})
    raise AssertionError("the agent never answered")


@pytest.mark.parametrize("thinking", [False, True], ids=["plain", "thinking"])
def test_agent_model_completes_an_anthropic_tool_loop(
        anthropic_server: FakeAnthropicServer, claude: anthropic.Anthropic,
        thinking: bool) -> None:
    text, turns, messages = run_claude_loop(claude, "weather in Oslo", thinking=thinking)
    assert (text, turns) == ("Oslo: 4C and snowing", 2)
    text, turns, messages = run_claude_loop(claude, THREE, thinking=thinking)
    assert (text, turns) == (THREE_ANSWER, 2)
    first = [b.type for b in messages[1]["content"]]
    assert first == (["thinking"] if thinking else []) + ["tool_use"] * 3
    assert run_claude_loop(claude, "hi", thinking=thinking)[:2] == ("echo: hi", 1)
    assert anthropic_server.rejected == []
    assert all(r["system"] == "Be nice." for r in anthropic_server.requests)


def test_strict_anthropic_server_rejects_broken_plumbing(
        anthropic_server: FakeAnthropicServer, claude: anthropic.Anthropic) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    first = claude.messages.create(
        model="c", max_tokens=2048, thinking=thinking,
        tools=[weather_tool("anthropic")],
        messages=[{"role": "user", "content": "weather in Paris"}])
    blocks = [b.model_dump(exclude_none=True) for b in first.content]
    assert [b["type"] for b in blocks] == ["thinking", "tool_use"]
    use_id = blocks[1]["id"]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use_id,
                                           "content": "18C"}]}
    ask = {"role": "user", "content": "weather in Paris"}

    def with_blocks(*new: dict[str, Any]) -> list[Any]:
        return [ask, {"role": "assistant", "content": list(new)}, result]

    altered_text = {**blocks[0], "thinking": blocks[0]["thinking"] + " (edited)"}
    altered_sig = {**blocks[0], "signature": sign("something else")}
    cases: list[tuple[list[Any], dict[str, Any], str]] = [
        ([ask, result], {}, "unexpected tool_use_id found in tool_result blocks"),
        ([ask, {"role": "assistant", "content": blocks}, {"role": "user", "content": "hm?"}], {},
         "tool_use ids were found without tool_result blocks immediately after"),
        (with_blocks(altered_text, blocks[1]), {}, "Invalid signature in thinking block"),
        (with_blocks(altered_sig, blocks[1]), {}, "Invalid signature in thinking block"),
        (with_blocks(blocks[1]), {"thinking": thinking}, "must start with a thinking block"),
        ([{"role": "system", "content": "be nice"}, ask], {}, 'Unexpected role "system"'),
        (with_blocks({**blocks[1], "input": '{"city": "Paris"}'}), {},
         "Input should be a valid dictionary"),
    ]
    for messages, extra, expected in cases:
        with pytest.raises(anthropic.BadRequestError, match=expected) as caught:
            claude.messages.create(model="c", max_tokens=2048, messages=messages, **extra)
        assert caught.value.response.json()["type"] == "error"
        assert caught.value.response.json()["error"]["type"] == "invalid_request_error"
    assert len(anthropic_server.rejected) == len(cases)
    assert len(anthropic_server.requests) == len(cases) + 1
    # The untouched history is accepted, thinking block included.
    ok = claude.messages.create(model="c", max_tokens=2048, thinking=thinking,
                                messages=with_blocks(*blocks))
    assert ok.content[-1].type == "text" and ok.content[-1].text == "Paris: 18C"


def test_anthropic_server_scripts_replies_errors_and_streams(
        anthropic_server: FakeAnthropicServer, claude: anthropic.Anthropic) -> None:
    anthropic_server.script(
        Reply.calls(("toolu_a", "lookup", '{"q": 1}'), text="Checking.", thinking="hmm"),
        Reply.error(429, "slow down"), Reply.error(500), Reply.garbage())
    ask = [{"role": "user", "content": "q"}]
    message = claude.messages.create(model="c", max_tokens=10, messages=ask)
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.stop_reason == "tool_use" and message.usage.output_tokens > 0
    assert verify("hmm", message.content[0].signature)
    with pytest.raises(anthropic.RateLimitError) as limited:
        claude.messages.create(model="c", max_tokens=10, messages=ask)
    assert limited.value.response.json() == {
        "type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    with pytest.raises(anthropic.InternalServerError):
        claude.messages.create(model="c", max_tokens=10, messages=ask)
    garbage = claude.messages.create(model="c", max_tokens=10, messages=ask)
    assert getattr(garbage, "content", None) is None

    request = {"model": "c", "max_tokens": 2048, "tools": [weather_tool("anthropic")],
               "thinking": {"type": "enabled", "budget_tokens": 1024},
               "messages": [{"role": "user", "content": THREE}]}
    with claude.messages.stream(**request) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert "content_block_delta" in kinds and kinds[-1] == "message_stop"
    assert [b.type for b in final.content] == ["thinking", *["tool_use"] * 3]
    assert [b.input for b in final.content if b.type == "tool_use"] == [
        {"city": "Paris"}, {"city": "Rome"}, {"city": "Oslo"}]
    assert verify(final.content[0].thinking, final.content[0].signature)
    assert final.stop_reason == "tool_use"
