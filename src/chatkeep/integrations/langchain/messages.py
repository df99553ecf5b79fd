"""LangChain messages to and from chatkeep's internal model: plain code over values.

Two directions, each a converter at the edge (no I/O, no rule of chatkeep's own):

* :func:`pending` and :func:`drafts_of`: which messages of a LangGraph thread's state
  chatkeep has not recorded yet, and the drafts that record them. Each recorded message
  carries its LangChain id in its metadata (``langchain_id``), so the thread's state and
  the session are matched by id, never by position: the state grows as LangGraph's own
  (``add_messages``) and is never rewritten.
* :func:`from_history`: a history ``build_history`` built (OpenAI Chat format) as the
  LangChain messages a chat model takes, tool calls with their results intact.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.messages.tool import ToolCall as LangChainToolCall

from chatkeep.errors import InvalidMessage
from chatkeep.messages import MessageDraft, Role, ToolCall, Usage

log = logging.getLogger("chatkeep.integrations.langchain")

#: Metadata key of a recorded message: the id LangGraph's state knows it by.
LANGCHAIN_ID = "langchain_id"
#: The key ``from_history`` puts an unparseable tool-call argument text under.
RAW_ARGUMENTS = "__arguments__"

#: Restores a model-written payload (placeholders back to the values they stand for).
Restore = Callable[[Any], Any]

__all__ = ["LANGCHAIN_ID", "drafts_of", "from_history", "pending", "scoped_call_id"]


def pending(state: Sequence[BaseMessage], recent: set[str] | None,
            stored: Callable[[list[str]], set[str]]) -> list[BaseMessage]:
    """The messages of ``state`` (a thread's messages, oldest first) not recorded yet.

    ``recent`` is the LangChain ids of the session's newest stored messages (``None``: the
    session holds no message). The newest state message among them is the anchor: what
    follows it in the state is new (the state only ever grows at its end). Without an
    anchor (a run without a checkpointer, whose state is only its input; a thread new to
    a session that has messages; more than the tail written outside the graph since),
    the store is asked which of the state's ids it holds (``stored``), and the other
    messages are new.
    """
    if recent is None:
        return list(state)
    if recent:
        for index in range(len(state) - 1, -1, -1):
            if state[index].id in recent:
                return list(state[index + 1:])
    known = stored([m.id for m in state if m.id])
    return [m for m in state if m.id not in known]


def continues(state: Sequence[BaseMessage], recorded: frozenset[str],
              newest: str | None) -> bool:
    """Whether ``state`` continues a recorded state (its ids ``recorded``, its newest
    ``newest``): it holds that newest message, and every message before it is among the
    recorded ones. A run's own next state does (it grows at its end and trims only its
    start). An overlapping run's state of the same thread may share its input and differ
    after it. Anchoring there would take a stored answer for new, or take a message
    before the anchor that was never recorded for stored."""
    for index in range(len(state) - 1, -1, -1):
        if newest is not None and state[index].id == newest:
            return all(m.id in recorded for m in state[:index])
    return False


def drafts_of(messages: Sequence[BaseMessage], state: Sequence[BaseMessage],
              restore: Restore,
              taken: Callable[[list[str]], set[str]] = lambda ids: set()) -> list[MessageDraft]:
    """Drafts that record ``messages`` (new messages of ``state``), in order.

    Human text is recorded as the user wrote it; model output (text and tool-call
    arguments) through ``restore``, so what the model wrote in the session's placeholders
    is stored with real values (replayed, it is redacted again). A tool result is recorded
    only when its call is in ``state`` (LangChain answers a call it could not parse with a
    result for a call the AI message never lists). Messages with nothing chatkeep can
    record (no text and no tool calls: an image alone, an empty AI message) are skipped.

    Tool-call ids are the model's, unless the session already used one (``taken`` says
    which of a list of ids it did): a model restarts its ids on a thread whose checkpoint
    was lost. Then the call is recorded as :func:`scoped_call_id` of its AI message, and
    so is each of its results, on this run or a later one: call and results always pair.
    """
    callers = _callers(state)
    new_ids = {m.id for m in messages if m.id}
    asked = [str(call["id"]) for m in messages if isinstance(m, AIMessage)
             for call in m.tool_calls]
    asked += [scoped_call_id(m.tool_call_id, caller.id or "") for m in messages
              if isinstance(m, ToolMessage)
              and (caller := callers.get(id(m))) is not None and caller.id not in new_ids]
    used = taken(asked) if asked else set()
    stored_as: dict[tuple[str | None, str], str] = {}
    drafts = []
    for message in messages:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                original = str(call["id"])
                mapped = scoped_call_id(original, message.id or "") if original in used \
                    else original
                used.add(mapped)
                stored_as[(message.id, original)] = mapped
        draft = _draft(message, callers, stored_as, used, restore)
        if draft is None:
            log.debug("not recorded (nothing chatkeep can store): %s %s",
                      type(message).__name__, message.id)
            continue
        drafts.append(draft)
    return drafts


def scoped_call_id(call_id: str, message_id: str) -> str:
    """The id a tool call is recorded under when the session already used the model's
    own: the call id with a digest of its AI message's LangChain id (letters, digits and
    ``_`` only, as every provider's tool-call ids)."""
    return f"{call_id}_{hashlib.sha256(message_id.encode()).hexdigest()[:12]}"


def _callers(state: Sequence[BaseMessage]) -> dict[int, AIMessage]:
    """The AI message each tool result of ``state`` answers (by object identity): the
    newest one before it that made a call of that id."""
    latest: dict[str, AIMessage] = {}
    found: dict[int, AIMessage] = {}
    for message in state:
        if isinstance(message, AIMessage):
            for call in message.tool_calls:
                latest[str(call["id"])] = message
        elif isinstance(message, ToolMessage) and message.tool_call_id in latest:
            found[id(message)] = latest[message.tool_call_id]
    return found


def _draft(message: BaseMessage, callers: dict[int, AIMessage],
           stored_as: dict[tuple[str | None, str], str], used: set[str],
           restore: Restore) -> MessageDraft | None:
    metadata = {LANGCHAIN_ID: message.id} if message.id else {}
    if isinstance(message, AIMessage):
        return _assistant(message, metadata, stored_as, restore)
    if isinstance(message, ToolMessage):
        caller = callers.get(id(message))
        if caller is None:
            return None
        call_id = stored_as.get((caller.id, message.tool_call_id))
        if call_id is None:
            scoped = scoped_call_id(message.tool_call_id, caller.id or "")
            call_id = scoped if scoped in used else message.tool_call_id
        return MessageDraft(Role.TOOL, _tool_text(message.content), (),
                            call_id, message.name, metadata=metadata)
    role = _role_of(message)
    text = message.text
    if role is None or not text.strip():
        return None
    return MessageDraft(role, text, name=message.name, metadata=metadata)


def _role_of(message: BaseMessage) -> Role | None:
    if isinstance(message, HumanMessage):
        return Role.USER
    if isinstance(message, SystemMessage):
        return Role.SYSTEM  # added to the thread mid-run: an instruction, replayed pinned
    if isinstance(message, ChatMessage) and message.role in ("user", "system"):
        return Role.parse(message.role)
    return None


def _assistant(message: AIMessage, metadata: dict[str, Any],
               stored_as: dict[tuple[str | None, str], str],
               restore: Restore) -> MessageDraft | None:
    text = message.text
    arguments = [json.dumps(call["args"], ensure_ascii=False) for call in message.tool_calls]
    if not text.strip() and not arguments:
        return None
    written = restore({"content": text, "arguments": arguments})
    tool_calls = tuple(ToolCall(stored_as.get((message.id, str(call["id"])), str(call["id"])),
                                call["name"], args) for call, args
                       in zip(message.tool_calls, written["arguments"], strict=True))
    usage = message.usage_metadata
    metadata_model = message.response_metadata.get("model_name") or \
        message.response_metadata.get("model")
    return MessageDraft(
        Role.ASSISTANT, written["content"] or None, tool_calls, name=message.name,
        usage=None if usage is None else Usage(int(usage.get("input_tokens") or 0),
                                               int(usage.get("output_tokens") or 0)),
        model=metadata_model if isinstance(metadata_model, str) else None,
        metadata=metadata)


def _tool_text(content: str | list[str | dict[str, Any]]) -> str:
    """A tool result's content as text: a string as it is; content blocks as their text
    when they all are text, else as JSON."""
    if isinstance(content, str):
        return content
    if all(isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text")
           for b in content):
        return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in content)
    return json.dumps(content, ensure_ascii=False, default=str)


def from_history(history: Sequence[Mapping[str, Any]]) -> list[AnyMessage]:
    """Chat Completions messages (what ``build_history`` returns by default) as LangChain
    messages: roles mapped, tool calls as LangChain tool calls with parsed arguments."""
    out: list[AnyMessage] = []
    for data in history:
        role = data.get("role")
        content = data.get("content")
        text = content if isinstance(content, str) else ""
        if role in ("system", "developer"):
            extra = {"__openai_role__": "developer"} if role == "developer" else {}
            out.append(SystemMessage(content=text, additional_kwargs=extra))
        elif role == "user":
            name = data.get("name")
            out.append(HumanMessage(content=text, name=name if isinstance(name, str) else None))
        elif role == "assistant":
            out.append(AIMessage(content=text, tool_calls=[
                _tool_call(c) for c in data.get("tool_calls") or []]))
        elif role == "tool":
            out.append(ToolMessage(content=text, tool_call_id=str(data.get("tool_call_id"))))
        else:  # pragma: no cover - build_history speaks only these roles
            raise InvalidMessage(f"unexpected role in a chatkeep history: {role!r}")
    return out


def _tool_call(data: Mapping[str, Any]) -> LangChainToolCall:
    function = data.get("function") or {}
    arguments = function.get("arguments") or "{}"
    try:
        args = json.loads(arguments)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        args = {RAW_ARGUMENTS: arguments}
    return LangChainToolCall(name=str(function.get("name") or ""), args=args,
                             id=str(data.get("id") or ""), type="tool_call")
