"""Each model request of a framework run that chatkeep is in the path of is a ``chat
{model}`` span with the GenAI attributes, the usage the response reported and the
session's tenant (issue 34: "the framework runs' model calls where chatkeep is in the
path"); with privacy on, no span attribute holds a raw value."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, function_tool
from otel_helpers import Telemetry

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.openai_agents import ChatkeepSession
from chatkeep.testing import FakeOpenAIServer, Reply

ORG = Ref("organization", 341)
EMAIL = "ana.garcia@example.com"


@function_tool
def lookup(customer: str) -> str:
    """The customer's contact record."""
    return json.dumps({"customer": customer, "email": EMAIL})


def asker(body: dict[str, Any]) -> Reply:
    """Calls ``lookup`` once, then answers."""
    items = body.get("messages") or body.get("input") or []
    last = items[-1] if items else {}
    if last.get("role") == "tool" or last.get("type") == "function_call_output":
        return Reply.ok("Found the record.")
    return Reply.calls(("call_1", "lookup", '{"customer": "c-17"}'))


# (the fake server streams Chat Completions only)
@pytest.mark.parametrize(("wire", "how"), [("chat", "run"), ("chat", "run_streamed"),
                                           ("responses", "run")])
def test_every_request_of_an_agents_sdk_run_is_a_chat_span(db_url: str, telemetry: Telemetry,
                                                           wire: str, how: str) -> None:
    server = FakeOpenAIServer(responder=asker)

    async def scenario() -> str:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        kind: Any = OpenAIChatCompletionsModel if wire == "chat" else OpenAIResponsesModel
        agent = Agent(name="support", instructions="Look customers up.", tools=[lookup],
                      model=kind(model="gpt-span", openai_client=client))
        async with AsyncChatkeep(db_url, model=client,
                                 config={"privacy": {"anonymize_pii": True}}) as keep:
            session = await ChatkeepSession.open(keep, tenant=ORG)
            if how == "run":
                await session.run(agent, f"Find c-17, I am {EMAIL}.")
            else:
                streamed = session.run_streamed(agent, f"Find c-17, I am {EMAIL}.")
                async for _ in streamed.stream_events():
                    pass
            return (await session.conversation()).id

    with server:
        session_id = asyncio.run(scenario())
    spans = telemetry.named("chat gpt-span")
    assert len(spans) == 2 == len(server.requests), [s.name for s in telemetry.spans()]
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in spans) > 0
    for span in spans:
        attrs = dict(span.attributes)
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "openai"
        assert attrs["chatkeep.framework"] == "openai_agents"
        assert attrs["chatkeep.tenant"] == "organization:341"
        assert attrs["gen_ai.conversation.id"] == session_id
        assert attrs["gen_ai.usage.input_tokens"] > 0
        assert attrs["gen_ai.usage.output_tokens"] >= 0
        assert EMAIL not in repr(attrs) and "ana.garcia" not in repr(attrs)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_every_model_call_of_a_langchain_agent_is_a_chat_span(db_url: str,
                                                              telemetry: Telemetry,
                                                              mode: str) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integrations"))
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_wire import WireChatModel

    from chatkeep import Chatkeep
    from chatkeep.integrations.langchain import ChatkeepMiddleware

    @tool
    def order_status(order: str) -> str:
        """The status of an order."""
        return f"order {order}: shipped to {EMAIL}"

    def answer(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["role"] == "tool":
            return Reply.ok("It shipped.", prompt_tokens=60, completion_tokens=7)
        return Reply.calls(("call_1", "order_status", '{"order": "A7"}'),
                           prompt_tokens=40, completion_tokens=5)

    server = FakeOpenAIServer(responder=answer)
    config = {"privacy": {"anonymize_pii": True}}
    inputs = {"messages": [{"role": "user", "content": f"Where is A7? I am {EMAIL}."}]}
    run_config: Any = {"configurable": {"thread_id": "t-1"}}
    with server:
        model = WireChatModel(base_url=server.base_url, max_tokens=64)
        if mode == "sync":
            with Chatkeep(db_url, config=config, dispatcher="inline") as keep:
                agent: Any = create_agent(model, [order_status],
                                          middleware=[ChatkeepMiddleware(keep)])
                agent.invoke(inputs, run_config, context={"tenant": ORG})
        else:
            async def scenario() -> None:
                async with AsyncChatkeep(db_url, config=config, dispatcher="inline") as akeep:
                    agent = create_agent(model, [order_status],
                                         middleware=[ChatkeepMiddleware(akeep)])
                    await agent.ainvoke(inputs, run_config, context={"tenant": ORG})

            asyncio.run(scenario())
    spans = [s for s in telemetry.spans() if s.name.startswith("chat ")
             and s.attributes.get("chatkeep.framework") == "langchain"]
    assert len(spans) == 2 == len(server.requests)
    assert [(s.attributes["gen_ai.usage.input_tokens"], s.attributes["gen_ai.usage.output_tokens"])
            for s in spans] == [(40, 5), (60, 7)]
    for span in spans:
        attrs = dict(span.attributes)
        assert attrs["chatkeep.tenant"] == "organization:341"
        assert attrs["gen_ai.request.max_tokens"] == 64
        assert EMAIL not in repr(attrs) and "ana.garcia" not in repr(attrs)
