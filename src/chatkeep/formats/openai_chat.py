"""OpenAI Chat Completions: ``messages=[...]`` out, ``ChatCompletion`` (plain or streamed) in.

Also the default wire format of ``build_history``. Any OpenAI-compatible endpoint
(Azure, Ollama, vLLM, LiteLLM) speaks it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from chatkeep.errors import InvalidMessage
from chatkeep.formats.base import (
    History,
    HistoryInfo,
    Outgoing,
    arguments_text,
    require_list,
    require_mapping,
    text_of,
)
from chatkeep.messages import AssistantTurn, Message, MessageDraft, Role, ToolCall, Usage, as_dict

NAME = "openai_chat"
_TEXT_PARTS = ("text",)
_ROLES = {"system": Role.SYSTEM, "developer": Role.SYSTEM, "user": Role.USER,
          "assistant": Role.ASSISTANT, "tool": Role.TOOL}

if TYPE_CHECKING:  # the SDK's types, for type checkers only: importing it costs start-up
    from openai.types.chat import ChatCompletionMessageParam

    ChatHistory: TypeAlias = History[ChatCompletionMessageParam]
else:
    ChatHistory = History


def to_wire(outgoing: Outgoing, info: HistoryInfo) -> ChatHistory:
    """System prompt and pinned instructions as system messages, the summary as a message
    of its role, then the messages; the open turn keeps ``tool_calls`` and a ``tool``
    message per call id."""
    out: list[dict[str, Any]] = [{"role": role, "content": t}
                                 for role, t in outgoing.leading_messages()]
    for message in outgoing.messages:
        if message.role is Role.ASSISTANT and not message.content and not message.tool_calls:
            continue  # a reasoning item alone: nothing Chat Completions can carry
        wire = message_to_wire(message)
        previous = out[-1] if out else None
        if (previous is not None and previous["role"] == "assistant"
                and previous.get("tool_calls") and wire["role"] == "assistant"):
            # Calls recorded one message per call (as the Agents SDK stores them) go out as
            # one assistant message: Chat Completions wants every result right after it.
            previous["content"] = _joined(previous.get("content"), wire.get("content"))
            previous["tool_calls"] = [*previous["tool_calls"], *wire.get("tool_calls", [])]
            continue
        out.append(wire)
    return History(cast("list[ChatCompletionMessageParam]", out), info)


def _joined(first: str | None, second: str | None) -> str | None:
    parts = [p for p in (first, second) if p]
    return "\n\n".join(parts) if parts else None


def message_to_wire(message: Message) -> dict[str, Any]:
    """One internal message as a Chat Completions message dict."""
    if message.role is Role.TOOL:
        return {"role": "tool", "tool_call_id": message.tool_call_id,
                "content": message.content or ""}
    out: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [c.to_openai() for c in message.tool_calls]
    if message.name is not None and message.role in (Role.USER, Role.SYSTEM):
        out["name"] = message.name
    return out


def from_wire(payload: Any) -> list[MessageDraft]:
    """Chat Completions messages (dicts or SDK objects) as drafts, in order."""
    drafts = []
    for index, raw in enumerate(require_list(payload, "chat messages")):
        what = f"message {index}"
        data = as_dict(raw, what)
        role = _ROLES.get(str(data.get("role")))
        if role is None:
            raise InvalidMessage(f"{what}: unknown role {data.get('role')!r} "
                                 f"(expected one of {sorted(_ROLES)})")
        content = text_of(data.get("content"), what, _TEXT_PARTS)
        calls = tuple(_tool_call(c, f"{what} tool call") for c in
                      require_list(data.get("tool_calls") or [], f"{what} tool_calls"))
        tool_call_id = data.get("tool_call_id")
        if role is Role.TOOL and not isinstance(tool_call_id, str):
            raise InvalidMessage(f"{what}: a tool message needs its tool_call_id")
        name = data.get("name")
        drafts.append(MessageDraft(role, content, calls,
                                   tool_call_id if role is Role.TOOL else None,
                                   name if isinstance(name, str) else None))
    return drafts


def _tool_call(raw: Any, what: str) -> ToolCall:
    data = require_mapping(as_dict(raw, what), what)
    if data.get("type", "function") != "function":
        raise InvalidMessage(f"{what}: only function tool calls are supported, "
                             f"got type {data.get('type')!r}")
    function = require_mapping(data.get("function"), f"{what} function")
    return ToolCall(str(data.get("id") or ""), str(function.get("name") or ""),
                    arguments_text(function.get("arguments", "{}"), what))


def recognises(data: Mapping[str, Any]) -> bool:
    """A ``ChatCompletion`` or a bare assistant ``ChatCompletionMessage``."""
    return "choices" in data or data.get("object") == "chat.completion" or (
        data.get("role") == "assistant" and "type" not in data)


def read_response(response: Any) -> AssistantTurn:
    """A ``ChatCompletion``, its ``choices[0].message``, a list of streamed
    ``chat.completion.chunk`` values, or the SDK's finished stream object."""
    final = getattr(response, "get_final_completion", None)
    if callable(final):
        response = final()
    if is_chunk_stream(response):
        return _from_chunks(response)
    data = as_dict(response)
    if "choices" not in data:
        if data.get("role") != "assistant":
            raise InvalidMessage("not a chat completion: no choices and no assistant message")
        return _turn(data, None, None)
    choices = data.get("choices") or []
    if not choices:
        raise InvalidMessage("chat completion has no choices")
    message = require_mapping(require_mapping(choices[0], "choice").get("message"),
                              "choices[0].message")
    return _turn(message, _usage(data.get("usage")), data.get("model"))


def _turn(message: Mapping[str, Any], usage: Usage | None, model: Any) -> AssistantTurn:
    calls = tuple(_tool_call(c, "tool call") for c in (message.get("tool_calls") or []))
    content = text_of(message.get("content"), "assistant message", _TEXT_PARTS)
    return AssistantTurn(content, calls, usage, model if isinstance(model, str) else None)


def _usage(raw: Any) -> Usage | None:
    if not raw:
        return None
    data = as_dict(raw, "usage")
    return Usage(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0))


def is_chunk_stream(response: Any) -> bool:
    """Whether ``response`` is an iterable of streamed chunks (not a single response)."""
    if isinstance(response, Mapping | str | bytes) or hasattr(response, "model_dump"):
        return False
    return isinstance(response, Iterable)


def _from_chunks(chunks: Iterable[Any]) -> AssistantTurn:
    """Accumulate streamed chunks: text deltas in order, tool calls by ``index``."""
    texts: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    usage: Usage | None = None
    model: str | None = None
    seen = 0
    for raw in chunks:
        chunk = as_dict(raw, "a stream chunk")
        if chunk.get("object") != "chat.completion.chunk":
            raise InvalidMessage(f"not a chat.completion.chunk: {chunk.get('object')!r}")
        seen += 1
        model = chunk.get("model") or model
        usage = _usage(chunk.get("usage")) or usage
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                texts.append(str(delta["content"]))
            for part in delta.get("tool_calls") or []:
                slot = calls.setdefault(int(part.get("index", 0)),
                                        {"id": "", "name": "", "arguments": []})
                slot["id"] = part.get("id") or slot["id"]
                function = part.get("function") or {}
                slot["name"] = function.get("name") or slot["name"]
                if function.get("arguments"):
                    slot["arguments"].append(str(function["arguments"]))
    if not seen:
        raise InvalidMessage("the stream held no chunks")
    tool_calls = tuple(ToolCall(c["id"], c["name"], "".join(c["arguments"]) or "{}")
                       for _, c in sorted(calls.items()))
    return AssistantTurn("".join(texts) or None, tool_calls, usage, model)

