"""Pydantic AI messages as chatkeep messages and back: conversion only, no I/O.

Each stored ``ModelMessage`` (a conversation *entry*) becomes chatkeep messages whose
text chatkeep's history rules can read: a ``ModelResponse`` is one assistant message
(its text, its tool calls, its usage billed), a ``ModelRequest`` one message per part
that speaks (a conversation-scoped system prompt, a user prompt, a tool result, a retry's
feedback). Parts that do not speak (instruction records, deltas, a request-scoped
nudge, a tool result whose call chatkeep does not hold) ride along with a neighbour.

The exact message rides on the chatkeep message's metadata under ``"pydantic_ai"``, as
a list of *segments*: ``{"entry", "parts"}`` says which of the entry's parts this
chatkeep message carries; the entry's last segment (its *carrier*) also holds
``"parent"`` and ``"message"`` (the JSON of ``ModelMessagesTypeAdapter``), and an earlier
segment names its carrier by ``"carrier"``, how many messages later it comes. So a
conversation reloads exactly as it was saved, and a turn can be sent to the model as
Pydantic AI recorded it, signatures and all.

Tool call ids are made unique per session (``<id>|<entry id>``): Pydantic AI's test
models reuse ids across runs, and chatkeep refuses a call id twice in one session. The
exact ids stay in the stored message.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from pydantic_ai.conversation_store import ConversationEntry
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from chatkeep.errors import InvalidMessage
from chatkeep.messages import Message, MessageDraft, Role, ToolCall, Usage
from chatkeep.validation import TOOL_CALL_ID_MAX

#: The key of the segments in a chatkeep message's metadata (and of the record in the
#: session's metadata).
KEY = "pydantic_ai"

#: Output tools whose arguments are the model's answer: recorded as the assistant's text
#: too, so a closed turn of a structured-output agent still replays (and summarizes) what
#: the model answered, not the user's question alone.
OUTPUT_TOOLS = frozenset({"final_result"})

Segment = dict[str, Any]
OpenCalls = dict[str, list[str]]
"""Calls waiting for their result: the exact id -> chatkeep ids, oldest first."""


def dump_message(message: ModelMessage) -> dict[str, Any]:
    """``message`` as the JSON Pydantic AI itself stores it."""
    data: dict[str, Any] = ModelMessagesTypeAdapter.dump_python([message], mode="json")[0]
    return data


def load_message(data: Any) -> ModelMessage:
    """A stored message's JSON as the ``ModelMessage`` it was."""
    message: ModelMessage = ModelMessagesTypeAdapter.validate_python([data])[0]
    return message


def call_id(raw: str, entry_id: str) -> str:
    """The chatkeep id of the call ``raw`` made in entry ``entry_id``: unique per session."""
    key = f"{raw}|{entry_id}"
    if len(key) <= TOOL_CALL_ID_MAX:
        return key
    return f"{hashlib.sha256(raw.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}|{entry_id}"


def billed(response: ModelResponse) -> Usage | None:
    """What a response cost: its own usage and that of the attempts it replaced (a
    fallback's failed or rejected calls), as the provider reported them."""
    usages = [response.usage, *(attempt.usage for attempt in response.failed_attempts or ()
                                if attempt.usage is not None)]
    prompt = sum(usage.input_tokens for usage in usages)
    completion = sum(usage.output_tokens for usage in usages)
    return Usage(prompt, completion) if prompt or completion else None


def user_text(content: str | Sequence[Any]) -> str:
    """A user prompt's text: its strings, and a short note for each attachment."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for item in content:
        if isinstance(item, str):
            texts.append(item)
        elif isinstance(item, TextContent):
            texts.append(item.content)
        elif isinstance(url := getattr(item, "url", None), str):
            texts.append(f"[{getattr(item, 'kind', 'file')}: {url}]")
        elif isinstance(media := getattr(item, "media_type", None), str):
            texts.append(f"[{media} attachment]")
    return "\n".join(texts)


@dataclasses.dataclass
class _Draft:
    """A chatkeep message being drafted, and the segments it carries."""

    role: Role
    content: str | None
    calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    usage: Usage | None = None
    model: str | None = None
    native: dict[str, Any] = dataclasses.field(default_factory=dict)
    segments: list[Segment] = dataclasses.field(default_factory=list)

    def draft(self) -> MessageDraft:
        return MessageDraft(self.role, self.content, self.calls, self.tool_call_id, self.name,
                            self.usage, self.model, {KEY: self.segments}, self.native)


def drafts_of(entries: Sequence[ConversationEntry], open_calls: OpenCalls, *,
              restore: Callable[[list[str]], list[str]],
              output_tools: frozenset[str] = OUTPUT_TOOLS) -> list[MessageDraft]:
    """The chatkeep messages that record ``entries`` (in order), with their segments.

    ``open_calls`` holds the stored calls still waiting for a result; it is updated with
    the calls the entries make and answer. ``restore`` puts real values back into
    model-written text (the assistant's text and tool arguments, written in this session's
    placeholders): chatkeep stores what was meant, while the exact message keeps what the
    model wrote. A batch where nothing speaks cannot be recorded (``InvalidMessage``)."""
    drafts: list[_Draft] = []
    pending: list[Segment] = []
    for entry in entries:
        message = entry.message
        whole = {"entry": entry.id, "parts": list(range(len(message.parts))),
                 "parent": entry.parent_id, "message": dump_message(message)}
        if isinstance(message, ModelResponse):
            drafts.append(_response(message, entry.id, open_calls, restore, output_tools,
                                    [*pending, whole]))
            pending = []
            continue
        groups = _request_groups(message, open_calls)
        if not groups:
            pending.append(whole)
            continue
        for index, (draft, parts, speaks) in enumerate(groups):
            segment: Segment = {"entry": entry.id, "parts": parts, "speaks": speaks}
            if index == len(groups) - 1:
                segment.update(parent=entry.parent_id, message=whole["message"])
            else:
                segment["carrier"] = len(groups) - 1 - index
            draft.segments = [*pending, segment] if index == 0 else [segment]
            drafts.append(draft)
        pending = []
    if pending:
        if not drafts:
            raise InvalidMessage("these Pydantic AI messages hold nothing chatkeep can record "
                                 "(no text, no tool call, no tool result)")
        drafts[-1].segments.extend(pending)
    return [draft.draft() for draft in drafts]


def _response(message: ModelResponse, entry_id: str, open_calls: OpenCalls,
              restore: Callable[[list[str]], list[str]], output_tools: frozenset[str],
              segments: list[Segment]) -> _Draft:
    calls = [part for part in message.parts if isinstance(part, ToolCallPart)]
    texts = [part.content for part in message.parts if isinstance(part, TextPart)]
    texts += [part.args_as_json_str() for part in calls if part.tool_name in output_tools]
    arguments = [part.args_as_json_str() for part in calls]
    restored = restore([*texts, *arguments])
    texts, arguments = restored[:len(texts)], restored[len(texts):]
    ids = [call_id(part.tool_call_id, entry_id) for part in calls]
    for part, chatkeep_id in zip(calls, ids, strict=True):
        open_calls.setdefault(part.tool_call_id, []).append(chatkeep_id)
    content = "\n\n".join(text for text in texts if text) or None
    native: dict[str, Any] = {}
    if content is None and not calls:
        # Thinking alone, or a provider's own tool round: kept, out of chatkeep's text.
        native = {KEY: {"parts": [part.part_kind for part in message.parts]}}
    return _Draft(Role.ASSISTANT, content,
                  tuple(ToolCall(chatkeep_id, part.tool_name, args)
                        for chatkeep_id, part, args in zip(ids, calls, arguments, strict=True)),
                  usage=billed(message), model=message.model_name, native=native,
                  segments=segments)


def _request_groups(message: ModelRequest,
                    open_calls: OpenCalls) -> list[tuple[_Draft, list[int], int]]:
    """One draft per part that speaks, each with the indexes of the parts it carries
    (silent parts join the speaking part before them, or the first one) and the index of
    the part whose text it is."""
    groups: list[tuple[_Draft, list[int], int]] = []
    leading: list[int] = []
    for index, part in enumerate(message.parts):
        draft = _speaking(part, open_calls)
        if draft is not None:
            groups.append((draft, [*leading, index] if not groups else [index], index))
            leading = []
        elif groups:
            groups[-1][1].append(index)
        else:
            leading.append(index)
    return groups


def _speaking(part: ModelRequestPart, open_calls: OpenCalls) -> _Draft | None:
    """The chatkeep message a request part becomes, or ``None`` when it does not speak."""
    if isinstance(part, SystemPromptPart):
        if part.scope == "conversation" and part.content.strip():
            return _Draft(Role.SYSTEM, part.content)
        return None
    if isinstance(part, UserPromptPart):
        text = user_text(part.content)
        return _Draft(Role.USER, text) if text.strip() else None
    if isinstance(part, ToolReturnPart):
        return _answer(open_calls, part.tool_call_id, part.tool_name,
                       part.model_response_str())
    if isinstance(part, RetryFeedbackPart):
        return _Draft(Role.USER, part.model_response())
    if isinstance(part, RetryPromptPart):  # a legacy part built by hand, never validated
        if part.tool_name is not None:
            return _answer(open_calls, part.tool_call_id, part.tool_name,
                           part.model_response())
        return _Draft(Role.USER, part.model_response())
    return None


def _answer(open_calls: OpenCalls, raw: str, tool_name: str, text: str) -> _Draft | None:
    """A tool result answering the oldest open call with its id (Pydantic AI's own rule);
    ``None`` for a result whose call chatkeep does not hold (it is kept, silent)."""
    waiting = open_calls.get(raw)
    if not waiting:
        return None
    return _Draft(Role.TOOL, text, tool_call_id=waiting.pop(0), name=tool_name)


# -- reading back ---------------------------------------------------------------------------


def segments_of(message: Message) -> list[Segment]:
    """The segments a stored chatkeep message carries (none: a message recorded by other
    means than this integration)."""
    value = message.metadata.get(KEY)
    if not isinstance(value, list):
        return []
    return [segment for segment in value if isinstance(segment, dict)
            and isinstance(segment.get("entry"), str)]


def carried(messages: Iterable[Message]) -> dict[str, tuple[str | None, Any]]:
    """Entry id -> (parent id, message JSON) for every entry ``messages`` carry."""
    found: dict[str, tuple[str | None, Any]] = {}
    for message in messages:
        for segment in segments_of(message):
            if "message" in segment:
                parent = segment.get("parent")
                found[segment["entry"]] = (parent if isinstance(parent, str) else None,
                                           segment["message"])
    return found


def chain(entries: Mapping[str, tuple[str | None, Any]], head: str | None,
          limit: int | None) -> tuple[list[tuple[str, str | None, Any]], bool]:
    """The entries from the first up to ``head`` (at most the last ``limit``), and whether
    the walk is complete (``False``: an entry it needs is not in ``entries``)."""
    out: list[tuple[str, str | None, Any]] = []
    current = head
    while current is not None and (limit is None or len(out) < limit):
        found = entries.get(current)
        if found is None:
            out.reverse()
            return out, False
        parent, data = found
        out.append((current, parent, data))
        current = parent
    out.reverse()
    return out, True


def stored_calls(message: Message) -> list[tuple[str, str]]:
    """``(exact id, chatkeep id)`` of the calls a stored assistant message made."""
    for segment in segments_of(message):
        data = segment.get("message")
        if isinstance(data, dict) and data.get("kind") == "response":
            raw = [part.get("tool_call_id") for part in data.get("parts", [])
                   if isinstance(part, dict) and "tool_call_id" in part
                   and part.get("part_kind") == "tool-call"]
            if len(raw) == len(message.tool_calls):
                return [(str(r), c.id) for r, c in zip(raw, message.tool_calls, strict=True)]
    return [(c.id, c.id) for c in message.tool_calls]


# -- what goes out ----------------------------------------------------------------------------


def as_sent(messages: Sequence[Message], exact: bool,
            entries: Mapping[str, Any]) -> list[ModelMessage]:
    """Chatkeep's outgoing messages as Pydantic AI messages.

    ``exact``: the messages go out as recorded (the open turn): each entry's own parts,
    signatures and ids as Pydantic AI stored them, with the text chatkeep redacted and
    clipped put in where a part holds that text alone. Otherwise their text alone: the
    user's as a prompt, the assistant's as a text part. ``entries``: the JSON of every
    entry a segment names (see :func:`carried`)."""
    out: list[ModelMessage] = []
    runs: list[_Run] = []
    for message in messages:
        segments = segments_of(message) if exact else []
        if not segments:
            _flush(runs, entries, out)
            runs = []
            out.append(_plain(message, exact))
            continue
        for segment in segments:
            if not runs or runs[-1].entry != segment["entry"]:
                runs.append(_Run(segment["entry"]))
            run = runs[-1]
            run.parts.extend(p for p in segment.get("parts", [])
                             if isinstance(p, int) and p not in run.parts)
            speaks = segment.get("speaks")
            if isinstance(speaks, int) and message.content is not None:
                run.texts[speaks] = message.content
            elif message.role is Role.ASSISTANT and "message" in segment:
                run.answer = message.content
    _flush(runs, entries, out)
    return out


@dataclasses.dataclass
class _Run:
    """Consecutive segments of one entry: the parts that go out, and chatkeep's text."""

    entry: str
    parts: list[int] = dataclasses.field(default_factory=list)
    texts: dict[int, str] = dataclasses.field(default_factory=dict)
    answer: str | None = None


def _flush(runs: list[_Run], entries: Mapping[str, Any], out: list[ModelMessage]) -> None:
    for run in runs:
        data = entries.get(run.entry)
        if data is None:
            raise InvalidMessage(f"stored entry {run.entry!r} is missing its message")
        loaded = load_message(data)
        if isinstance(loaded, ModelRequest):
            kept = [_with_text(loaded.parts[i], run.texts.get(i)) for i in sorted(run.parts)
                    if 0 <= i < len(loaded.parts)]
            loaded = dataclasses.replace(loaded, parts=kept)
        elif run.answer is not None:
            texts = [i for i, p in enumerate(loaded.parts) if isinstance(p, TextPart)]
            if len(texts) == 1 and not any(isinstance(p, ToolCallPart) and
                                           p.tool_name in OUTPUT_TOOLS for p in loaded.parts):
                parts = list(loaded.parts)
                text_part = parts[texts[0]]
                assert isinstance(text_part, TextPart)
                parts[texts[0]] = dataclasses.replace(text_part, content=run.answer)
                loaded = dataclasses.replace(loaded, parts=parts)
        out.append(loaded)


def _with_text(part: ModelRequestPart, text: str | None) -> ModelRequestPart:
    """``part`` with chatkeep's outgoing text, where the part's text is that text alone."""
    if text is None:
        return part
    if isinstance(part, UserPromptPart | SystemPromptPart) and isinstance(part.content, str):
        return dataclasses.replace(part, content=text)
    if isinstance(part, ToolReturnPart) and isinstance(part.content, str) \
            and part.outcome == "success" and not part.files:
        replaced: ModelRequestPart = dataclasses.replace(cast(Any, part), content=text)
        return replaced
    return part


def _plain(message: Message, exact: bool) -> ModelMessage:
    """A chatkeep message as a Pydantic AI one from its text (and, ``exact``, its calls)."""
    text = message.content or ""
    if message.role is Role.ASSISTANT:
        parts: list[Any] = [TextPart(text)] if text else []
        if exact:
            parts += [ToolCallPart(c.name, c.arguments, tool_call_id=c.id)
                      for c in message.tool_calls]
        return ModelResponse(parts=parts)
    if message.role is Role.TOOL:
        return ModelRequest(parts=[ToolReturnPart(message.name or "tool", text,
                                                  tool_call_id=message.tool_call_id or "")])
    if message.role is Role.SYSTEM:
        return ModelRequest(parts=[SystemPromptPart(text)])
    return ModelRequest(parts=[UserPromptPart(text)])
