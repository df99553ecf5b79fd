"""A Pydantic AI agent whose conversations live in chatkeep: offline, runnable as it is.

``python examples/pydantic_ai_chat.py`` runs three turns of a weather agent with a tool,
each the way a web handler runs one: load the conversation, run the agent, save the
result; then a fourth, streamed (``run_stream``), as a chat UI shows it.
``ChatkeepConversationStore`` keeps the conversation (per tenant, usage billed);
``ChatkeepHistory`` sends the model chatkeep's budgeted history, redacted, and gives the
user back their own values in the output and in every streamed delta (the model wrote
``<EMAIL_1>``). The model is Pydantic AI's ``FunctionModel`` so the example needs no API
key: put ``"openai:gpt-4o"`` (or any model) in its place and nothing else changes.

The database is ``$CHATKEEP_EXAMPLE_DB`` (a SQLite file in a temporary directory when unset).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from chatkeep import Ref
from chatkeep.aio import AsyncChatkeep
from chatkeep.integrations.pydantic_ai import (
    ChatkeepConversationStore,
    ChatkeepHistory,
    PreparedRequest,
)

ORG = Ref("organization", 7)
WEATHER = {"Paris": "18C and sunny", "Rome": "24C and clear", "Oslo": "2C and snowing"}


def offline_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for an LLM: calls the tool for each city asked about, then answers."""
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    results = [part for part in last.parts if isinstance(part, ToolReturnPart)]
    if results:
        return ModelResponse(parts=[TextPart("; ".join(str(r.content) for r in results))])
    prompt = " ".join(part.content for part in last.parts
                      if isinstance(part, UserPromptPart) and isinstance(part.content, str))
    cities = [city for city in WEATHER if city in prompt]
    if cities:
        return ModelResponse(parts=[ToolCallPart("get_weather", {"city": city})
                                    for city in cities])
    return ModelResponse(parts=[TextPart("Noted. I will write to <EMAIL_1>.")])


async def offline_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    """The same model, streamed: its placeholder arrives split across two deltas."""
    for delta in ["I will ", "write to <EMA", "IL_1> as agreed."]:
        yield delta


def build_agent(store: ChatkeepConversationStore,
                sent: list[PreparedRequest]) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(
        FunctionModel(offline_model, stream_function=offline_stream),
        instructions="You answer weather questions with the get_weather tool.",
        capabilities=[ChatkeepHistory(store, on_request=sent.append)])

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        return WEATHER.get(city, "unknown")

    return agent


async def chat_turn(store: ChatkeepConversationStore, agent: Agent[None, str],
                    chat_id: str, prompt: str) -> tuple[str, list[ModelMessage]]:
    """What a request handler does for one message of a chat; returns the answer and
    the messages this run added (as saved). ``for_run`` loads the record and the newest
    messages only: ``ChatkeepHistory`` sends chatkeep's history in their place."""
    conversation = await store.for_run(chat_id)
    result = await agent.run(prompt, conversation=conversation)
    await store.save(result)
    return result.output, list(result.new_messages())


async def streamed_turn(store: ChatkeepConversationStore, agent: Agent[None, str],
                        chat_id: str, prompt: str) -> tuple[str, list[ModelMessage]]:
    """One message of a chat answered as a stream: each delta as the user sees it (their
    own values, a placeholder split across deltas whole), saved once it has finished."""
    shown: list[str] = []
    async with agent.run_stream(prompt, conversation=await store.for_run(chat_id)) as stream:
        async for delta in stream.stream_text(delta=True, debounce_by=None):
            shown.append(delta)  # a web handler sends each delta to the browser here
    await store.save(stream)
    return "".join(shown), list(stream.new_messages())


async def main(database: Path) -> None:
    keep = AsyncChatkeep(f"sqlite:///{database}", config={"privacy": {"anonymize_pii": True}})
    async with keep:
        store = ChatkeepConversationStore(keep, tenant=ORG, actor=Ref("user", 3))
        sent: list[PreparedRequest] = []
        agent = build_agent(store, sent)
        saved: list[ModelMessage] = []
        for prompt in ["My e-mail is ana.garcia@example.com, keep me posted.",
                       "What is the weather in Paris?",
                       "And in Rome and Oslo?"]:
            answer, added = await chat_turn(store, agent, "chat-42", prompt)
            saved += added
            print(f"user: {prompt}\nagent: {answer}")
        streamed, added = await streamed_turn(store, agent, "chat-42", "Remind me, please.")
        saved += added
        print(f"user: Remind me, please.\nagent (streamed): {streamed}")

        last = sent[-1]
        print(f"history: {last.tokens} of {last.budget} tokens, "
              f"{len(last.history)} messages from chatkeep")
        print("model saw:")
        for message in last.messages:
            for part in message.parts:
                text = getattr(part, "content", None) or getattr(part, "args", None)
                print(f"  {message.kind} {part.part_kind}: {text}")

        conversation = await store.load("chat-42")
        assert conversation is not None
        session = await keep.sessions.by_key("chat-42", ORG)
        stored = await session.read_messages()
        print("reloaded exactly:", conversation.messages == saved)
        print(f"stored: {len(stored)} chatkeep messages, {session.total_tokens} tokens billed")
        for line in await keep.usage(ORG):
            print(f"ledger: {line.purpose} {line.model}: {line.prompt_tokens} in, "
                  f"{line.completion_tokens} out, {line.calls} calls")


if __name__ == "__main__":
    configured = os.environ.get("CHATKEEP_EXAMPLE_DB")
    if configured:
        asyncio.run(main(Path(configured)))
    else:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(main(Path(directory) / "chat.db"))
