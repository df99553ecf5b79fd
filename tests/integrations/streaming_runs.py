"""The streaming APIs of Pydantic AI, driven as an application drives them (shared by the
Pydantic AI tests)."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, AgentRunResultEvent
from pydantic_ai.messages import PartDeltaEvent, PartStartEvent, TextPart, TextPartDelta

from chatkeep.integrations.pydantic_ai import ChatkeepConversationStore
from chatkeep.integrations.pydantic_ai.store import settled


async def streamed_turn(mode: str, agent: Agent[Any, Any], store: ChatkeepConversationStore,
                        key: str, prompt: str,
                        shown: list[str] | None = None) -> tuple[Any, str]:
    """One turn of conversation ``key`` through ``mode``; the object to save and the text
    the app was shown as it streamed (each piece appended to ``shown``, if given)."""
    conversation = await store.for_run(key)
    shown = [] if shown is None else shown
    if mode == "run_stream":
        async with agent.run_stream(prompt, conversation=conversation) as stream:
            async for delta in stream.stream_text(delta=True, debounce_by=None):
                shown.append(delta)
        return stream, "".join(shown)
    if mode == "iter":
        async with agent.iter(prompt, conversation=conversation) as agent_run:
            async for node in agent_run:
                if Agent.is_model_request_node(node):
                    async with node.stream(agent_run.ctx) as events:
                        async for event in events:
                            if text := _text_of(event):
                                shown.append(text)
        return agent_run, "".join(shown)
    final: AgentRunResultEvent[Any] | None = None
    async with agent.run_stream_events(prompt, conversation=conversation) as stream_events:
        async for item in stream_events:
            if isinstance(item, AgentRunResultEvent):
                final = item
            else:
                if text := _text_of(item):
                    shown.append(text)
    assert final is not None
    return final, "".join(shown)


def _text_of(event: Any) -> str:
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        return event.part.content
    if isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        return event.delta.content_delta
    return ""


def store_result(saved: Any) -> Any:
    """The ``AgentRunResult`` a streaming API's object settles to."""
    return settled(saved)
