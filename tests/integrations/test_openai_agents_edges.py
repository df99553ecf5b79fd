"""The Agents SDK edges of a redacting ``ChatkeepSession`` (issue 30): traces, a value only
its question identifies, input guardrails, the user's own values in what the app shows
(streamed too), and streamed usage. Every model is the SDK's own OpenAI model against the
strict local fake; traces go to a recording processor and through the SDK's own exporter
to a local endpoint."""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import re
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    input_guardrail,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.tracing import TracingProcessor
from agents.tracing.processors import BackendSpanExporter, default_processor

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.integrations.openai_agents.billing import ESTIMATED
from chatkeep.testing import AgentModel, FakeOpenAIServer, Reply

ORG = Ref("organization", 1)
EMAIL, PHONE = "ana.garcia@example.com", "+44 7911 123456"
RAW = [EMAIL, "ana.garcia", "7911 123456", "7911123456"]


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


class Recorder(TracingProcessor):
    """Records every trace and span export the SDK would hand its exporter."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.exports: list[str] = []

    def on_trace_start(self, trace: Any) -> None:
        pass

    def on_trace_end(self, trace: Any) -> None:
        self.items.append(trace)
        self.exports.append(json.dumps(trace.export(), default=str))

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        self.items.append(span)
        self.exports.append(json.dumps(span.export(), default=str))

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


class IngestEndpoint:
    """A local stand-in for the provider's trace ingest endpoint: records each POST body."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                owner.bodies.append(self.rfile.read(length).decode())
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces/ingest"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """Tracing on, every trace to a recorder (nothing to the network); off again after."""
    recording = Recorder()
    set_trace_processors([recording])
    set_tracing_disabled(False)
    try:
        yield recording
    finally:
        set_tracing_disabled(True)
        set_trace_processors([default_processor()])


class World:
    """An async keep on the test database and the strict fake behind the SDK's models."""

    def __init__(self, db_url: str, responder: Any = None, **config: Any) -> None:
        self.db_url = db_url
        self.config = {"privacy": {"anonymize_pii": True}, **config}
        self.server = FakeOpenAIServer(responder=responder or AgentModel().openai)

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.server.base_url, api_key="k", max_retries=0)

    def keep(self) -> AsyncChatkeep:
        return AsyncChatkeep(self.db_url, model=self.client(), config=self.config)

    def model(self, api: str = "chat") -> Any:
        kind: Any = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
        return kind(model="gpt-x", openai_client=self.client())

    def assert_nothing_raw_sent(self) -> None:
        bodies = self.server.bodies()
        assert bodies
        for body in bodies:
            assert all(raw not in body for raw in RAW), body[:800]
        assert self.server.rejected == []


@function_tool
def customer_record(customer: str) -> str:
    """The customer's contact record."""
    return json.dumps({"customer": customer, "email": EMAIL, "phone": PHONE})


#: What ``write_to`` received, call by call.
WRITTEN_TO: list[str] = []


@function_tool
def write_to(address: str) -> str:
    """Write to an address."""
    WRITTEN_TO.append(address)
    return f"written to {address}"


def record_asker(body: dict[str, Any]) -> Reply:
    """Calls ``customer_record`` once per user turn (and ``write_to`` with the first
    placeholder it was shown, which reaches the tool restored), then answers quoting the
    tool output (Chat Completions and Responses bodies alike)."""
    messages = body.get("messages") or body.get("input") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool" or last.get("type") == "function_call_output":
        return Reply.ok(f"Found it: {last.get('content') or last.get('output')}")
    calls = [(f"call_{len(messages)}", "customer_record", '{"customer": "c-17"}')]
    shown = re.findall(r"<EMAIL_\d+>", json.dumps(messages))
    if shown:
        calls.append((f"call_w{len(messages)}", "write_to",
                      json.dumps({"address": shown[0]})))
    return Reply.calls(*calls)


# -- item 2: traces ---------------------------------------------------------------------


@pytest.mark.parametrize("model_api", ["chat", "responses"])
def test_traces_of_a_redacting_run_carry_no_raw_value(db_url: str, recorder: Recorder,
                                                      model_api: str) -> None:
    world = World(db_url, responder=record_asker)
    WRITTEN_TO.clear()

    async def scenario() -> None:
        async with world.keep() as keep:
            agent = Agent(name="support", instructions="Look customers up.",
                          tools=[customer_record, write_to], model=world.model(model_api))
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.run(agent, f"I am Ana, mail {EMAIL}. Find customer c-17.")
            # The same run on a session that does not redact: the SDK's default traces
            # carry the tool output (what the recorder would have seen before).
            plain = await ChatkeepSession.open(keep, tenant=ORG, anonymize_pii=False)
            recorder.exports.append("--- plain ---")
            await plain.run(agent, "Find customer c-17.")

    with world.server:
        run(scenario())
    # The tool acted on the real address (its arguments restored): function spans, their
    # inputs and outputs included, still carry no raw value.
    assert WRITTEN_TO == [EMAIL]
    cut = recorder.exports.index("--- plain ---")
    redacting, plain = recorder.exports[:cut], recorder.exports[cut + 1:]
    kinds = [json.loads(e).get("span_data", {}).get("type") for e in redacting]
    assert "function" in kinds and ("generation" in kinds or "response" in kinds), kinds
    functions = [json.loads(e)["span_data"] for e in redacting
                 if json.loads(e).get("span_data", {}).get("type") == "function"]
    assert {f["name"] for f in functions} == {"customer_record", "write_to"}
    assert "agent" in kinds and "trace" in [json.loads(e).get("object") for e in redacting]
    for export in redacting:
        assert all(raw not in export for raw in RAW), export
    if model_api == "chat":
        assert any(EMAIL in export for export in plain), "the control run traces content"
    # What the SDK's default exporter would POST to the provider, sent to a local endpoint.
    endpoint = IngestEndpoint()
    try:
        exporter = BackendSpanExporter(api_key="k", endpoint=endpoint.url)
        exporter.export(recorder.items[:cut])
        exporter.close()  # type: ignore[no-untyped-call]
    finally:
        endpoint.close()
    assert endpoint.bodies and '"function"' in "".join(endpoint.bodies)
    for body in endpoint.bodies:
        assert all(raw not in body for raw in RAW), body[:800]


# -- item 5: a value only its question identifies ----------------------------------------


@pytest.mark.parametrize("how", ["run", "run_streamed"])
def test_a_bare_number_answering_the_question_never_reaches_the_model(db_url: str,
                                                                     how: str) -> None:
    asks = "What is your social security number?"
    world = World(db_url, responder=lambda body: Reply.ok(asks if len(body["messages"]) < 4
                                                          else "Thank you, verified."))

    async def scenario() -> None:
        async with world.keep() as keep:
            agent = Agent(name="kyc", instructions="Verify the customer.", model=world.model())
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.run(agent, "I want to open an account.")
            if how == "run":
                await session.run(agent, "536221234")
            else:
                streamed = session.run_streamed(agent, "536221234")
                async for _ in streamed.stream_events():
                    pass
            await session.run(agent, "Is that all?")  # the replay reads it with context
            stored = await (await session.conversation()).read_messages()
            assert stored[2].content == "536221234", "the record keeps the real text"

    with world.server:
        run(scenario())
    bodies = world.server.bodies()
    assert len(bodies) == 3 and asks in bodies[1]
    assert all("536221234" not in body and "536-22-1234" not in body for body in bodies)
    assert "SSN_1>" in bodies[1] and "SSN_1>" in bodies[2]


# -- item 6: input guardrails ------------------------------------------------------------


def guardrail_world(db_url: str) -> World:
    def answer(body: dict[str, Any]) -> Reply:
        system = body["messages"][0].get("content", "")
        if "Is the request on topic" in system:
            return Reply.ok("on topic")
        return AgentModel().openai(body)

    return World(db_url, responder=answer)


@pytest.mark.parametrize("where", ["agent", "run_config"])
def test_an_input_guardrail_calling_a_model_sends_no_raw_value(db_url: str,
                                                              where: str) -> None:
    world = guardrail_world(db_url)
    seen: list[Any] = []

    async def scenario() -> None:
        checker = Agent(name="topic check", instructions="Is the request on topic?",
                        model=world.model())

        @input_guardrail
        async def on_topic(ctx: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
            # The SDK's documented shape: the guardrail runs its own agent on the input.
            seen.append(input)
            result = await Runner.run(checker, input, context=ctx.context)
            return GuardrailFunctionOutput(output_info=result.final_output,
                                           tripwire_triggered="off topic" in
                                           result.final_output)

        agent = Agent(name="weather", instructions="Answer weather questions.",
                      model=world.model(),
                      input_guardrails=[on_topic] if where == "agent" else [])
        config = RunConfig(input_guardrails=[on_topic]) if where == "run_config" else None
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await session.run(agent, f"Mail {EMAIL} or call {PHONE}. Weather?",
                                       run_config=config)
            assert result.input_guardrail_results[0].output.output_info == "on topic"
            assert result.input_guardrail_results[0].guardrail.get_name() == "on_topic"

    with world.server:
        run(scenario())
    assert len(seen) == 1 and "<EMAIL_1>" in json.dumps(seen)
    assert any("Is the request on topic" in body for body in world.server.bodies())
    world.assert_nothing_raw_sent()


def test_a_tripped_guardrail_sent_nothing_raw(db_url: str) -> None:
    world = World(db_url, responder=lambda body: Reply.ok("off topic"))

    async def scenario() -> None:
        checker = Agent(name="topic check", instructions="Is the request on topic?",
                        model=world.model())

        @input_guardrail(run_in_parallel=False)
        async def on_topic(ctx: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
            await Runner.run(checker, input)
            return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

        agent = Agent(name="weather", instructions="Weather only.", model=world.model(),
                      input_guardrails=[on_topic])
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            with pytest.raises(InputGuardrailTripwireTriggered):
                await session.run(agent, f"Mail {EMAIL}, then write my essay.")

    with world.server:
        run(scenario())
    assert len(world.server.bodies()) == 1  # the guardrail's own call, and nothing else
    world.assert_nothing_raw_sent()


# -- item 10: the user's own values in what the app shows --------------------------------


def test_streamed_text_shows_the_users_values_a_split_placeholder_whole(db_url: str) -> None:
    answer = "Write to <EMAIL_1>!"  # streamed in three deltas: "Write t", "o <EMAI", "L_1>!"
    world = World(db_url, responder=lambda body: Reply.ok(answer))

    async def scenario() -> None:
        async with world.keep() as keep:
            agent = Agent(name="mail", instructions="Help.", model=world.model())
            session = await ChatkeepSession.open(keep, tenant=ORG)
            raw = session.run_streamed(agent, f"My address is {EMAIL}.", restore=False)
            raw_deltas = [e.data.delta async for e in raw.stream_events()
                          if e.type == "raw_response_event"
                          and e.data.type == "response.output_text.delta"]
            assert any(d.endswith("<EMAI") for d in raw_deltas), raw_deltas
            assert raw.final_output == answer
            shown = session.run_streamed(agent, "Again?")
            deltas = [text async for text in session.stream_text(shown)]
            assert "".join(deltas) == f"Write to {EMAIL}!"
            assert not any("<" in d for d in deltas), deltas
            assert shown.final_output == f"Write to {EMAIL}!"
            # The SDK's own loop over stream_events() gets the restored deltas too, the
            # held tail released before the event that ends the text.
            again = session.run_streamed(agent, "Once more?")
            events = [e async for e in again.stream_events() if e.type == "raw_response_event"]
            kinds = [e.data.type for e in events]
            last_delta = len(kinds) - 1 - kinds[::-1].index("response.output_text.delta")
            assert kinds.index("response.content_part.done") > last_delta
            text = "".join(e.data.delta for e in events
                           if e.data.type == "response.output_text.delta")
            assert text == f"Write to {EMAIL}!"
            # The run's items keep the placeholders the model wrote (and saw).
            assert "<EMAIL_1>" in json.dumps(again.to_input_list())

    with world.server:
        run(scenario())
    world.assert_nothing_raw_sent()


def test_a_structured_final_output_and_run_sync_are_restored(db_url: str) -> None:
    from pydantic import BaseModel

    class Contact(BaseModel):
        email: str
        note: str

    world = World(db_url, responder=lambda body: Reply.json(
        {"email": "<EMAIL_1>", "note": "call <PHONE_1>"}))

    async def scenario() -> ChatkeepSession:
        async with world.keep() as keep:
            agent = Agent(name="crm", instructions="Extract.", model=world.model(),
                          output_type=Contact)
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await session.run(agent, f"Reach me at {EMAIL} or {PHONE}.")
            assert result.final_output == Contact(email=EMAIL, note=f"call {PHONE}")
        return session

    with world.server:
        run(scenario())
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            keep = world.keep()
            session = loop.run_until_complete(ChatkeepSession.open(keep, tenant=ORG))
            world.server.responder = lambda body: Reply.ok("Noted <EMAIL_1>.")
            agent = Agent(name="crm", instructions="Note.", model=world.model())
            result = session.run_sync(agent, f"Mail {EMAIL}.")
            assert result.final_output == f"Noted {EMAIL}."
            loop.run_until_complete(keep.close())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    world.assert_nothing_raw_sent()


# -- item 11: streamed usage --------------------------------------------------------------


def test_a_streamed_run_bills_the_models_usage(db_url: str) -> None:
    world = World(db_url, responder=lambda body: Reply.ok("Sunny.", prompt_tokens=40,
                                                          completion_tokens=3))

    async def scenario() -> None:
        async with world.keep() as keep:
            agent = Agent(name="weather", instructions="Weather.", model=world.model())
            session = await ChatkeepSession.open(keep, tenant=ORG)
            streamed = session.run_streamed(agent, "Weather?", hooks=session.billing_hooks())
            async for _ in streamed.stream_events():
                pass
            (line,) = await keep.usage(ORG)
            assert (line.prompt_tokens, line.completion_tokens, line.model) == (40, 3, "gpt-x")

    with world.server:
        run(scenario())
    (request,) = world.server.requests
    assert request["stream_options"] == {"include_usage": True}


def test_a_streamed_run_without_usage_is_billed_estimated_and_marked(
        db_url: str, caplog: pytest.LogCaptureFixture) -> None:
    world = World(db_url, responder=lambda body: Reply.ok("Sunny in Paris today."))

    async def scenario() -> None:
        async with world.keep() as keep:
            agent = Agent(name="weather", instructions="Weather.", model=world.model())
            session = await ChatkeepSession.open(keep, tenant=ORG)
            config = RunConfig(model_settings=ModelSettings(include_usage=False))
            streamed = session.run_streamed(agent, "What is the weather in Paris?",
                                            run_config=config, hooks=session.billing_hooks())
            async for _ in streamed.stream_events():
                pass
            (line,) = await keep.usage(ORG)
            assert line.model == f"gpt-x{ESTIMATED}"
            core = await keep.core()
            assert line.completion_tokens >= core.counter.count("Sunny in Paris today.")
            assert line.prompt_tokens >= core.counter.count("What is the weather in Paris?")
            row = (await keep.sessions.get_unscoped((await session.conversation()).id)).row
            assert row.total_tokens == line.total_tokens

    with caplog.at_level(logging.WARNING, "chatkeep.integrations.openai_agents"), world.server:
        run(scenario())
    assert "estimated" in caplog.text
    (request,) = world.server.requests
    assert request["stream_options"] == {"include_usage": False}
