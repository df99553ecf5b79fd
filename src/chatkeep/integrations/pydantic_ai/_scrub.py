"""A model request's text, through one egress body. No I/O: the caller passes the scrub.

Every text a Pydantic AI request carries to the model (the instructions, and in each
message the system and user prompts, tool results and retry feedback, the model's text,
thinking and tool arguments, summaries, provider tools' arguments and results,
instruction records and deltas, speech transcripts) is
gathered into one JSON body, scrubbed in one pass by the session's egress (so a value
detected anywhere in the request is redacted everywhere in it), and put back into copies
of the messages: the run's own messages are never changed.

A signed part (thinking with a signature, a provider's compaction) cannot change without
breaking its signature: when its text would change it is withheld, as the egress does for
every signed block. Binary content (files, audio) is sent as it is.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import pydantic_core
from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    CompactionPart,
    InstructionBaselinePart,
    InstructionDeltaPart,
    InstructionPart,
    ModelMessage,
    ModelRequest,
    RetryFeedbackPart,
    RetryPromptPart,
    SpeechPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    UserPromptPart,
)

Scrub = Callable[[Any], Any]

#: A key the egress treats as signed: a slot holding it is dropped whole if its text changes.
_SIGNED = "signature"


@dataclasses.dataclass(frozen=True, slots=True)
class Scrubbed:
    """The request as it may leave."""

    messages: list[ModelMessage]
    instructions: list[str]
    withheld: int


def scrub_request(messages: Sequence[ModelMessage], instructions: Sequence[str],
                  scrub: Scrub) -> Scrubbed:
    """``messages`` and ``instructions`` with every text scrubbed in one body."""
    slots = [[_slot(part) for part in message.parts] for message in messages]
    body = {"instructions": list(instructions),
            "messages": [{"instructions": _instructions(message), "parts": parts}
                         for message, parts in zip(messages, slots, strict=True)]}
    out = scrub(body)
    withheld = 0
    result: list[ModelMessage] = []
    for message, before, after in zip(messages, slots, out["messages"], strict=True):
        parts: list[Any] = []
        changed = False
        for part, old, new in zip(message.parts, before, after["parts"], strict=True):
            if old and not new:
                withheld += 1  # a signed part whose text would change
                changed = True
                continue
            rebuilt = _apply(part, old[0], new[0]) if old and new != old else part
            changed = changed or rebuilt is not part
            parts.append(rebuilt)
        text = after["instructions"]
        if isinstance(message, ModelRequest):
            if changed or text != message.instructions:
                message = dataclasses.replace(message, parts=parts, instructions=text)
        elif changed:
            message = dataclasses.replace(message, parts=parts)
        result.append(message)
    return Scrubbed(result, list(out["instructions"]), withheld)


def _instructions(message: ModelMessage) -> str | None:
    return message.instructions if isinstance(message, ModelRequest) else None


def _slot(part: Any) -> list[dict[str, Any]]:
    """The texts of ``part`` that go to the model, as a one-item list (empty: none). A
    signed part's slot holds ``signature``, so the egress drops it whole on a change."""
    if isinstance(part, SystemPromptPart | TextPart):
        return [{"content": part.content}]
    if isinstance(part, UserPromptPart):
        if isinstance(part.content, str):
            return [{"content": part.content}]
        return [{"content": [_user_item(item) for item in part.content]}]
    if isinstance(part, ThinkingPart):
        slot: dict[str, Any] = {"content": part.content}
        if part.signature or part.id or part.provider_details:
            slot[_SIGNED] = part.signature or ""
        return [slot]
    if isinstance(part, CompactionPart):
        if part.content is None:
            return []
        slot = {"content": part.content}
        if part.provider_name or part.id or part.provider_details:
            slot[_SIGNED] = ""
        return [slot]
    if isinstance(part, BaseToolCallPart):
        return [{"args": _arguments(part.args)}]
    if isinstance(part, BaseToolReturnPart):
        if part.files:
            return []
        return [{"content": _json(part.content)}]
    if isinstance(part, RetryFeedbackPart | RetryPromptPart):
        return [{"content": _json(part.content)}]
    if isinstance(part, InstructionDeltaPart):
        return [{"content": part.content}] if part.content is not None else []
    if isinstance(part, InstructionBaselinePart):
        return [{"instructions": [item.content if isinstance(item, InstructionPart) else None
                                  for item in part.instructions]}]
    if isinstance(part, SpeechPart):
        return [{"transcript": part.transcript}] if part.transcript is not None else []
    return []


def _user_item(item: Any) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, TextContent):
        return item.content
    return None


def _arguments(args: Any) -> Any:
    """Tool arguments as JSON (text arguments parsed, so they stay valid once scrubbed)."""
    if isinstance(args, str):
        try:
            return {"json": json.loads(args)}
        except ValueError:
            return {"text": args}
    return {"value": _json(args)}


def _json(value: Any) -> Any:
    return pydantic_core.to_jsonable_python(value, fallback=str)


def _apply(part: Any, old: dict[str, Any], new: dict[str, Any]) -> Any:
    """``part`` carrying the scrubbed texts of its slot."""
    if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
        items = [_scrubbed_item(item, text) for item, text
                 in zip(part.content, new["content"], strict=True)]
        return dataclasses.replace(part, content=items)
    if isinstance(part, InstructionBaselinePart):
        return dataclasses.replace(part, instructions=[
            dataclasses.replace(item, content=text) if isinstance(item, InstructionPart)
            and isinstance(text, str) else item
            for item, text in zip(part.instructions, new["instructions"], strict=True)])
    if isinstance(part, SpeechPart):
        return dataclasses.replace(part, transcript=new["transcript"])
    if isinstance(part, BaseToolCallPart):
        args = new["args"]
        if "json" in args:
            return dataclasses.replace(part, args=json.dumps(args["json"], ensure_ascii=False))
        return dataclasses.replace(part, args=args["text"] if "text" in args else args["value"])
    if old["content"] == new["content"]:
        return part
    return dataclasses.replace(part, content=new["content"])


def _scrubbed_item(item: Any, text: str | None) -> Any:
    if text is None:
        return item
    if isinstance(item, TextContent):
        return dataclasses.replace(item, content=text)
    return text
