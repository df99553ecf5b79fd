"""Messages as chatkeep records them, and converters from provider responses.

A ``Message`` is immutable once stored: compression never edits or deletes one.
Tool plumbing is kept in full (assistant ``tool_calls`` with their ids, tool
results with ``tool_call_id``) so a conversation can be debugged weeks later.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from chatkeep.errors import InvalidMessage


class Role(StrEnum):
    """Who a message is from, in OpenAI chat terms."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"

    @classmethod
    def parse(cls, value: object) -> Role:
        """Accept a ``Role`` or its string value; anything else is ``InvalidMessage``."""
        if isinstance(value, Role):
            return value
        try:
            return cls(str(value))
        except ValueError:
            allowed = ", ".join(r.value for r in cls)
            raise InvalidMessage(f"unknown role {value!r} (expected one of: {allowed})") from None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call requested by the assistant; ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMessage("a tool call needs a non-empty id")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidMessage(f"tool call {self.id!r} needs a non-empty function name")
        if not isinstance(self.arguments, str):
            raise InvalidMessage(f"tool call {self.id!r}: arguments must be a JSON string")

    def to_openai(self) -> dict[str, Any]:
        """The call in OpenAI's ``tool_calls`` format."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any] | Any) -> ToolCall:
        """Build from an OpenAI tool-call dict or SDK object."""
        if not isinstance(data, Mapping):
            data = _as_dict(data)
        function = data.get("function") or {}
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments)
        return cls(id=str(data.get("id") or ""), name=str(function.get("name") or ""),
                   arguments=arguments)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by a model call."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message. ``seq`` is gapless per session and assigned by the database."""

    session_id: str
    seq: int
    role: Role
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    tokens: int | None = None
    created_at: datetime | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def replay_text(self) -> str | None:
        """The text this message contributes to a replay, or ``None`` if it never replays.

        Only user and assistant text replays; tool results and tool-call-only
        assistant turns are plumbing, and an assistant turn with both replays its
        text alone, so the output never holds a dangling ``tool_calls``.
        """
        if self.role not in (Role.USER, Role.ASSISTANT):
            return None
        if self.content is None or not self.content.strip():
            return None
        return self.content

    def to_openai(self) -> dict[str, Any]:
        """The message in full OpenAI format, tool plumbing included (for export)."""
        out: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    """What an assistant response amounts to, whatever the provider: text, calls, usage."""

    content: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    model: str | None


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        result = dump()
        if isinstance(result, dict):
            return result
    raise InvalidMessage(f"cannot read a response of type {type(obj).__name__}")


def assistant_turn_from_response(response: Any) -> AssistantTurn:
    """Read an OpenAI ``ChatCompletion`` or an Anthropic ``Message`` (SDK object or dict)."""
    data = _as_dict(response)
    if "choices" in data:
        return _from_openai(data)
    if data.get("type") == "message" and isinstance(data.get("content"), list):
        return _from_anthropic(data)
    raise InvalidMessage("response is neither an OpenAI chat completion nor an Anthropic message")


def _from_openai(data: Mapping[str, Any]) -> AssistantTurn:
    choices = data.get("choices") or []
    if not choices:
        raise InvalidMessage("chat completion has no choices")
    message = choices[0].get("message") or {}
    calls = tuple(ToolCall.from_openai(c) for c in (message.get("tool_calls") or []))
    usage_data = data.get("usage") or None
    usage = None
    if usage_data:
        usage = Usage(int(usage_data.get("prompt_tokens") or 0),
                      int(usage_data.get("completion_tokens") or 0))
    return AssistantTurn(message.get("content"), calls, usage, data.get("model"))


def _from_anthropic(data: Mapping[str, Any]) -> AssistantTurn:
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in data.get("content") or []:
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            calls.append(ToolCall(str(block.get("id") or ""), str(block.get("name") or ""),
                                  json.dumps(block.get("input") or {})))
    usage_data = data.get("usage") or None
    usage = None
    if usage_data:
        usage = Usage(int(usage_data.get("input_tokens") or 0),
                      int(usage_data.get("output_tokens") or 0))
    return AssistantTurn("".join(texts) or None, tuple(calls), usage, data.get("model"))


def parse_tool_calls(raw: Sequence[Any] | None) -> tuple[ToolCall, ...]:
    """Accept ``ToolCall`` objects or OpenAI-format dicts."""
    if not raw:
        return ()
    return tuple(c if isinstance(c, ToolCall) else ToolCall.from_openai(c) for c in raw)
