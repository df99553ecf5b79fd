"""The agent loop every application writes, through chatkeep, in each wire format.

Each function answers one user question: it records the question, asks the model with
the budgeted history, records the answer (tool calls included), runs the tools, records
their results, and asks again until the model answers in text. These are the README's
worked loops; the test suite runs them against strict local fakes of each API, and
``mypy --strict`` checks them, so the types users see are the types that work.

It needs the Anthropic SDK as well as OpenAI's: ``pip install "chatkeep[anthropic]"``.
Run it (``python examples/agent_loop.py [DATABASE_URL]``) and it asks one question through
each API, offline, against chatkeep's fakes of the hosted APIs (:mod:`chatkeep.testing`),
printing each answer; run it again and the conversation continues where it stopped.
"""

from __future__ import annotations

import json
import sys
import uuid

import anthropic
import openai
from anthropic.types import ToolParam
from openai.types.chat import ChatCompletionToolParam
from openai.types.responses import FunctionToolParam

from chatkeep import Chatkeep, ChatSession, Ref
from chatkeep.testing import AgentModel, FakeAnthropicServer, FakeOpenAIServer

SYSTEM = "You are a weather assistant. Use get_weather for every city asked about."
WEATHER = {"Paris": "18C and sunny", "Rome": "24C and clear", "Oslo": "2C and snowing"}
CITY_SCHEMA: dict[str, object] = {"type": "object", "properties": {"city": {"type": "string"}},
                                   "required": ["city"]}

CHAT_TOOLS: list[ChatCompletionToolParam] = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": CITY_SCHEMA}}]
RESPONSES_TOOLS: list[FunctionToolParam] = [{
    "type": "function", "name": "get_weather", "description": "Current weather in a city.",
    "parameters": CITY_SCHEMA, "strict": False}]
ANTHROPIC_TOOLS: list[ToolParam] = [{
    "name": "get_weather", "description": "Current weather in a city.",
    "input_schema": CITY_SCHEMA}]


def get_weather(city: object) -> str:
    """The tool: a fixed table, so runs are reproducible."""
    return WEATHER.get(str(city), "unknown")


def chat_turn(keep: Chatkeep, session: ChatSession, client: openai.OpenAI, model: str,
              question: str) -> str:
    """One question through OpenAI Chat Completions."""
    session.add_user(question)
    while True:
        history = keep.compressor.build_history(session, SYSTEM)
        response = client.chat.completions.create(model=model, messages=history,
                                                  tools=CHAT_TOOLS)
        session.add_assistant_response(response)
        message = response.choices[0].message
        if not message.tool_calls:
            return message.content or ""
        for call in message.tool_calls:
            if call.type == "function":
                city = json.loads(call.function.arguments).get("city")
                session.add_tool_result(call.id, get_weather(city))


def responses_turn(keep: Chatkeep, session: ChatSession, client: openai.OpenAI, model: str,
                   question: str) -> str:
    """One question through OpenAI Responses, stateless (``store=False``): chatkeep keeps
    the conversation, reasoning items included."""
    session.add_user(question)
    while True:
        items = keep.compressor.build_history(session, SYSTEM, format="openai_responses")
        response = client.responses.create(model=model, input=items, tools=RESPONSES_TOOLS,
                                           store=False,
                                           include=["reasoning.encrypted_content"])
        session.add_assistant_response(response)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text
        for call in calls:
            city = json.loads(call.arguments).get("city")
            session.add_tool_result(call.call_id, get_weather(city))


def anthropic_turn(keep: Chatkeep, session: ChatSession, client: anthropic.Anthropic,
                   model: str, question: str, *, thinking: bool = False) -> str:
    """One question through Anthropic Messages (signed thinking blocks handed back)."""
    session.add_user(question)
    while True:
        history = keep.compressor.build_history(session, SYSTEM, format="anthropic_messages")
        message = client.messages.create(
            model=model, max_tokens=2048, system=history.system, messages=history,
            tools=ANTHROPIC_TOOLS,
            thinking={"type": "enabled", "budget_tokens": 1024} if thinking
            else {"type": "disabled"})
        session.add_assistant_response(message)
        uses = [block for block in message.content if block.type == "tool_use"]
        if not uses:
            return "".join(block.text for block in message.content if block.type == "text")
        for use in uses:
            session.add_tool_result(use.id, get_weather(use.input.get("city")))


def main(database_url: str = "sqlite:///agent_loop.db") -> None:
    """One question per API, each in its own conversation (reopened by its key), against
    the local fakes: what the loops above do with a real endpoint."""
    model = AgentModel(run=uuid.uuid4().hex[:8])  # a real model's call ids never repeat
    org = Ref("organization", "example")
    with FakeOpenAIServer(responder=model.openai) as fake_openai, \
            FakeAnthropicServer(responder=model.anthropic) as fake_anthropic, \
            Chatkeep(database_url) as keep:
        openai_client = openai.OpenAI(base_url=fake_openai.base_url, api_key="offline")
        anthropic_client = anthropic.Anthropic(base_url=fake_anthropic.origin,
                                               api_key="offline")
        asked = [("chat", "What is the weather in Paris?"),
                 ("responses", "And the weather in Rome and Oslo?"),
                 ("anthropic", "What is the weather in Oslo?")]
        for api, question in asked:
            session = keep.sessions.open(f"agent-loop-{api}", tenant=org)
            if api == "chat":
                answer = chat_turn(keep, session, openai_client, "gpt-4o-mini", question)
            elif api == "responses":
                answer = responses_turn(keep, session, openai_client, "gpt-4o-mini", question)
            else:
                answer = anthropic_turn(keep, session, anthropic_client, "claude-sonnet-4-5",
                                        question)
            print(f"[{api}] {question}\n  {answer}  ({session.message_count} messages stored)")


if __name__ == "__main__":
    main(*sys.argv[1:2])
