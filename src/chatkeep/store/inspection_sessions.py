"""The inspector's reads of sessions: the filtered, keyset-paged list and one session.

Nothing here writes. A tenant given to a function is part of its ``WHERE`` clause, so an
id typed into a URL cannot reach another tenant's rows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    ScalarSelect,
    exists,
    func,
    or_,
    select,
    tuple_,
)

from chatkeep.errors import InvalidArgument
from chatkeep.messages import Role
from chatkeep.refs import Ref
from chatkeep.store.connections import reading
from chatkeep.store.keyset import PAGE, decode_cursor, encode_cursor
from chatkeep.store.rows import SessionRow, session_from_row
from chatkeep.store.schema import chat_messages, chat_sessions, chat_tool_calls, ref_filter
from chatkeep.store.statements import LIVE

_S = chat_sessions.c
_M = chat_messages.c
_T = chat_tool_calls.c

MESSAGE_OVERHEAD = 4
"""Tokens of framing per message in the at-rest estimate (as the history planner counts)."""
_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._:-]{0,63}")

STATES = ("active", "closed", "open", "waiting", "over_budget", "failed_fold")
"""Session states the list filters by: not closed; closed; an open turn (its last live
message is a tool call or a tool result); a tool call still waiting for its result; the
stored tail after the watermark over the budget (the next build must fold); the last
fold attempt failed (``fold_failures`` > 0: the session backs off until
``fold_retry_at``)."""
SORTS = ("activity", "tokens")


def valid_id(value: str) -> bool:
    """Whether ``value`` can be a session id (anything else is not found without a query)."""
    return bool(_ID.fullmatch(value))



@dataclass(frozen=True, slots=True)
class SessionFilter:
    """What the sessions list shows."""

    tenant: Ref | None = None
    actor: Ref | None = None
    subject: Ref | None = None
    key: str | None = None
    """A prefix of the application's key."""
    since: datetime | None = None
    until: datetime | None = None
    state: str | None = None
    sort: str = "activity"
    after: str | None = None
    """The cursor of the previous page's last row."""


@dataclass(frozen=True, slots=True)
class SessionLine:
    """One row of the sessions list."""

    row: SessionRow
    open_turn: bool = False
    waiting: int = 0
    """Tool calls still waiting for their result."""

    @property
    def unsummarized(self) -> int:
        """Messages after the summary watermark (retracted ones included)."""
        return self.row.last_seq - self.row.summary_watermark


@dataclass(frozen=True, slots=True)
class SessionPage:
    """A page of the sessions list and the cursor of the next one."""

    lines: list[SessionLine]
    next_cursor: str | None
    total: int


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def tail_tokens(session_id: Any, watermark: Any) -> ScalarSelect[Any]:
    """The at-rest estimate of a session's unsummarized tail: stored tokens of its live
    messages after the watermark, plus framing (a scalar subquery)."""
    return (select(func.coalesce(func.sum(func.coalesce(_M.tokens, 0) + MESSAGE_OVERHEAD), 0))
            .where(_M.session_id == session_id, _M.seq > watermark, LIVE)
            .scalar_subquery())


def _open_turn_clause() -> ColumnElement[bool]:
    last = chat_messages.alias("last")
    calls = exists().where(chat_tool_calls.c.session_id == last.c.session_id,
                           chat_tool_calls.c.call_seq == last.c.seq)
    return exists().where(last.c.session_id == _S.id, last.c.seq == _S.last_seq,
                          last.c.retracted_at.is_(None),
                          or_(last.c.role == Role.TOOL.value, calls))


def _state_clause(state: str, budget: int) -> ColumnElement[bool]:
    if state == "closed":
        return _S.closed_at.is_not(None)
    if state == "active":
        return _S.closed_at.is_(None)
    if state == "open":
        return _open_turn_clause()
    if state == "waiting":
        return exists().where(_T.session_id == _S.id, _T.result_seq.is_(None))
    if state == "over_budget":
        return tail_tokens(_S.id, _S.summary_watermark) > budget
    if state == "failed_fold":
        return _S.fold_failures > 0
    raise InvalidArgument(f"unknown state {state!r}")


def _session_where(f: SessionFilter, budget: int) -> list[ColumnElement[bool]]:
    where: list[ColumnElement[bool]] = []
    if f.tenant is not None:
        where.append(ref_filter(chat_sessions, "tenant", f.tenant))
    if f.actor is not None:
        where.append(ref_filter(chat_sessions, "actor", f.actor))
    if f.subject is not None:
        where.append(ref_filter(chat_sessions, "subject", f.subject))
    if f.key:
        where.append(_S.key.like(_like_prefix(f.key), escape="\\"))
    if f.since is not None:
        where.append(_S.last_message_at >= f.since)
    if f.until is not None:
        where.append(_S.last_message_at < f.until)
    if f.state:
        where.append(_state_clause(f.state, budget))
    return where


def list_sessions(engine: Engine, f: SessionFilter, *, budget: int,
                  limit: int = PAGE) -> SessionPage:
    """A page of sessions, most recently active (or most billed) first, after ``f.after``."""
    where = _session_where(f, budget)
    sort_col: Any = _S.total_tokens if f.sort == "tokens" else _S.last_message_at
    query = select(chat_sessions).where(*where)
    cursor = decode_cursor(f.after)
    if cursor is not None and len(cursor) == 2:
        value = cursor[0]
        if f.sort != "tokens" and isinstance(value, str):
            try:
                value = datetime.fromisoformat(value)
            except ValueError:
                value = None
        if value is not None and isinstance(cursor[1], str):
            query = query.where(tuple_(sort_col, _S.id) < tuple_(value, cursor[1]))
    query = query.order_by(sort_col.desc(), _S.id.desc()).limit(limit + 1)
    count = select(func.count()).select_from(chat_sessions).where(*where)
    with reading(engine) as conn:
        rows = [session_from_row(r) for r in conn.execute(query)]
        total = int(conn.execute(count).scalar_one())
        more = len(rows) > limit
        rows = rows[:limit]
        lines = _with_turn_state(conn, rows)
    next_cursor = None
    if more and rows:
        last = rows[-1]
        next_cursor = encode_cursor(
            last.total_tokens if f.sort == "tokens" else last.last_message_at, last.id)
    return SessionPage(lines, next_cursor, total)


def _with_turn_state(conn: Any, rows: list[SessionRow]) -> list[SessionLine]:
    """Each row with its turn state: whether its last live message leaves the turn open,
    and how many tool calls wait for a result (point reads by primary key)."""
    if not rows:
        return []
    ids = [r.id for r in rows]
    waiting = dict(conn.execute(
        select(_T.session_id, func.count()).where(_T.session_id.in_(ids),
                                                  _T.result_seq.is_(None))
        .group_by(_T.session_id)).all())
    keys = {(r.id, r.last_seq) for r in rows if r.last_seq > 0}
    open_ids: set[str] = set()
    if keys:
        # Both columns by IN, pairs matched here: an index probe per pair on every
        # backend (SQLite scans the whole index for a row-value IN).
        ids_ = sorted({k[0] for k in keys})
        seqs = sorted({k[1] for k in keys})
        last = [r for r in conn.execute(
            select(_M.session_id, _M.seq, _M.role, _M.retracted_at).where(
                _M.session_id.in_(ids_), _M.seq.in_(seqs))).all()
            if (r[0], r[1]) in keys]
        calls = {(r[0], r[1]) for r in conn.execute(select(_T.session_id, _T.call_seq).where(
            _T.session_id.in_([r[0] for r in last]),
            _T.call_seq.in_(seqs))).all()}
        for session_id, seq, role, retracted in last:
            if retracted is None and (role == Role.TOOL.value or (session_id, seq) in calls):
                open_ids.add(session_id)
    return [SessionLine(r, r.id in open_ids, int(waiting.get(r.id, 0))) for r in rows]


def get_session(engine: Engine, session_id: str, tenant: Ref | None) -> SessionRow | None:
    """The session, or ``None`` when there is none of that id (in ``tenant``, when given)."""
    if not valid_id(session_id):
        return None
    query = select(chat_sessions).where(_S.id == session_id)
    if tenant is not None:
        query = query.where(ref_filter(chat_sessions, "tenant", tenant))
    with reading(engine) as conn:
        row = conn.execute(query).first()
    return None if row is None else session_from_row(row)


def session_tail_tokens(engine: Engine, session: SessionRow) -> int:
    """The at-rest estimate of ``session``'s tail after the watermark (see
    :func:`tail_tokens`)."""
    with reading(engine) as conn:
        return int(conn.execute(select(tail_tokens(session.id, session.summary_watermark)))
                   .scalar_one())

