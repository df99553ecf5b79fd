""""What the model receives now": the library's dry run, and its budget by part.

``HistoryCompressor.preview_history`` builds the next history from the stored state as
``build_history`` would, without folding, billing, recalling or writing. The budget bar
splits its estimate into the parts the planner adds up (system prompt, pinned
instructions, summary, the replayed tail, the open turn), counted the way the planner
counts them, on the Chat Completions spelling (where each part is its own message).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from chatkeep.app import Chatkeep
from chatkeep.errors import ChatkeepError, IncompleteToolTurn
from chatkeep.formats import FORMATS, HistoryInfo
from chatkeep.formats.base import SUMMARY_HEADER
from chatkeep.history.plan import CALL_OVERHEAD, MESSAGE_OVERHEAD
from chatkeep.inspect.masking import Masker
from chatkeep.store.rows import SessionRow
from chatkeep.tokens import TokenCounter

PARTS = ("system prompt", "pinned", "summary", "tail", "open turn")
#: Messages shown from each end of a long preview (the middle is counted, not shown).
SHOW_HEAD, SHOW_TAIL = 8, 40


@dataclass(frozen=True, slots=True)
class Preview:
    """A preview as the page shows it."""

    format: str
    info: HistoryInfo | None = None
    system: str | None = None
    """Anthropic's top-level system text."""
    head: list[Any] = field(default_factory=list)
    tail: list[Any] = field(default_factory=list)
    hidden: int = 0
    """Messages between ``head`` and ``tail`` not shown."""
    parts: list[tuple[str, int]] = field(default_factory=list)
    error: str | None = None
    note: str | None = None

    @property
    def count(self) -> int:
        """Messages (or items) in the history."""
        return len(self.head) + self.hidden + len(self.tail)

    def shown_json(self, items: list[Any]) -> str:
        """``items`` as indented JSON."""
        return json.dumps(items, indent=2, ensure_ascii=False, default=str)


def preview(keep: Chatkeep, row: SessionRow, system_prompt: str, wire: str,
            masker: Masker) -> Preview:
    """The dry run of ``row``'s session in format ``wire``, masked for display when the
    session does not redact (a redacting session's preview is already in placeholders)."""
    if wire not in FORMATS:
        wire = "openai_chat"
    session = keep.sessions.get_unscoped(row.id)
    try:
        history = keep.compressor.preview_history(session, system_prompt, format=wire)  # type: ignore[call-overload]
        chat = history if wire == "openai_chat" else keep.compressor.preview_history(
            session, system_prompt, format="openai_chat")
    except IncompleteToolTurn as exc:
        return Preview(wire, error=f"the open turn waits for a tool result ({exc}): "
                                   "build_history raises IncompleteToolTurn until it is stored")
    except ChatkeepError as exc:
        return Preview(wire, error=f"{type(exc).__name__}: {exc}")
    redacts = keep.privacy.redacts(session)
    items = list(history)
    system = getattr(history, "system", None)
    note = None
    if not redacts and not masker.revealed:
        items = masker.payload(items)
        system = masker.text(system) if isinstance(system, str) else system
        note = ("this session does not redact: the model receives the real values "
                "(masked here)")
    head, tail, hidden = items, [], 0
    if len(items) > SHOW_HEAD + SHOW_TAIL:
        head, tail = items[:SHOW_HEAD], items[-SHOW_TAIL:]
        hidden = len(items) - SHOW_HEAD - SHOW_TAIL
    parts = budget_parts([dict(m) for m in chat], system_prompt, keep.counter)
    return Preview(wire, history.info, system if isinstance(system, str) else None, head,
                   tail, hidden, parts, None, note)


def budget_parts(messages: list[dict[str, Any]], system_prompt: str,
                 counter: TokenCounter) -> list[tuple[str, int]]:
    """Tokens of each part of a Chat Completions history: its leading instructions (the
    system prompt first, then pinned ones), the fenced summary, the replayed tail, and the
    open turn (from the last user message, when tool plumbing follows it)."""
    sums = dict.fromkeys(PARTS, 0)
    index = 0
    first = True
    while index < len(messages) and _leading(messages[index]):
        message = messages[index]
        text = message.get("content") or ""
        part = ("summary" if isinstance(text, str) and text.startswith(SUMMARY_HEADER)
                else "system prompt" if first and system_prompt else "pinned")
        sums[part] += _cost(message, counter)
        first = False
        index += 1
    talk = messages[index:]
    start = max((i for i, m in enumerate(talk) if m.get("role") == "user"), default=None)
    opened = start is not None and any(
        m.get("tool_calls") or m.get("role") == "tool" for m in talk[start:])
    for i, message in enumerate(talk):
        in_open = opened and start is not None and i >= start
        sums["open turn" if in_open else "tail"] += _cost(message, counter)
    return [(name, sums[name]) for name in PARTS]


def _leading(message: dict[str, Any]) -> bool:
    role = message.get("role")
    text = message.get("content")
    return role in ("system", "developer") or (
        isinstance(text, str) and text.startswith(SUMMARY_HEADER))


def _cost(message: dict[str, Any], counter: TokenCounter) -> int:
    """One Chat Completions message as the planner prices it (``plan.message_cost``)."""
    content = message.get("content")
    total = MESSAGE_OVERHEAD + counter.count(content if isinstance(content, str) else "")
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        total += CALL_OVERHEAD + counter.count(
            str(call.get("id", "")) + str(function.get("name", ""))
            + str(function.get("arguments", "")))
    if message.get("tool_call_id"):
        total += counter.count(str(message["tool_call_id"]))
    return total
