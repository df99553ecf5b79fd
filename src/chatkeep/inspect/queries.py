"""The inspector's reads: every query it makes, each confined to a tenant when one is given.

Nothing here writes. Lists page by keyset (the last row's sort key and id, never an
offset), so the tenth thousand page costs what the first does; a session's log is read in
windows of ``seq`` (an index range), never whole. A tenant given to a function is part of
its ``WHERE`` clause (or checked on the session row before its messages are read), so an
id typed into a URL cannot reach another tenant's rows.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Engine,
    ScalarSelect,
    Select,
    column,
    exists,
    func,
    literal_column,
    or_,
    select,
    table,
    tuple_,
)

from chatkeep.errors import InvalidArgument
from chatkeep.messages import Message, Role
from chatkeep.refs import Ref
from chatkeep.store.connections import reading
from chatkeep.store.memory_index import VECTOR_TABLE, vector_table_exists
from chatkeep.store.memory_rows import MemoryRow, memory_row
from chatkeep.store.rows import (
    SessionRow,
    as_utc,
    message_from_row,
    session_from_row,
)
from chatkeep.store.schema import (
    chat_messages,
    chat_sessions,
    chat_tool_calls,
    chat_usage,
    memories,
    ref_filter,
)
from chatkeep.store.statements import LIVE, MESSAGE_COLUMNS

_S = chat_sessions.c
_M = chat_messages.c
_T = chat_tool_calls.c
_U = chat_usage.c
_Mem = memories.c
_vectors = table(VECTOR_TABLE, column("memory_id"), column("model"), column("dim"))

PAGE = 50
"""Rows per page of a list."""
LOG_PAGE = 100
"""Messages per window of a session's log."""
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


# -- keyset cursors ----------------------------------------------------------------------


def encode_cursor(*values: Any) -> str:
    """An opaque cursor for the row after which the next page starts."""
    data = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def decode_cursor(text: str | None) -> list[Any] | None:
    """The values :func:`encode_cursor` packed; ``None`` for a missing or damaged cursor
    (the list then starts from the top)."""
    if not text:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        return None
    return data if isinstance(data, list) else None


# -- sessions ----------------------------------------------------------------------------


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


# -- a session's log ---------------------------------------------------------------------


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


# -- usage -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsageFilter:
    """Which ledger rows the usage page reads."""

    tenant: Ref | None = None
    session_id: str | None = None
    purpose: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def where(self) -> list[ColumnElement[bool]]:
        """The ``WHERE`` clauses over ``chat_usage``."""
        out: list[ColumnElement[bool]] = []
        if self.tenant is not None:
            out.append(ref_filter(chat_usage, "tenant", self.tenant))
        if self.session_id is not None:
            out.append(_U.session_id == self.session_id)
        if self.purpose:
            out.append(_U.purpose == self.purpose)
        if self.model:
            out.append(_U.model == self.model)
        if self.since is not None:
            out.append(_U.created_at >= self.since)
        if self.until is not None:
            out.append(_U.created_at < self.until)
        return out


USAGE_GROUPS = ("tenant", "purpose", "model", "session")
BUCKETS = {"hour": ("%Y-%m-%d %H:00", "YYYY-MM-DD HH24:00"),
           "day": ("%Y-%m-%d", "YYYY-MM-DD"),
           "month": ("%Y-%m", "YYYY-MM")}


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One group of the ledger."""

    key: tuple[Any, ...]
    calls: int
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def _sums() -> list[Any]:
    return [func.count(), func.coalesce(func.sum(_U.prompt_tokens), 0),
            func.coalesce(func.sum(_U.completion_tokens), 0)]


def _usage_rows(rows: Sequence[Any], width: int) -> list[UsageRow]:
    return [UsageRow(tuple(r[:width]), int(r[width]), int(r[width + 1]), int(r[width + 2]))
            for r in rows]


def usage_by(engine: Engine, f: UsageFilter, group: str, *,
             limit: int | None = None) -> list[UsageRow]:
    """The ledger summed by ``group`` (tenant, purpose, model or session), biggest first.
    A session group's key is (session id, key, title, stored mapping): the mapping masks
    the key and title for display."""
    if group == "tenant":
        columns: list[Any] = [_U.tenant_type, _U.tenant_id]
        query: Select[Any] = select(*columns, *_sums())
    elif group == "session":
        columns = [_U.session_id, _S.key, _S.title, _S.pii_vault]
        query = select(*columns, *_sums()).join(chat_sessions, _S.id == _U.session_id)
    elif group in ("purpose", "model"):
        columns = [_U.purpose if group == "purpose" else _U.model]
        query = select(*columns, *_sums())
    else:
        raise InvalidArgument(f"unknown group {group!r}")
    total = func.coalesce(func.sum(_U.prompt_tokens + _U.completion_tokens), 0)
    query = query.where(*f.where()).group_by(*columns).order_by(total.desc(), *columns)
    if limit is not None:
        query = query.limit(limit)
    with reading(engine) as conn:
        return _usage_rows(conn.execute(query).all(), len(columns))


def usage_over_time(engine: Engine, f: UsageFilter, bucket: str) -> list[UsageRow]:
    """The ledger summed per time bucket (UTC) and purpose, in time order; key = (bucket
    label, purpose)."""
    sqlite_format, pg_format = BUCKETS[bucket]
    if engine.dialect.name == "sqlite":
        label: Any = func.strftime(sqlite_format, _U.created_at)
    else:
        label = func.to_char(func.timezone("UTC", _U.created_at), pg_format)
    label = label.label("bucket")
    query = (select(label, _U.purpose, *_sums()).where(*f.where())
             .group_by(literal_column("bucket"), _U.purpose)
             .order_by(literal_column("bucket"), _U.purpose))
    with reading(engine) as conn:
        return _usage_rows(conn.execute(query).all(), 2)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """The ledger against the sessions' running totals, over the same sessions."""

    sessions: int
    ledger_tokens: int
    session_tokens: int
    mismatched: list[tuple[str, int, int]] = field(default_factory=list)
    """``(session id, total_tokens, ledger sum)`` of sessions where the two differ."""

    @property
    def reconciles(self) -> bool:
        """Whether every session's ``total_tokens`` equals its ledger sum."""
        return not self.mismatched and self.ledger_tokens == self.session_tokens


def reconcile(engine: Engine, tenant: Ref | None, session_id: str | None = None) -> \
        Reconciliation:
    """Each session's ``total_tokens`` against the sum of its ledger rows (all time), for
    ``tenant``'s sessions (or the one session)."""
    ledger = (select(func.coalesce(func.sum(_U.prompt_tokens + _U.completion_tokens), 0))
              .where(_U.session_id == _S.id).scalar_subquery())
    where: list[ColumnElement[bool]] = []
    if tenant is not None:
        where.append(ref_filter(chat_sessions, "tenant", tenant))
    if session_id is not None:
        where.append(_S.id == session_id)
    totals = select(func.count(), func.coalesce(func.sum(_S.total_tokens), 0)).where(*where)
    usage_where: list[ColumnElement[bool]] = []
    if tenant is not None:
        usage_where.append(ref_filter(chat_usage, "tenant", tenant))
    if session_id is not None:
        usage_where.append(_U.session_id == session_id)
    billed = select(func.coalesce(func.sum(_U.prompt_tokens + _U.completion_tokens), 0)
                    ).where(*usage_where)
    differ = (select(_S.id, _S.total_tokens, ledger).where(*where, _S.total_tokens != ledger)
              .order_by(_S.id).limit(20))
    with reading(engine) as conn:
        count, session_tokens = conn.execute(totals).one()
        ledger_tokens = int(conn.execute(billed).scalar_one())
        mismatched = [(r[0], int(r[1]), int(r[2])) for r in conn.execute(differ)]
    return Reconciliation(int(count), ledger_tokens, int(session_tokens), mismatched)


def usage_choices(engine: Engine, tenant: Ref | None) -> tuple[list[str], list[str]]:
    """The purposes and models the ledger holds (for the filter's choices)."""
    where = [ref_filter(chat_usage, "tenant", tenant)] if tenant is not None else []
    with reading(engine) as conn:
        purposes = [r[0] for r in conn.execute(
            select(_U.purpose).where(*where).distinct().order_by(_U.purpose))]
        models = [r[0] for r in conn.execute(
            select(_U.model).where(*where, _U.model.is_not(None)).distinct()
            .order_by(_U.model).limit(200))]
    return purposes, models


@dataclass(frozen=True, slots=True)
class LedgerLine:
    """One row of the ledger."""

    id: int
    session_id: str
    tenant: Ref
    purpose: str
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    created_at: datetime


def ledger_lines(engine: Engine, f: UsageFilter, *, limit: int) -> list[LedgerLine]:
    """The newest ledger rows matching ``f``."""
    query = (select(_U.id, _U.session_id, _U.tenant_type, _U.tenant_id, _U.tenant_id_int,
                    _U.purpose, _U.model, _U.prompt_tokens, _U.completion_tokens,
                    _U.created_at)
             .where(*f.where()).order_by(_U.created_at.desc(), _U.id.desc()).limit(limit))
    with reading(engine) as conn:
        out = []
        for r in conn.execute(query):
            tenant = Ref.from_columns(r[2], r[3], r[4])
            assert tenant is not None
            out.append(LedgerLine(int(r[0]), r[1], tenant, r[5], r[6], int(r[7]), int(r[8]),
                                  as_utc(r[9]) or r[9]))
        return out


# -- memories ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """What the memories list shows."""

    tenant: Ref | None = None
    scope: str | None = None
    actor: Ref | None = None
    subject: Ref | None = None
    session_id: str | None = None
    superseded: bool = False
    after: str | None = None


def list_memories(engine: Engine, f: MemoryFilter, *,
                  limit: int = PAGE) -> tuple[list[MemoryRow], str | None]:
    """A page of memories, newest id first, and the cursor of the next page."""
    query = select(memories)
    if f.tenant is not None:
        query = query.where(ref_filter(memories, "tenant", f.tenant))
    if f.scope:
        query = query.where(_Mem.scope == f.scope)
    if f.actor is not None:
        query = query.where(ref_filter(memories, "actor", f.actor))
    if f.subject is not None:
        query = query.where(ref_filter(memories, "subject", f.subject))
    if f.session_id:
        query = query.where(_Mem.source_session_id == f.session_id)
    if not f.superseded:
        query = query.where(_Mem.superseded_by.is_(None))
    cursor = decode_cursor(f.after)
    if cursor and isinstance(cursor[0], int):
        query = query.where(_Mem.id < cursor[0])
    query = query.order_by(_Mem.id.desc()).limit(limit + 1)
    with reading(engine) as conn:
        rows = [memory_row(r) for r in conn.execute(query)]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, encode_cursor(rows[-1].id) if more and rows else None


def get_memory(engine: Engine, memory_id: int, tenant: Ref | None) -> MemoryRow | None:
    """The memory, or ``None`` when there is none of that id (in ``tenant``, when given)."""
    query = select(memories).where(_Mem.id == memory_id)
    if tenant is not None:
        query = query.where(ref_filter(memories, "tenant", tenant))
    with reading(engine) as conn:
        row = conn.execute(query).first()
    return None if row is None else memory_row(row)


def memory_versions(engine: Engine, memory: MemoryRow, *, depth: int = 20) -> \
        tuple[list[MemoryRow], list[MemoryRow]]:
    """The versions ``memory`` replaced (newest first) and those that replaced it (in
    order), within its tenant, at most ``depth`` each way."""
    older: list[MemoryRow] = []
    newer: list[MemoryRow] = []
    tenant = ref_filter(memories, "tenant", memory.tenant)
    with reading(engine) as conn:
        current = memory.id
        for _ in range(depth):
            row = conn.execute(select(memories).where(tenant, _Mem.superseded_by == current)
                               .order_by(_Mem.id.desc()).limit(1)).first()
            if row is None:
                break
            older.append(memory_row(row))
            current = older[-1].id
        following = memory.superseded_by
        while following is not None and len(newer) < depth:
            row = conn.execute(select(memories).where(tenant, _Mem.id == following)).first()
            if row is None:
                break
            newer.append(memory_row(row))
            following = newer[-1].superseded_by
    return older, newer


def distilled_after(engine: Engine, memory: MemoryRow) -> int:
    """The seq after which ``memory``'s distillation read: the previous distillation of
    its session that wrote memories ended there (0: none did)."""
    if memory.source_session_id is None:
        return 0
    query = select(func.max(_Mem.source_through_seq)).where(
        ref_filter(memories, "tenant", memory.tenant),
        _Mem.source_session_id == memory.source_session_id,
        _Mem.source_through_seq < memory.source_through_seq)
    with reading(engine) as conn:
        return int(conn.execute(query).scalar() or 0)


def memory_vectors(engine: Engine, memory_id: int) -> list[tuple[str, int]]:
    """``(model, dimensions)`` of each vector stored for the memory (none when the
    database has no vector table)."""
    with reading(engine) as conn:
        if not vector_table_exists(conn):
            return []
        rows = conn.execute(select(_vectors.c.model, _vectors.c.dim).where(
            _vectors.c.memory_id == memory_id).order_by(_vectors.c.model)).all()
    return [(str(r[0]), int(r[1])) for r in rows]


def memory_counts(engine: Engine, tenant: Ref | None) -> dict[str, int]:
    """Live memories per scope."""
    query = select(_Mem.scope, func.count()).where(_Mem.superseded_by.is_(None))
    if tenant is not None:
        query = query.where(ref_filter(memories, "tenant", tenant))
    with reading(engine) as conn:
        return {r[0]: int(r[1]) for r in conn.execute(query.group_by(_Mem.scope))}


def unembedded(engine: Engine, model: str, tenant: Ref | None) -> int | None:
    """Live memories without a vector of ``model`` (``None``: no vector table)."""
    query = select(func.count()).where(_Mem.superseded_by.is_(None), ~exists().where(
        _vectors.c.memory_id == _Mem.id, _vectors.c.model == model))
    if tenant is not None:
        query = query.where(ref_filter(memories, "tenant", tenant))
    with reading(engine) as conn:
        if not vector_table_exists(conn):
            return None
        return int(conn.execute(query).scalar_one())


def scope_label(scope: str, subject: Ref | None, actor: Ref | None) -> str:
    """``tenant``, ``subject TYPE:ID`` or ``personal TYPE:ID``."""
    if scope == "subject" and subject is not None:
        return f"subject {subject}"
    if scope == "personal" and actor is not None:
        return f"personal {actor}"
    return scope


__all__ = [
    "LOG_PAGE", "PAGE", "SORTS", "STATES", "CallLink", "LedgerLine", "LogWindow",
    "MemoryFilter", "MemoryRow", "Reconciliation", "SessionFilter", "SessionLine",
    "SessionPage", "UsageFilter", "UsageRow",
]
