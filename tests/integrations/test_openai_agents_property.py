"""Nothing raw leaves an Agents SDK run, by construction (issue 30): a property over runs.

Hypothesis puts the six value kinds of ``tests/privacy/egress_helpers.py`` (an e-mail, a
phone, an SSN, a card, an IBAN, and a name learnt from "my name is ...") in every part
an Agents SDK run has: the run's input, a tool's arguments (the model names the e-mail
by its placeholder; the tool receives the real address), tool returns (text, structured
with any key names, text beside an image and a file), an input guardrail running its own
agent, a handoff to another agent, an agent run as a tool (its own tool returning
values), a streamed run, a second run resuming the conversation from the session, and a
run interrupted for a tool's approval and resumed from its state. Each value is written
plain in the first input (where the vault learns it); its copies elsewhere are in any
surface form. Every byte the strict fake receives and every trace the SDK exports
(recorded, and as its exporter would POST it) must be free of raw and normalised forms.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    ToolOutputFileContent,
    ToolOutputImage,
    ToolOutputText,
    function_tool,
    handoff,
    input_guardrail,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.tracing.processors import default_processor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.testing import FakeOpenAIServer, Reply

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "privacy"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "observability"))
from egress_helpers import FORMS, KINDS, POOLS, assert_never_raw, written
from otel_helpers import EXPORTER  # chatkeep's OpenTelemetry spans, in memory
from test_openai_agents_edges import Recorder

ORG = Ref("organization", 1)
PROPERTY = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])
#: Key names a structured tool return may use (provider-signed names among them).
KEYS = ("email", "signature", "encrypted_content", "type", "role", "note", "text", "id")
Copy = tuple[str, str]  # (kind, form)


@dataclass
class Example:
    values: dict[str, str]
    lookup: list[Copy]
    lookup_shape: str  # "text" | "structured" (see FILES below)
    keys: list[str]
    expert: list[Copy]
    later: Copy
    model_api: str  # "chat" | "responses"
    how: str  # "run" | "run_streamed"


@st.composite
def examples(draw: st.DrawFn) -> Example:
    copies = st.lists(st.tuples(st.sampled_from(KINDS), st.sampled_from(FORMS)),
                      min_size=1, max_size=4)
    how = draw(st.sampled_from(["run", "run_streamed"]))
    return Example(
        values={kind: draw(st.sampled_from(POOLS[kind])) for kind in KINDS},
        lookup=draw(copies), lookup_shape=draw(st.sampled_from(["text", "structured", FILES])),
        keys=draw(st.lists(st.sampled_from(KEYS), min_size=4, max_size=4)),
        expert=draw(copies), later=draw(st.tuples(st.sampled_from(KINDS),
                                                  st.sampled_from(FORMS))),
        # The fake streams Chat Completions only.
        model_api="chat" if how == "run_streamed" else draw(st.sampled_from(["chat",
                                                                              "responses"])),
        how=how)


def forms_of(example: Example, copies: list[Copy]) -> list[str]:
    return [written(example.values[kind], form) for kind, form in copies]


def lookup_return(example: Example) -> Any:
    """The ``lookup`` tool's return in the drawn shape."""
    texts = forms_of(example, example.lookup)
    if example.lookup_shape == "text":
        return "Record: " + "; ".join(texts)
    if example.lookup_shape == "structured":
        record: dict[str, Any] = {"status": "found"}
        for i, text in enumerate(texts):
            record[example.keys[i % len(example.keys)] + (str(i) if i >= 4 else "")] = text
        record["nested"] = [{"type": "text", "text": texts[0]}, {texts[-1]: "as a key"}]
        return record
    return [ToolOutputText(text="Scanned: " + " / ".join(texts)),
            ToolOutputImage(image_url=f"https://files.example/scan.png?who={texts[0]}"),
            ToolOutputFileContent(file_data=SCAN_PDF, filename="scan.pdf")]


#: A tool return with an image and a file beside its text (``ToolOutputImage``,
#: ``ToolOutputFileContent``): recorded whole, replayed to the model with the parts as
#: they were, every string in them through the egress.
FILES = "files"
SCAN_PDF = "JVBERi0xLjQgc2Nhbg=="  # base64 of a tiny PDF header


# -- the scripted models ------------------------------------------------------------------


def _conversation(body: dict[str, Any]) -> tuple[str, list[Any]]:
    """(the agent's instructions, the items after the newest user message)."""
    if "messages" in body:
        messages = body["messages"]
        system = messages[0].get("content", "") if messages[0].get("role") == "system" else ""
        items = messages
    else:
        system, items = body.get("instructions") or "", body.get("input") or []
    last_user = max((i for i, m in enumerate(items)
                     if isinstance(m, dict) and m.get("role") == "user"), default=-1)
    return str(system), items[last_user + 1:]


def _outputs(items: list[Any]) -> list[str]:
    """The tool outputs among ``items``, as text."""
    found = []
    for item in items:
        if item.get("role") == "tool" or item.get("type") == "function_call_output":
            content = item.get("content", item.get("output"))
            found.append(content if isinstance(content, str) else json.dumps(content))
    return found


def responder(body: dict[str, Any]) -> Reply:
    """Each agent's scripted behaviour, chosen by its instructions: the triage agent looks
    the customer up, asks the expert (an agent as a tool), then hands off to the closer;
    the expert reads a file with its own tool; answers quote what the model was shown."""
    system, since = _conversation(body)
    outputs = _outputs(since)
    step = len(outputs)
    if "Is the request on topic" in system:
        return Reply.ok("on topic")
    if "You triage" in system:
        # The lookup names the customer's e-mail by the placeholder the model was shown:
        # the tool receives the real address (restored), which stays off the wire.
        shown = re.findall(r"<EMAIL_\d+>", json.dumps(body))
        lookup = json.dumps({"customer": "c-17", "contact": shown[0] if shown else "none"})
        plan = [("lookup", lookup), ("ask_expert", '{"input": "check c-17"}'),
                ("transfer_to_closer", "{}")]
        if step < len(plan):
            name, args = plan[step]
            return Reply.calls((f"call_t{len(json.dumps(body))}", name, args))
        return Reply.ok("Handed over.")
    if "You are the expert" in system:
        if step == 0:
            return Reply.calls((f"call_e{len(json.dumps(body))}", "read_file", "{}"))
        return Reply.ok(f"Expert: {outputs[-1][:300]}")
    if "You file cases" in system:
        if step == 0:
            return Reply.calls((f"call_f{len(json.dumps(body))}", "file_case", "{}"))
        return Reply.ok(f"Filed: {outputs[-1][:300]}")
    if "You close" in system:
        return Reply.ok(f"All set. Seen: {(outputs[-1] if outputs else '')[:300]}")
    return Reply.ok("ok")


# -- the property -------------------------------------------------------------------------


@pytest.fixture
def recorder() -> Any:
    recording = Recorder()
    set_trace_processors([recording])
    set_tracing_disabled(False)
    try:
        yield recording
    finally:
        set_tracing_disabled(True)
        set_trace_processors([default_processor()])


@PROPERTY
@given(example=examples())
def test_no_raw_value_leaves_any_part_of_an_agents_sdk_run(
        tmp_path_factory: pytest.TempPathFactory, recorder: Recorder,
        example: Example) -> None:
    recorder.items.clear()
    recorder.exports.clear()
    EXPORTER.clear()
    values = example.values
    url = f"sqlite:///{tmp_path_factory.mktemp('agents_property') / 'chat.db'}"
    server = FakeOpenAIServer(responder=responder).start()
    guarded: list[Any] = []
    first = (f"My name is {values['name']}. Mail {values['email']} or call {values['phone']}; "
             f"SSN {values['ssn']}, card {values['card']}, IBAN {values['iban']}. "
             "Please sort out customer c-17.")
    second = f"Also ask about {written(values[example.later[0]], example.later[1])}, please."

    contacts: list[str] = []

    @function_tool
    def lookup(customer: str, contact: str) -> Any:
        """The customer's record."""
        contacts.append(contact)
        return lookup_return(example)

    @function_tool(needs_approval=True)
    def file_case() -> str:
        """File the case (a person approves it first)."""
        return "Filed for " + ", ".join(forms_of(example, example.expert[::-1]))

    @function_tool
    def read_file() -> str:
        """The customer's file."""
        return "File: " + ", ".join(forms_of(example, example.expert))

    async def scenario() -> None:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        kind: Any = (OpenAIChatCompletionsModel if example.model_api == "chat"
                     else OpenAIResponsesModel)
        model = kind(model="gpt-x", openai_client=client)
        checker = Agent(name="topic check", instructions="Is the request on topic?",
                        model=model)

        @input_guardrail
        async def on_topic(ctx: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
            guarded.append(input)
            result = await Runner.run(checker, input, context=ctx.context)
            return GuardrailFunctionOutput(output_info=result.final_output,
                                           tripwire_triggered=False)

        expert = Agent(name="expert", instructions="You are the expert.", tools=[read_file],
                       model=model)
        closer = Agent(name="closer", instructions="You close the case.", model=model)
        triage = Agent(name="triage", instructions="You triage customer requests.",
                       model=model, input_guardrails=[on_topic], handoffs=[handoff(closer)],
                       tools=[lookup, expert.as_tool(tool_name="ask_expert",
                                                     tool_description="Ask the expert.")])
        async with AsyncChatkeep(url, model=client,
                                 config={"privacy": {"anonymize_pii": True}}) as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            for text in (first, second):
                result: Any
                if example.how == "run":
                    result = await session.run(triage, text)
                else:
                    streamed = session.run_streamed(triage, text)
                    async for _ in streamed.stream_events():
                        pass
                    result = streamed
                assert result.last_agent.name == "closer"
            # A run interrupted for approval, resumed from its state.
            clerk = Agent(name="clerk", instructions="You file cases.", tools=[file_case],
                          model=model)
            paused = await session.run(clerk, "File the case for c-17.")
            state = paused.to_state()
            for interruption in paused.interruptions:
                state.approve(interruption)
            if example.how == "run":
                resumed: Any = await session.run(clerk, state)
            else:
                resumed = session.run_streamed(clerk, state)
                async for _ in resumed.stream_events():
                    pass
            assert str(resumed.final_output).startswith("Filed: ")

    try:
        asyncio.run(scenario())
        bodies = server.bodies()
        rejected = list(server.rejected)
    finally:
        server.stop()
    agents_called = "".join(bodies)
    assert all(f"You {what}" in agents_called for what in (
        "triage", "are the expert", "close", "file cases")), "every part ran"
    assert "Is the request on topic" in agents_called and len(guarded) == 2
    assert contacts == [values["email"]] * 2, "the tool got the real address, both runs"
    assert rejected == []
    assert_never_raw([(f"request {i}", b) for i, b in enumerate(bodies)], values)
    assert_never_raw([(f"trace export {i}", e) for i, e in enumerate(recorder.exports)],
                     values)
    kinds = {json.loads(e).get("span_data", {}).get("type") for e in recorder.exports}
    assert {"agent", "function", "handoff", "guardrail"} <= kinds, kinds
    spans = EXPORTER.get_finished_spans()  # chatkeep's own: the rounds, each model request
    assert any(dict(span.attributes or {}).get("chatkeep.framework") == "openai_agents"
               for span in spans)
    assert_never_raw([(f"otel span {span.name}", json.dumps(dict(span.attributes or {}),
                                                            default=str)) for span in spans],
                     values)
    assert any("<EMAIL_1>" in b for b in bodies)
