"""A LangChain chat model that talks Chat Completions over HTTP (the ``openai`` client) to
chatkeep's strict fake server, so a test sees every byte an agent's model calls send.

langchain-openai is not a dependency; this is the part of it the tests need: messages
out through ``convert_to_openai_messages``, tools as OpenAI function schemas, the answer
(text and tool calls, with the reply's usage as ``usage_metadata``) back as an
``AIMessage``, ``max_tokens`` sent when set, and ``stream=True`` as message chunks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import openai
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.messages.utils import convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

__all__ = ["WireChatModel"]


class WireChatModel(BaseChatModel):
    """Chat Completions over HTTP to ``base_url`` (a ``FakeOpenAIServer``)."""

    base_url: str
    tools: list[dict[str, Any]] = Field(default_factory=list)
    max_tokens: int | None = None
    """The output ceiling sent with each request (``max_tokens``), as ChatOpenAI's."""

    @property
    def _llm_type(self) -> str:
        return "chatkeep-test-wire"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> WireChatModel:
        return self.model_copy(update={"tools": [convert_to_openai_tool(t) for t in tools]})

    def _client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key="test", max_retries=0)

    def _body(self, messages: list[BaseMessage]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": "fake-model",
                                "messages": convert_to_openai_messages(messages)}
        if self.tools:
            body["tools"] = self.tools
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        reply = self._client().chat.completions.create(**self._body(messages))
        message = reply.choices[0].message
        calls = [{"name": c.function.name, "args": json.loads(c.function.arguments or "{}"),
                  "id": c.id, "type": "tool_call"}
                 for c in message.tool_calls or [] if c.type == "function"]
        usage = None if reply.usage is None else UsageMetadata(
            input_tokens=reply.usage.prompt_tokens,
            output_tokens=reply.usage.completion_tokens,
            total_tokens=reply.usage.total_tokens)
        return ChatResult(generations=[ChatGeneration(
            message=AIMessage(message.content or "", tool_calls=calls,
                              usage_metadata=usage))])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: Any = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        stream = self._client().chat.completions.create(**self._body(messages), stream=True)
        for event in stream:
            for choice in event.choices:
                delta = choice.delta
                chunks = [tool_call_chunk(name=c.function.name if c.function else None,
                                          args=c.function.arguments if c.function else None,
                                          id=c.id, index=c.index)
                          for c in delta.tool_calls or []]
                if delta.content or chunks:
                    chunk = ChatGenerationChunk(message=AIMessageChunk(
                        content=delta.content or "", tool_call_chunks=chunks))
                    if run_manager is not None:
                        run_manager.on_llm_new_token(delta.content or "", chunk=chunk)
                    yield chunk
