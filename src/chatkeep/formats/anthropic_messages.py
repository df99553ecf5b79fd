"""Anthropic Messages: ``system=`` plus ``messages=[...]`` out, a ``Message`` in.

Anthropic has no system role inside ``messages``: the system prompt, pinned
instructions and the summary go in ``history.system``. Tool calls are ``tool_use``
blocks (``input`` an object); their results go back as ``tool_result`` blocks in the
next user message, all parallel results in one message. Signed ``thinking`` and
``redacted_thinking`` blocks are stored verbatim and handed back unmodified in the
open turn: the API rejects a tool-use turn whose signed thinking was altered or dropped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from chatkeep.errors import InvalidMessage
from chatkeep.formats.base import (
    History,
    HistoryInfo,
    Outgoing,
    arguments_object,
    require_list,
    require_mapping,
    require_text,
    text_of,
)
from chatkeep.messages import AssistantTurn, Message, MessageDraft, Role, ToolCall, Usage, as_dict

if TYPE_CHECKING:
    from anthropic.types import MessageParam

NAME = "anthropic_messages"
_THINKING = ("thinking", "redacted_thinking")
_TEXT_PARTS = ("text",)
#: Opens the messages when the replay would start with the assistant (the API wants a
#: user message first), e.g. after a summary that ended mid-turn.
CONTINUE_TEXT = "(The conversation continues.)"


class AnthropicHistory(History["MessageParam"]):
    """``messages`` for ``client.messages.create``, with the ``system`` text beside them."""

    def __init__(self, items: Sequence[MessageParam] = (), info: HistoryInfo | None = None,
                 system: str = "") -> None:
        super().__init__(items, info)
        self.system = system


def to_wire(outgoing: Outgoing, info: HistoryInfo) -> AnthropicHistory:
    """``system`` joins the system texts (the summary too, unless its role is ``user``:
    then it opens the first user message as a block of its own); consecutive same-role
    messages are merged into one (so parallel tool results share one user message), and
    the list starts with a user message."""
    merged: list[dict[str, Any]] = []
    system = outgoing.system_texts()
    summary = outgoing.summary_text()
    if summary and outgoing.summary_role == "user":
        system = outgoing.instruction_texts()
        merged.append({"role": "user", "content": [{"type": "text", "text": summary}]})
    for message in outgoing.messages:
        role, blocks = message_to_blocks(message)
        if not blocks:
            continue
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": blocks})
    if merged and merged[0]["role"] != "user":
        merged.insert(0, {"role": "user", "content": [{"type": "text", "text": CONTINUE_TEXT}]})
    return AnthropicHistory(cast("list[MessageParam]", merged), info,
                            system="\n\n".join(system))


def message_to_blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    """One internal message as a role and Anthropic content blocks."""
    native = message.native.get(NAME) or {}
    if message.role is Role.TOOL:
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id,
                                  "content": message.content or ""}
        if native.get("is_error"):
            result["is_error"] = True
        return "user", [result]
    blocks: list[dict[str, Any]] = []
    if message.role is Role.ASSISTANT:
        blocks.extend(dict(b) for b in native.get("thinking") or [])
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    blocks.extend({"type": "tool_use", "id": c.id, "name": c.name,
                   "input": arguments_object(c.arguments)} for c in message.tool_calls)
    return ("assistant" if message.role is Role.ASSISTANT else "user"), blocks


def recognises(data: Mapping[str, Any]) -> bool:
    """An Anthropic ``Message`` response."""
    return data.get("type") == "message" and isinstance(data.get("content"), list)


def read_response(response: Any) -> AssistantTurn:
    """A ``Message`` (SDK object or dict): text, ``tool_use`` calls, thinking verbatim, usage
    (cache reads and writes count as prompt tokens: they are billed input)."""
    data = as_dict(response)
    if not recognises(data):
        raise InvalidMessage("not an Anthropic message (type != 'message')")
    if data.get("role", "assistant") != "assistant":
        raise InvalidMessage(f"an Anthropic response from role {data.get('role')!r}")
    draft = _assistant(data["content"], "response")
    usage = None
    if data.get("usage"):
        raw = require_mapping(data["usage"], "usage")
        prompt = sum(int(raw.get(k) or 0) for k in (
            "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))
        usage = Usage(prompt, int(raw.get("output_tokens") or 0))
    model = data.get("model")
    return AssistantTurn(draft.content, draft.tool_calls, usage,
                         model if isinstance(model, str) else None, draft.native)


def from_wire(payload: Any) -> list[MessageDraft]:
    """``MessageParam`` values as drafts: a user message of ``tool_result`` blocks becomes
    tool results (then its text, if any, a user message); assistant blocks one message."""
    drafts: list[MessageDraft] = []
    for index, raw in enumerate(require_list(payload, "messages")):
        what = f"message {index}"
        data = as_dict(raw, what)
        role, content = data.get("role"), data.get("content")
        if role == "assistant":
            if isinstance(content, str):
                drafts.append(MessageDraft(Role.ASSISTANT, content))
            else:
                drafts.append(_assistant(require_list(content, f"{what} content"), what))
        elif role == "user":
            drafts.extend(_user(content, what))
        else:
            raise InvalidMessage(f"{what}: role must be 'user' or 'assistant' (Anthropic takes "
                                 f"the system prompt separately), got {role!r}")
    return drafts


def _assistant(blocks: Sequence[Any], what: str) -> MessageDraft:
    texts: list[str] = []
    calls: list[ToolCall] = []
    thinking: list[dict[str, Any]] = []
    for index, raw in enumerate(blocks):
        block = as_dict(raw, f"{what} block {index}")
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            tool_input = block.get("input", {})
            if not isinstance(tool_input, Mapping):
                raise InvalidMessage(f"{what} block {index}: tool_use input must be an object")
            calls.append(ToolCall(require_text(block.get("id"), f"{what} tool_use id"),
                                  require_text(block.get("name"), f"{what} tool_use name"),
                                  json.dumps(tool_input, ensure_ascii=False)))
        elif kind in _THINKING:
            thinking.append(dict(block))
        else:
            raise InvalidMessage(f"{what} block {index}: unknown or unsupported block type "
                                 f"{kind!r}")
    native = {NAME: {"thinking": thinking}} if thinking else {}
    return MessageDraft(Role.ASSISTANT, "".join(texts) or None, tuple(calls), native=native)


def _user(content: Any, what: str) -> list[MessageDraft]:
    if isinstance(content, str):
        return [MessageDraft(Role.USER, content)]
    drafts: list[MessageDraft] = []
    texts: list[Any] = []
    for index, raw in enumerate(require_list(content, f"{what} content")):
        block = as_dict(raw, f"{what} block {index}")
        if block.get("type") != "tool_result":
            texts.append(block)
            continue
        result = text_of(block.get("content", ""), f"{what} tool_result", _TEXT_PARTS)
        native = {NAME: {"is_error": True}} if block.get("is_error") else {}
        drafts.append(MessageDraft(
            Role.TOOL, result or "",
            tool_call_id=require_text(block.get("tool_use_id"), f"{what} tool_use_id"),
            native=native))
    if texts:
        drafts.append(MessageDraft(Role.USER, text_of(texts, what, _TEXT_PARTS)))
    return drafts
