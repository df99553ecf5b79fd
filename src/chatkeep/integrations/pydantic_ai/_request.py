"""What one model request of a run carries: chatkeep's history of the stored
conversation, then the run's own messages, every text through the session's egress.
A function of the sync core (the async keep runs it on its bridge).

The history is one round of chatkeep's history (:class:`chatkeep.history.round.HistoryRound`,
what ``build_history`` drives): pinned system prompts, the running summary, closed turns as their
text, the open turn verbatim. It goes out as Pydantic AI messages: the summary as a
``CompactionPart`` (the form Pydantic AI gives a summary an application wrote), closed
turns as text, the open turn as Pydantic AI recorded it (every call with its result,
thinking with its signature), so the request is valid as it stands and Pydantic AI never
has to repair it. A fold the plan asks for is made by the round (the summarizer call,
its compare-and-set, its bill), then the plan is read again.

When the stored conversation ends with calls still waiting for their results (a run
paused for deferred tools, continued with their results), the stored turn goes out as
recorded, closed turns included, and the run's own messages answer it; no fold is made
for that one request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    CompactionPart,
    FileUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
)

from chatkeep.app import Chatkeep
from chatkeep.errors import IncompleteToolTurn
from chatkeep.formats.base import Outgoing
from chatkeep.history.round import HistoryRound, PreparedRound
from chatkeep.integrations.pydantic_ai import _convert
from chatkeep.integrations.pydantic_ai._scrub import Scrubbed, scrub_request
from chatkeep.messages import Message
from chatkeep.privacy.egress import OpenEgress
from chatkeep.sessions import ChatSession

log = logging.getLogger("chatkeep.integrations.pydantic_ai")

#: The planner's wire format: only its token estimate of native payloads depends on it,
#: and this integration keeps none there.
_FORMAT = "openai_chat"


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """One request as it may leave, and what chatkeep knows of its history part."""

    messages: list[ModelMessage]
    """Chatkeep's history, then the run's own messages."""
    instructions: list[str]
    """The request's instruction texts, scrubbed."""
    history: list[ModelMessage]
    """Chatkeep's part of ``messages`` (the stored conversation, budgeted)."""
    tokens: int
    """Chatkeep's estimate of its history part."""
    budget: int
    """``chat.max_history_tokens``."""
    over_budget_reason: str | None
    """Why the history part is over the budget (``None``: it fits)."""
    compressed: bool
    """Whether preparing this request folded older turns into the summary."""
    withheld: int
    """Signed parts left out because their text holds a detected value."""
    unread: list[FileUrl] = field(default_factory=list)
    """Text-like files given by URL whose text was not given (sent as a note: read them
    and prepare again with ``files``)."""
    request_tokens: int = 0
    """The budget's count of the whole request as it leaves: ``tokens`` (the history
    part) plus the run's own messages and the instructions (what a quota reservation
    counts as the call's input, with the tools' definitions)."""
    redacting: bool = False
    """Whether the session redacts: the request left through a redacting egress."""


def prepare(core: Chatkeep, session: ChatSession, own: Sequence[ModelMessage],
            instructions: Sequence[str],
            files: Mapping[str, str] | None = None) -> PreparedRequest:
    """The request for ``session``: its budgeted history, then ``own`` (the run's
    messages the store does not hold), with ``instructions``, all scrubbed. The run's new
    input is read with the message it answers (the history's newest assistant text), so
    a value only that question identifies is found. ``files``: the text of text-like
    files given by URL (see :mod:`._files`)."""
    compressor = core.compressor
    try:
        return _through(core, session, own, instructions, files, paused=False,
                        history_round=compressor.round(session, "", memories=[],
                                                       format=_FORMAT))
    except IncompleteToolTurn:
        # The stored turn waits for results this run brings: it goes out as recorded,
        # closed turns included, and nothing is folded for this one request.
        return _through(core, session, own, instructions, files, paused=True,
                        history_round=compressor.round(session, "", memories=[],
                                                       format=_FORMAT, allow_fold=False,
                                                       keep_closed_tool_turns=True))


def _through(core: Chatkeep, session: ChatSession, own: Sequence[ModelMessage],
             instructions: Sequence[str], files: Mapping[str, str] | None, *,
             paused: bool, history_round: HistoryRound) -> PreparedRequest:
    """Drive ``history_round`` with this integration's rendering: the plan's history as
    Pydantic AI messages, then ``own``, scrubbed as one request (the round stores its
    placeholders, folds when the plan asks, and plans again on a lost race)."""
    repository = core.repository

    bodies: list[Any] = []  # the scrubbed body of the newest render: what is counted

    def render(prepared: PreparedRound) -> tuple[int, Scrubbed, PreparedRound]:
        history = _history(repository, session, prepared.plan.outgoing, exact_closed=paused)
        egress, context = prepared.egress, _answered(history)

        def scrub(body: Any) -> Any:
            bodies[:] = [egress.scrub(body, context=context)]
            return bodies[0]

        return len(history), scrub_request([*history, *own], instructions, scrub, files), \
            prepared

    cut, out, prepared = history_round.run(render)
    if out.withheld:
        log.warning("session %s: %d signed part(s) holding a detected value were "
                    "withheld", session.id, out.withheld)
    info = history_round.info(prepared)
    own_tokens = _own_tokens(core, bodies[-1], cut) if bodies else 0
    return PreparedRequest(out.messages, out.instructions, out.messages[:cut], info.tokens,
                           info.budget, info.over_budget_reason, info.compressed,
                           out.withheld, out.unread, info.tokens + own_tokens,
                           not isinstance(prepared.egress, OpenEgress))


def _own_tokens(core: Chatkeep, body: Any, cut: int) -> int:
    """The budget's count of what a request carries beside its history part: the run's
    own messages (from message ``cut`` on) and the instructions, as scrubbed."""
    strings: list[str] = []
    _strings([body["instructions"], body["messages"][cut:]], strings)
    return sum(core.counter.count(text) for text in strings if text)


def _strings(value: Any, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, into)
    elif isinstance(value, list | tuple):
        for item in value:
            _strings(item, into)


def _answered(history: Sequence[ModelMessage]) -> str | None:
    """The newest assistant text of the stored conversation: what the run's new input
    answers (``None``: the conversation has none)."""
    for message in reversed(history):
        if isinstance(message, ModelResponse):
            texts = [part.content for part in message.parts
                     if isinstance(part, TextPart) and part.content.strip()]
            if texts:
                return "\n\n".join(texts)
    return None


def _history(repository: Any, session: ChatSession, outgoing: Outgoing, *,
             exact_closed: bool) -> list[ModelMessage]:
    """The plan's history as Pydantic AI messages."""
    out: list[ModelMessage] = []
    lead: list[Any] = [SystemPromptPart(text) for text in outgoing.pinned]
    summary = outgoing.summary_text()
    if summary:
        lead.append(CompactionPart(summary))
    if lead:
        out.append(ModelRequest(parts=lead))
    opened = len(outgoing.messages) if outgoing.open_from is None else outgoing.open_from
    closed, live = outgoing.messages[:opened], outgoing.messages[opened:]
    exact = [*closed, *live] if exact_closed else list(live)
    entries = _entries(repository, session, exact)
    if not exact_closed:
        out += _convert.as_sent(closed, False, entries)
    out += _convert.as_sent(exact, True, entries)
    return out


def _entries(repository: Any, session: ChatSession,
             messages: Sequence[Message]) -> dict[str, Any]:
    """The JSON of every entry ``messages`` carry a part of: from their own metadata, or
    read from the message that carries it (a part of an entry whose earlier parts
    belong to a closed turn)."""
    found = {entry: data for entry, (_, data) in _convert.carried(messages).items()}
    missing = sorted({message.seq + segment["carrier"] for message in messages
                      for segment in _convert.segments_of(message)
                      if segment["entry"] not in found
                      and isinstance(segment.get("carrier"), int)})
    if missing:
        read = repository.read_messages(session.id, after_seq=missing[0] - 1,
                                        through_seq=missing[-1])
        found.update({entry: data for entry, (_, data) in _convert.carried(read).items()})
    return found
