"""OpenAI Responses API: ``input=[...]`` items out, a ``Response`` in.

A response's output is a list of items (``reasoning``, ``message``, ``function_call``);
chatkeep records it as one assistant message: its text, its calls, and the reasoning
items verbatim (with ``encrypted_content``) so the open turn can hand them back
unmodified, which reasoning models need to continue a tool-calling turn.
The Agents SDK's session items are this format too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from chatkeep.errors import InvalidMessage
from chatkeep.formats.base import (
    RECORDED_ITEM,
    History,
    HistoryInfo,
    Outgoing,
    arguments_text,
    require_list,
    require_mapping,
    require_text,
    text_of,
)
from chatkeep.messages import AssistantTurn, Message, MessageDraft, Role, ToolCall, Usage, as_dict

NAME = "openai_responses"
_TEXT_PARTS = ("input_text", "output_text", "text")
_MEDIA_PARTS = {"input_image": "image", "input_file": "file"}
"""A tool's output may carry these beside its text (the Agents SDK's ``ToolOutputImage``
and ``ToolOutputFileContent``): kept verbatim in the recorded item, a marker in the text."""
_ROLES = {"user": Role.USER, "system": Role.SYSTEM, "developer": Role.SYSTEM,
          "assistant": Role.ASSISTANT}

if TYPE_CHECKING:  # the SDK's types, for type checkers only: importing it costs start-up
    from openai.types.responses import ResponseInputItemParam

    ResponsesHistory: TypeAlias = History[ResponseInputItemParam]
else:
    ResponsesHistory = History


def to_wire(outgoing: Outgoing, info: HistoryInfo) -> ResponsesHistory:
    """Input items: system prompt and pinned instructions as ``system`` messages, the
    summary as a message of its role, then the messages; the open turn as reasoning items
    (verbatim), ``function_call`` and ``function_call_output`` items."""
    items: list[dict[str, Any]] = [{"role": role, "content": t}
                                   for role, t in outgoing.leading_messages()]
    for message in outgoing.messages:
        items.extend(message_to_items(message))
    return History(cast("list[ResponseInputItemParam]", items), info)


def message_to_items(message: Message) -> list[dict[str, Any]]:
    """One internal message as Responses input items (an assistant turn may be several)."""
    native = message.native.get(NAME) or {}
    original = native.get(RECORDED_ITEM)
    if isinstance(original, Mapping) and _carries(original, message):
        return [dict(original)]  # what was recorded, exactly (the Agents SDK matches on it)
    if message.role is Role.TOOL:
        return [{"type": "function_call_output", "call_id": message.tool_call_id,
                 "output": _tool_output(message, original)}]
    items: list[dict[str, Any]] = [dict(r) for r in native.get("reasoning") or []]
    if message.content:
        items.append({"role": message.role.value, "content": message.content})
    item_ids = native.get("call_item_ids") or {}
    for call in message.tool_calls:
        item: dict[str, Any] = {"type": "function_call", "call_id": call.id,
                                "name": call.name, "arguments": call.arguments}
        if call.id in item_ids:
            item["id"] = item_ids[call.id]
        items.append(item)
    return items


def recognises(data: Mapping[str, Any]) -> bool:
    """A Responses API ``Response``."""
    return data.get("object") == "response"


def read_response(response: Any) -> AssistantTurn:
    """A ``Response`` (SDK object or dict): text, calls, reasoning items, usage."""
    data = as_dict(response)
    if data.get("object") != "response":
        raise InvalidMessage("not a Responses API response (object != 'response')")
    turn = _AssistantItems()
    for index, raw in enumerate(require_list(data.get("output") or [], "response output")):
        item = require_mapping(raw, f"output item {index}")
        if item.get("type") == "message" and item.get("role", "assistant") != "assistant":
            raise InvalidMessage(f"output item {index}: a {item.get('role')!r} message")
        turn.add(item, f"output item {index}")
    if turn.empty:
        raise InvalidMessage("the response has no output to record")
    usage = None
    if data.get("usage"):
        raw_usage = require_mapping(data["usage"], "usage")
        usage = Usage(int(raw_usage.get("input_tokens") or 0),
                      int(raw_usage.get("output_tokens") or 0))
    model = data.get("model")
    draft = turn.draft()
    return AssistantTurn(draft.content, draft.tool_calls, usage,
                         model if isinstance(model, str) else None, draft.native)


def from_wire(payload: Any) -> list[MessageDraft]:
    """Input items (or a plain string, one user message) as drafts, one message per item,
    each keeping its original item (``native[NAME][RECORDED_ITEM]``), so a history read back in
    this format hands back exactly the items that were recorded (the Agents SDK's session
    contract). A reasoning item is an assistant message of its own, carrying only it."""
    if isinstance(payload, str):
        return [MessageDraft(Role.USER, payload)]
    drafts: list[MessageDraft] = []
    for index, raw in enumerate(require_list(payload, "input items")):
        what = f"item {index}"
        item = as_dict(raw, what)
        kind = item.get("type", "message" if "role" in item else None)
        role = item.get("role")
        if kind in ("reasoning", "function_call") or (kind == "message" and role == "assistant"):
            turn = _AssistantItems()
            turn.add(item, what)
            draft = turn.draft(alone=True)
        elif kind == "message":
            mapped = _ROLES.get(str(role))
            if mapped is None:
                raise InvalidMessage(f"{what}: unknown role {role!r}")
            draft = MessageDraft(mapped, text_of(item.get("content"), what, _TEXT_PARTS))
        elif kind == "function_call_output":
            draft = MessageDraft(Role.TOOL, tool_output_text(item.get("output"), what),
                                 tool_call_id=require_text(item.get("call_id"),
                                                           f"{what} call_id"))
        else:
            raise InvalidMessage(f"{what}: unknown or unsupported item type {kind!r}")
        native = dict(draft.native.get(NAME) or {})
        native[RECORDED_ITEM] = item
        drafts.append(dataclasses.replace(draft, native={NAME: native}))
    return drafts


def _carries(item: Mapping[str, Any], message: Message) -> bool:
    """Whether the recorded ``item`` still says what ``message`` says (its text was not
    redacted or clipped on the way out, its call is still there)."""
    kind = item.get("type", "message")
    if kind == "reasoning":
        return not message.content and not message.tool_calls
    if kind == "function_call":
        return len(message.tool_calls) == 1 and message.tool_calls[0].arguments == \
            item.get("arguments") and message.tool_calls[0].id == item.get("call_id")
    if kind == "function_call_output":
        try:
            return message.role is Role.TOOL and \
                message.content == tool_output_text(item.get("output"), "item")
        except InvalidMessage:
            return False
    try:
        return text_of(item.get("content"), "item", _TEXT_PARTS) == \
            message.content and not message.tool_calls
    except InvalidMessage:
        return False


def tool_output_text(output: Any, what: str) -> str:
    """A ``function_call_output``'s output as the text chatkeep stores: a string as it is,
    a list of parts as their text, each image or file part as a marker (``[image]``,
    ``[file: report.pdf]``) so every other format and the summarizer know it was there."""
    if output is None or isinstance(output, str):
        return output or ""
    texts: list[str] = []
    for index, raw in enumerate(require_list(output, f"{what} output")):
        part = require_mapping(raw, f"{what} output part {index}")
        media = _MEDIA_PARTS.get(str(part.get("type")))
        if media is None:
            texts.append(text_of([part], f"{what} output part {index}", _TEXT_PARTS) or "")
            continue
        name = part.get("filename")
        texts.append(f"[{media}: {name}]" if isinstance(name, str) and name else f"[{media}]")
    return "".join(texts)


def _tool_output(message: Message, original: Any) -> str | list[dict[str, Any]]:
    """A tool result whose text changed on the way out (redacted, clipped): its text, and
    the recorded images and files after it (they are not text the planner could rewrite;
    the egress still reads every string in them)."""
    text = message.content or ""
    output = original.get("output") if isinstance(original, Mapping) else None
    if not isinstance(output, list):
        return text
    media = [dict(p) for p in output
             if isinstance(p, Mapping) and str(p.get("type")) in _MEDIA_PARTS]
    return [{"type": "input_text", "text": text}, *media] if media else text


@dataclass
class _AssistantItems:
    """Collects the items of one assistant output into one message."""

    texts: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    reasoning: list[dict[str, Any]] = field(default_factory=list)
    item_ids: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.texts or self.calls or self.reasoning)

    def add(self, item: Mapping[str, Any], what: str) -> None:
        kind = item.get("type", "message")
        if kind == "reasoning":
            require_text(item.get("id"), f"{what} id")
            self.reasoning.append(dict(item))
        elif kind == "message":
            text = (_refusal_text(item) if _has_refusal(item)
                    else text_of(item.get("content"), what, _TEXT_PARTS))
            if text:
                self.texts.append(text)
        elif kind == "function_call":
            call_id = require_text(item.get("call_id"), f"{what} call_id")
            self.calls.append(ToolCall(call_id, require_text(item.get("name"), f"{what} name"),
                                       arguments_text(item.get("arguments", "{}"), what)))
            if isinstance(item.get("id"), str):
                self.item_ids[call_id] = item["id"]
        else:
            raise InvalidMessage(f"{what}: unknown or unsupported item type {kind!r}")

    def draft(self, alone: bool = False) -> MessageDraft:
        """The assistant message; ``alone`` allows a reasoning item by itself."""
        if not (self.texts or self.calls or (alone and self.reasoning)):
            raise InvalidMessage("reasoning items must come with the assistant output they "
                                 "belong to (a message or a function call)")
        native: dict[str, Any] = {}
        if self.reasoning:
            native["reasoning"] = self.reasoning
        if self.item_ids:
            native["call_item_ids"] = self.item_ids
        return MessageDraft(Role.ASSISTANT, "".join(self.texts) or None, tuple(self.calls),
                            native={NAME: native} if native else {})


def _has_refusal(item: Mapping[str, Any]) -> bool:
    content = item.get("content")
    return isinstance(content, list) and any(
        isinstance(p, Mapping) and p.get("type") == "refusal" for p in content)


def _refusal_text(item: Mapping[str, Any]) -> str:
    parts = []
    for part in item.get("content") or []:
        part = require_mapping(part, "content part")
        parts.append(str(part.get("refusal") if part.get("type") == "refusal"
                         else part.get("text") or ""))
    return "".join(parts)
