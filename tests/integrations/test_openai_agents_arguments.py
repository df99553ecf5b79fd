"""Function tools of an Agents SDK run on a redacting session receive the user's own values
(issue 30, "values back for the user"): the model writes ``send_mail(to="<EMAIL_1>")``,
the tool gets the real address, and nothing it returns reaches the provider raw. The SDK's
own OpenAI models against the strict local fake; every byte the fake receives is checked.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Coroutine
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunContextWrapper,
    function_tool,
    handoff,
    input_guardrail,
    set_tracing_disabled,
)
from agents.tool_context import ToolContext
from pydantic import BaseModel

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.testing import FakeOpenAIServer, Reply

set_tracing_disabled(True)
ORG = Ref("organization", 1)
EMAIL, PHONE = "ana.garcia@example.com", "+44 7911 123456"
RAW = [EMAIL, "ana.garcia", "7911 123456", "7911123456"]
ASK = f"I am Ana: mail {EMAIL} and text {PHONE} that the parcel is late."
PLACEHOLDER = re.compile(r"<[A-Z_]+_\d+>")


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def _items(body: dict[str, Any]) -> list[Any]:
    return list(body.get("messages") or body.get("input") or [])


def _outputs(body: dict[str, Any]) -> list[str]:
    found = []
    for item in _items(body):
        if item.get("role") == "tool" or item.get("type") == "function_call_output":
            content = item.get("content", item.get("output"))
            found.append(content if isinstance(content, str) else json.dumps(content))
    return found


def _placeholders(body: dict[str, Any]) -> list[str]:
    """The placeholders the model was shown in the user's messages, in order."""
    users = [item for item in _items(body) if item.get("role") == "user"]
    return PLACEHOLDER.findall(json.dumps(users[-1]["content"])) if users else []


def mailer(body: dict[str, Any]) -> Reply:
    """Calls ``send_mail`` with the placeholders it was shown, then quotes the tool's
    output (Chat Completions and Responses bodies alike)."""
    outputs = _outputs(body)
    if outputs:
        return Reply.ok(f"Done: {outputs[-1]}")
    email, phone = _placeholders(body)[:2]
    return Reply.calls(("call_1", "send_mail", json.dumps({"to": email, "sms": phone,
                                                           "note": f"late for {email}"})))


class World:
    def __init__(self, db_url: str, responder: Any, *, redact: bool = True) -> None:
        self.db_url = db_url
        self.config = {"privacy": {"anonymize_pii": redact}}
        self.server = FakeOpenAIServer(responder=responder)
        self.received: list[dict[str, Any]] = []

    def client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.server.base_url, api_key="k", max_retries=0)

    def keep(self) -> AsyncChatkeep:
        return AsyncChatkeep(self.db_url, model=self.client(), config=self.config)

    def model(self, api: str = "chat") -> Any:
        kind: Any = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
        return kind(model="gpt-x", openai_client=self.client())

    def agent(self, api: str = "chat") -> Agent[Any]:
        received = self.received

        @function_tool
        def send_mail(to: str, sms: str, note: str) -> str:
            """Send the customer a mail and a text message."""
            received.append({"to": to, "sms": sms, "note": note})
            return f"mailed {to}, texted {sms}"

        return Agent(name="mailer", instructions="Notify customers.", tools=[send_mail],
                     model=self.model(api))

    def assert_nothing_raw_sent(self) -> None:
        bodies = self.server.bodies()
        assert bodies and self.server.rejected == []
        for body in bodies:
            assert all(raw not in body for raw in RAW), body[:800]


async def _run(session: ChatkeepSession, agent: Agent[Any], text: str, how: str,
               **kwargs: Any) -> Any:
    if how == "run":
        return await session.run(agent, text, **kwargs)
    streamed = session.run_streamed(agent, text, **kwargs)
    async for _ in streamed.stream_events():
        pass
    return streamed


@pytest.mark.parametrize(("model_api", "how"), [("chat", "run"), ("responses", "run"),
                                                ("chat", "run_streamed")])
def test_a_function_tool_receives_the_users_values(db_url: str, model_api: str,
                                                   how: str) -> None:
    world = World(db_url, mailer)

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await _run(session, world.agent(model_api), ASK, how)
            assert result.final_output == f"Done: mailed {EMAIL}, texted {PHONE}"
            # The run's items keep what the model wrote (and saw).
            calls = [i for i in result.to_input_list() if i.get("type") == "function_call"]
            assert "<EMAIL_1>" in calls[0]["arguments"]

    with world.server:
        run(scenario())
    assert world.received == [{"to": EMAIL, "sms": PHONE, "note": f"late for {EMAIL}"}]
    assert "<EMAIL_1>" in world.server.bodies()[1]  # the tool's output, scrubbed
    world.assert_nothing_raw_sent()


def test_run_sync_tools_receive_the_users_values(db_url: str) -> None:
    world = World(db_url, mailer)
    with world.server:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            keep = world.keep()
            session = loop.run_until_complete(ChatkeepSession.open(keep, tenant=ORG))
            result = session.run_sync(world.agent(), ASK)
            assert result.final_output == f"Done: mailed {EMAIL}, texted {PHONE}"
            loop.run_until_complete(keep.close())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    assert world.received[0]["to"] == EMAIL and world.received[0]["sms"] == PHONE
    world.assert_nothing_raw_sent()


def test_restore_arguments_false_hands_tools_the_placeholders(db_url: str) -> None:
    world = World(db_url, mailer)

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await session.run(world.agent(), ASK, restore_arguments=False)
            assert result.final_output == f"Done: mailed {EMAIL}, texted {PHONE}"  # restore

    with world.server:
        run(scenario())
    assert world.received == [{"to": "<EMAIL_1>", "sms": "<PHONE_1>",
                               "note": "late for <EMAIL_1>"}]
    world.assert_nothing_raw_sent()


def test_a_session_that_does_not_redact_hands_arguments_as_written(db_url: str) -> None:
    world = World(db_url, lambda body: Reply.calls(
        ("call_1", "send_mail", json.dumps({"to": "<EMAIL_1>", "sms": "s", "note": "n"})))
        if not _outputs(body) else Reply.ok("ok"), redact=False)

    async def scenario() -> None:
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG, anonymize_pii=False)
            await session.run(world.agent(), "Mail <EMAIL_1>, literally.")

    with world.server:
        run(scenario())
    assert world.received == [{"to": "<EMAIL_1>", "sms": "s", "note": "n"}]


@pytest.mark.parametrize("restore_arguments", [True, False])
def test_a_tool_gets_the_context_its_invoker_declares(db_url: str,
                                                      restore_arguments: bool) -> None:
    """The SDK passes a tool's invoker the context its signature declares (its full
    ToolContext, or the plain run context): the same through chatkeep's restoring wrapper
    as without it."""
    world = World(db_url, lambda body: Reply.calls(
        ("call_1", "full", json.dumps({"to": _placeholders(body)[0]})),
        ("call_2", "plain", json.dumps({"to": _placeholders(body)[0]})))
        if not _outputs(body) else Reply.ok("ok"))
    seen: list[Any] = []

    async def full_invoker(ctx: ToolContext[Any], arguments: str) -> str:
        seen.append(("full", type(ctx).__name__, json.loads(arguments)["to"]))
        return "ok"

    async def plain_invoker(ctx: RunContextWrapper[Any], arguments: str) -> str:
        seen.append(("plain", type(ctx).__name__, json.loads(arguments)["to"]))
        return "ok"

    schema = {"type": "object", "properties": {"to": {"type": "string"}}, "required": ["to"],
              "additionalProperties": False}
    tools = [FunctionTool(name=name, description=name, params_json_schema=schema,
                          on_invoke_tool=invoker)
             for name, invoker in (("full", full_invoker), ("plain", plain_invoker))]

    async def scenario() -> None:
        async with world.keep() as keep:
            agent = Agent(name="ctx", instructions="Use the tools.", tools=list(tools),
                          model=world.model())
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.run(agent, f"Mail {EMAIL}.", restore_arguments=restore_arguments)

    with world.server:
        run(scenario())
    to = EMAIL if restore_arguments else "<EMAIL_1>"
    assert sorted(seen) == [("full", "ToolContext", to), ("plain", "RunContextWrapper", to)]
    world.assert_nothing_raw_sent()


class Escalation(BaseModel):
    reason: str
    contact: str


def test_a_handoffs_arguments_are_restored_and_the_callers_agents_untouched(
        db_url: str) -> None:
    def answer(body: dict[str, Any]) -> Reply:
        system = json.dumps(_items(body)[:1])
        if "You triage" in system and not _outputs(body):
            contact = _placeholders(body)[0]
            return Reply.calls(("call_h", "transfer_to_closer",
                                json.dumps({"reason": f"write {contact}",
                                            "contact": contact})))
        if "You close" in system and not any("mailed" in o for o in _outputs(body)):
            return Reply.calls(("call_c", "send_mail", json.dumps(
                {"to": _placeholders(body)[0], "sms": "-", "note": "closing"})))
        return Reply.ok("Closed.")

    world = World(db_url, answer)
    escalations: list[Escalation] = []

    async def on_handoff(ctx: RunContextWrapper[Any], data: Escalation) -> None:
        escalations.append(data)

    async def scenario() -> None:
        closer = world.agent()
        closer.name, closer.instructions = "closer", "You close cases."
        triage = Agent(name="triage", instructions="You triage.", model=world.model(),
                       handoffs=[handoff(closer, on_handoff=on_handoff,
                                         input_type=Escalation)])
        def parts() -> list[Any]:
            return [triage.model, triage.handoffs[0].on_invoke_handoff,  # type: ignore[union-attr]
                    closer.model, closer.tools[0].on_invoke_tool, *closer.tools]  # type: ignore[union-attr]

        before = parts()
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            result = await session.run(triage, ASK)
            assert result.last_agent.name == "closer" and result.final_output == "Closed."
            assert result.last_agent is not closer  # the run's clone
        # The caller's agents are never changed.
        assert all(now is then for now, then in zip(parts(), before, strict=True))

    with world.server:
        run(scenario())
    assert escalations == [Escalation(reason=f"write {EMAIL}", contact=EMAIL)]
    assert world.received == [{"to": EMAIL, "sms": "-", "note": "closing"}]
    world.assert_nothing_raw_sent()


def test_an_agent_run_as_a_tool_reads_placeholders(db_url: str) -> None:
    """An agent run as a tool is a model: its input (and its input guardrails, which the
    SDK runs before any filter) keep the placeholders the calling model wrote."""
    def answer(body: dict[str, Any]) -> Reply:
        system = json.dumps(_items(body)[:1])
        if "You triage" in system and not _outputs(body):
            return Reply.calls(("call_x", "ask_expert", json.dumps(
                {"input": f"check {_placeholders(body)[0]}"})))
        if "Is it on topic" in system:
            return Reply.ok("on topic")
        return Reply.ok(f"answered: {_outputs(body)[-1] if _outputs(body) else 'ok'}")

    world = World(db_url, answer)
    guarded: list[Any] = []

    async def scenario() -> None:
        checker = Agent(name="check", instructions="Is it on topic?", model=world.model())

        @input_guardrail
        async def on_topic(ctx: Any, agent: Any, input: Any) -> GuardrailFunctionOutput:
            guarded.append(input)
            from agents import Runner

            result = await Runner.run(checker, input)
            return GuardrailFunctionOutput(output_info=result.final_output,
                                           tripwire_triggered=False)

        expert = Agent(name="expert", instructions="You are the expert.",
                       model=world.model(), input_guardrails=[on_topic])
        triage = Agent(name="triage", instructions="You triage.", model=world.model(),
                       tools=[expert.as_tool(tool_name="ask_expert",
                                             tool_description="Ask the expert.")])
        async with world.keep() as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            await session.run(triage, ASK)

    with world.server:
        run(scenario())
    assert guarded == ["check <EMAIL_1>"]
    world.assert_nothing_raw_sent()
