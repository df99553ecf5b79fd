"""The inspector's reads of one session's log: windows of ``seq``, tool-call links, times.

Nothing here writes. A log is read in windows of ``seq`` (an index range), never whole;
the caller has checked the session's tenant on its row before any message is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, select

from chatkeep.messages import Message
from chatkeep.store.connections import reading
from chatkeep.store.rows import SessionRow, as_utc, message_from_row
from chatkeep.store.schema import chat_messages, chat_tool_calls
from chatkeep.store.statements import MESSAGE_COLUMNS

_M = chat_messages.c
_T = chat_tool_calls.c

LOG_PAGE = 100
"""Messages per window of a session's log."""

@dataclass(frozen=True, slots=True)
class CallLink:
    """One tool call as the store pairs it: where it was made and where it was answered."""

    call_id: str
    name: str
    call_seq: int
    result_seq: int | None


@dataclass(frozen=True, slots=True)
class LogWindow:
    """Consecutive messages of a session's log, and where the neighbouring windows start."""

    messages: list[Message]
    links: dict[str, CallLink]
    """Tool calls made or answered in the window, by call id."""
    older: int | None
    """``before`` for the window before this one (``None``: this is the first)."""
    newer: int | None
    """``after`` for the window after this one (``None``: this is the last)."""


def read_log(engine: Engine, session: SessionRow, *, after: int | None = None,
             before: int | None = None, limit: int = LOG_PAGE) -> LogWindow:
    """``limit`` messages of ``session`` by seq (retracted ones included): those after
    ``after``, else those before ``before``, else the newest. The caller has checked the
    session's tenant."""
    # Seqs are gapless (messages are never deleted, retracted ones stay), so a window is a
    # closed seq range: an index range scan whatever the planner's statistics say.
    query = select(*MESSAGE_COLUMNS).where(_M.session_id == session.id)
    if after is not None:
        after = min(after, session.last_seq)
        query = query.where(_M.seq > after, _M.seq <= after + limit).order_by(_M.seq)
    else:
        end = session.last_seq + 1 if before is None else min(before, session.last_seq + 1)
        query = query.where(_M.seq >= end - limit, _M.seq < end).order_by(_M.seq)
    with reading(engine) as conn:
        messages = [message_from_row(r) for r in conn.execute(query)]
        ids = sorted({c.id for m in messages for c in m.tool_calls}
                     | {m.tool_call_id for m in messages if m.tool_call_id})
        links: dict[str, CallLink] = {}
        if ids:
            for call_id, name, call_seq, result_seq in conn.execute(
                    select(_T.call_id, _T.name, _T.call_seq, _T.result_seq).where(
                        _T.session_id == session.id, _T.call_id.in_(ids))):
                links[call_id] = CallLink(call_id, name, int(call_seq),
                                          None if result_seq is None else int(result_seq))
    first = messages[0].seq if messages else 0
    last = messages[-1].seq if messages else 0
    return LogWindow(messages, links, older=first if messages and first > 1 else None,
                     newer=last if messages and last < session.last_seq else None)


def seq_times(engine: Engine, session_id: str, seqs: Sequence[int]) -> dict[int, datetime]:
    """When each of ``seqs`` was stored (point reads by the ``(session_id, seq)`` index)."""
    if not seqs:
        return {}
    with reading(engine) as conn:
        rows = conn.execute(select(_M.seq, _M.created_at).where(
            _M.session_id == session_id, _M.seq.in_(list(seqs)))).all()
    return {int(seq): as_utc(at) for seq, at in rows if at is not None}  # type: ignore[misc]


def last_seq_before(engine: Engine, session: SessionRow, moment: datetime) -> int:
    """The newest seq stored at or before ``moment`` (0: none), found by bisecting seqs
    (messages are stored in seq order, so their times rise with it): some twenty point
    reads, whatever the session's length."""
    low, high = 0, session.last_seq
    with reading(engine) as conn:
        while low < high:
            middle = (low + high + 1) // 2
            at = conn.execute(select(_M.created_at).where(
                _M.session_id == session.id, _M.seq == middle)).scalar()
            stamp = as_utc(at) if at is not None else None
            if stamp is not None and stamp <= moment:
                low = middle
            else:
                high = middle - 1
    return low

