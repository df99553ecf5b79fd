"""Messages as chatkeep records them: one lossless internal model for every wire format.

A ``Message`` is immutable once stored: compression never edits or deletes one.
Tool plumbing is kept in full (assistant ``tool_calls`` with their ids, tool
results with ``tool_call_id``) so a conversation can be debugged weeks later.
Provider-native payloads that must go back unmodified (OpenAI Responses
``reasoning`` items, Anthropic ``thinking`` blocks with their signature) ride on
the message verbatim in ``native``, keyed by wire format name. Converting to and
from the providers' shapes lives in :mod:`chatkeep.formats`, one module per format.
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
        """The call in OpenAI Chat Completions' ``tool_calls`` format."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any] | Any) -> ToolCall:
        """Build from an OpenAI tool-call dict or SDK object."""
        if not isinstance(data, Mapping):
            data = as_dict(data, "a tool call")
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
    native: Mapping[str, Any] = field(default_factory=dict)
    """Provider payloads replayed verbatim to their own format (``{"anthropic_messages":
    {"thinking": [...]}}``); never summarized, never sent to another format."""
    retracted_at: datetime | None = None
    """When the message was retracted (``pop_item``, ``clear_session``): kept for the
    record, never replayed, summarized or distilled again."""

    @property
    def is_plumbing(self) -> bool:
        """Whether this message is tool plumbing: a tool result or an assistant tool call."""
        return self.role is Role.TOOL or bool(self.tool_calls)

    @property
    def replay_text(self) -> str | None:
        """The text this message contributes to a replay, or ``None`` if it never replays.

        This is what a *closed* turn contributes (and what the summarizer reads): user and
        assistant text only. Tool results and tool-call-only assistant messages are
        plumbing; an assistant message with both contributes its text alone. The open
        turn replays its plumbing in full (see :mod:`chatkeep.history.turns`).
        """
        if self.role not in (Role.USER, Role.ASSISTANT):
            return None
        if self.content is None or not self.content.strip():
            return None
        return self.content

    def carrying(self, content: str | None, tool_calls: tuple[ToolCall, ...],
                 native: Mapping[str, Any]) -> Message:
        """This message with other text, calls and native payloads (its outgoing form):
        ``dataclasses.replace`` with these three, built directly (``replace`` costs more
        than the rest of planning a replayed message, and runs for each one every turn)."""
        return Message(self.session_id, self.seq, self.role, content, tool_calls,
                       self.tool_call_id, self.name, self.tokens, self.created_at,
                       self.metadata, native, self.retracted_at)

    def to_openai(self) -> dict[str, Any]:
        """The message in full OpenAI Chat Completions form, tool plumbing included (export)."""
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
    """What an assistant response amounts to, whatever the provider: text, calls, usage,
    and the provider-native payloads (reasoning, thinking) to store verbatim."""

    content: str | None
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    model: str | None
    native: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MessageDraft:
    """A message to append, before the database gives it a ``seq``.

    What every wire format's ``from_wire`` produces, and what a batch append takes.
    """

    role: Role
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    usage: Usage | None = None
    model: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    native: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_turn(cls, turn: AssistantTurn,
                  metadata: Mapping[str, Any] | None = None) -> MessageDraft:
        """The assistant message an ``AssistantTurn`` records."""
        return cls(Role.ASSISTANT, turn.content, turn.tool_calls, usage=turn.usage,
                   model=turn.model, metadata=dict(metadata or {}), native=dict(turn.native))


def as_dict(obj: Any, what: str = "a response") -> dict[str, Any]:
    """A provider SDK object (pydantic ``model_dump``) or mapping as a plain dict."""
    if isinstance(obj, Mapping):
        return dict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        result = dump(mode="json", exclude_none=True)
        if isinstance(result, dict):
            return result
    raise InvalidMessage(f"cannot read {what} of type {type(obj).__name__}")


def parse_tool_calls(raw: Sequence[Any] | None) -> tuple[ToolCall, ...]:
    """Accept ``ToolCall`` objects or OpenAI-format dicts."""
    if not raw:
        return ()
    return tuple(c if isinstance(c, ToolCall) else ToolCall.from_openai(c) for c in raw)
