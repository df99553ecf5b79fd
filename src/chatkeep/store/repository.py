"""The repository: the only code in chatkeep that issues SQL.

Every write is one short transaction. Ordering and concurrency are settled by
the database: a message's ``seq`` comes from an ``UPDATE ... RETURNING`` on the
session row (a row lock on PostgreSQL, the write lock on SQLite), so it is
gapless and never duplicated; the summary is written with compare-and-set on
``summary_version``. No in-process lock is relied on.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Connection,
    Engine,
    Integer,
    Select,
    String,
    Text,
    bindparam,
    column,
    delete,
    func,
    insert,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.util import await_only

from chatkeep.errors import (
    ChatkeepError,
    InvalidMessage,
    SessionClosed,
    SessionNotFound,
    StoreError,
)
from chatkeep.messages import Message, MessageDraft, Role, ToolCall, Usage
from chatkeep.refs import Ref
from chatkeep.store.connections import autocommit, reading, transaction
from chatkeep.store.schema import (
    TS,
    chat_messages,
    chat_sessions,
    chat_tool_calls,
    chat_usage,
    ref_filter,
    ref_values,
)

T = TypeVar("T")


def utcnow() -> datetime:
    """Aware UTC now (the one clock the store uses, replaceable in tests)."""
    return datetime.now(UTC)


def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def new_session_id() -> str:
    """A time-ordered UUID (version 7 layout): ids sort by creation and index well."""
    ms = int(datetime.now(UTC).timestamp() * 1000)
    rand = uuid.uuid4().int & ((1 << 74) - 1)
    high = (ms << 80) | (0x7 << 76) | ((rand >> 62) << 64)
    value = high | (0b10 << 62) | (rand & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


@dataclass(frozen=True, slots=True)
class SessionRow:
    """A snapshot of one ``chat_sessions`` row."""

    id: str
    tenant: Ref
    actor: Ref | None
    subject: Ref | None
    title: str | None
    anonymize_pii: bool
    total_tokens: int
    last_seq: int
    summary: str | None
    summary_watermark: int
    summary_version: int
    distilled_through: int
    distil_version: int
    pii_vault: str | None
    pii_vault_version: int
    closed_at: datetime | None
    last_message_at: datetime
    created_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageLine:
    """One group of the usage report."""

    tenant: Ref
    purpose: str
    model: str | None
    prompt_tokens: int
    completion_tokens: int
    calls: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens of the group."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class BilledUsage:
    """Usage to record with a write: ``purpose`` is chat, summary, distil or manual."""

    purpose: str
    usage: Usage
    model: str | None = None


def _row_to_session(row: Any) -> SessionRow:
    m = row._mapping
    tenant = Ref.from_columns(m["tenant_type"], m["tenant_id"], m["tenant_id_int"])
    assert tenant is not None
    return SessionRow(
        id=m["id"], tenant=tenant,
        actor=Ref.from_columns(m["actor_type"], m["actor_id"], m["actor_id_int"]),
        subject=Ref.from_columns(m["subject_type"], m["subject_id"], m["subject_id_int"]),
        title=m["title"], anonymize_pii=bool(m["anonymize_pii"]),
        total_tokens=int(m["total_tokens"]), last_seq=int(m["last_seq"]),
        summary=m["summary"], summary_watermark=int(m["summary_watermark"]),
        summary_version=int(m["summary_version"]),
        distilled_through=int(m["distilled_through"]), distil_version=int(m["distil_version"]),
        pii_vault=m["pii_vault"], pii_vault_version=int(m["pii_vault_version"]),
        closed_at=as_utc(m["closed_at"]),
        last_message_at=as_utc(m["last_message_at"]) or utcnow(),
        created_at=as_utc(m["created_at"]) or utcnow(), metadata=dict(m["metadata"] or {}),
    )


def new_messages(session_id: str, first: int, now: datetime,
                 batch: Sequence[tuple[MessageDraft, int | None, Any]]) -> list[Message]:
    """The messages a batch append writes: consecutive ``seq`` from ``first``, one clock
    (shared by the SQLAlchemy path and the direct SQLite path)."""
    return [Message(session_id, first + offset, draft.role, draft.content, draft.tool_calls,
                    draft.tool_call_id, draft.name, tokens, now, dict(draft.metadata),
                    dict(draft.native))
            for offset, (draft, tokens, _) in enumerate(batch)]


def _row_to_message(row: Any) -> Message:
    m = row._mapping
    calls = tuple(ToolCall.from_openai(c) for c in (m["tool_calls"] or []))
    return Message(
        session_id=m["session_id"], seq=int(m["seq"]), role=Role(m["role"]),
        content=m["content"], tool_calls=calls, tool_call_id=m["tool_call_id"],
        name=m["name"], tokens=m["tokens"], created_at=as_utc(m["created_at"]),
        metadata=dict(m["metadata"] or {}), native=dict(m["native"] or {}),
        retracted_at=as_utc(m["retracted_at"]),
    )


_MESSAGE_COLUMNS = [
    chat_messages.c.session_id, chat_messages.c.seq, chat_messages.c.role,
    chat_messages.c.content, chat_messages.c.tool_calls, chat_messages.c.tool_call_id,
    chat_messages.c.name, chat_messages.c.tokens, chat_messages.c.created_at,
    chat_messages.c.metadata, chat_messages.c.native, chat_messages.c.retracted_at,
]
_LIVE = chat_messages.c.retracted_at.is_(None)


# The read every turn makes, prebuilt like the write path's statements below.
_SESSION_BY_ID = select(chat_sessions).where(chat_sessions.c.id == bindparam("b_session_id"))
_M = chat_messages.c
_AFTER_WATERMARK = select(*_MESSAGE_COLUMNS).where(
    _M.session_id == bindparam("b_session_id"), _M.seq > bindparam("b_watermark"), _LIVE)
_ALL_LIVE = _AFTER_WATERMARK.order_by(_M.seq)
"""A session never summarised: every live message."""
_UNSUMMARISED = union_all(
    select(*_MESSAGE_COLUMNS).where(
        _M.session_id == bindparam("b_session_id"), _M.role == "system",
        _M.seq <= bindparam("b_watermark"), _LIVE),
    _AFTER_WATERMARK).order_by("seq")
"""Pinned system messages at or below the watermark, then every live message after it."""


def _split_at(messages: list[Message], watermark: int) -> tuple[list[Message], list[Message]]:
    """Messages in seq order -> (those at or below ``watermark``, those after it)."""
    split = next((i for i, m in enumerate(messages) if m.seq > watermark), len(messages))
    return messages[:split], messages[split:]


# Prebuilt statements for the write path: built once, so an append pays for parameter
# binding only (building a statement per call cost more than the SQLite work itself).
_S = chat_sessions.c
_INSERT_SESSION = insert(chat_sessions).returning(chat_sessions)
_CLAIM_SEQ = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"), _S.closed_at.is_(None))
    .values(last_seq=_S.last_seq + bindparam("b_count", type_=Integer()),
            last_message_at=bindparam("b_now", type_=TS),
            total_tokens=_S.total_tokens + bindparam("b_billed", type_=BigInteger()))
    .returning(chat_sessions)
)
_SET_SUMMARY = (
    update(chat_sessions)
    .where(_S.id == bindparam("b_session_id"),
           _S.summary_version == bindparam("b_expected", type_=Integer()),
           _S.summary_watermark < bindparam("b_watermark", type_=Integer()))
    .values(summary=bindparam("b_summary"),
            summary_watermark=bindparam("b_watermark", type_=Integer()),
            summary_version=bindparam("b_expected", type_=Integer()) + 1)
    .returning(chat_sessions)
)
"""A fold's compare-and-set: the new summary and watermark, unless another fold won."""
_INSERT_MESSAGE = insert(chat_messages)
_INSERT_TOOL_CALL = insert(chat_tool_calls)
_INSERT_USAGE = insert(chat_usage)
_ANSWER_CALL = (
    update(chat_tool_calls)
    .where(chat_tool_calls.c.session_id == bindparam("b_session_id"),
           chat_tool_calls.c.call_id == bindparam("b_call_id"),
           chat_tool_calls.c.call_seq < bindparam("b_seq", type_=Integer()),
           chat_tool_calls.c.result_seq.is_(None))
    .values(result_seq=bindparam("b_seq", type_=Integer()))
    .returning(chat_tool_calls.c.call_id)
)


def _plain(batch: Sequence[tuple[MessageDraft, int | None, Any]]) -> bool:
    """No tool calls and no tool results: nothing to check against ``chat_tool_calls``."""
    return all(not draft.tool_calls and draft.role is not Role.TOOL for draft, _, _ in batch)


def _pg_append(with_usage: bool) -> Select[Any]:
    """PostgreSQL's one-statement append: ``_CLAIM_SEQ`` as a CTE, the messages (and
    usage rows) inserted from JSON recordsets beside it, the session row returned. Only
    a claimed (open, existing) session inserts anything."""
    claimed = _CLAIM_SEQ.cte("claimed")
    m = func.json_to_recordset(bindparam("b_rows", type_=JSON())).table_valued(
        column("k", Integer), column("role", String), column("content", Text),
        column("tool_call_id", String), column("name", String), column("tokens", Integer),
        column("metadata", JSON), column("native", JSON)).render_derived("m", with_types=True)
    first = claimed.c.last_seq - bindparam("b_count", type_=Integer())
    added = insert(chat_messages).from_select(
        ["session_id", "seq", "role", "content", "tool_call_id", "name", "tokens",
         "created_at", "metadata", "native"],
        select(claimed.c.id, first + m.c.k, m.c.role, m.c.content, m.c.tool_call_id,
               m.c.name, m.c.tokens, bindparam("b_now", type_=TS), m.c.metadata,
               m.c.native).select_from(claimed.join(m, true()))).cte("added")
    statement = select(claimed).add_cte(added)
    if with_usage:
        u = func.json_to_recordset(bindparam("b_usages", type_=JSON())).table_valued(
            column("purpose", String), column("model", String),
            column("prompt_tokens", Integer), column("completion_tokens", Integer),
        ).render_derived("u", with_types=True)
        billed = insert(chat_usage).from_select(
            ["session_id", "tenant_type", "tenant_id", "tenant_id_int", "purpose", "model",
             "prompt_tokens", "completion_tokens", "created_at"],
            select(claimed.c.id, claimed.c.tenant_type, claimed.c.tenant_id,
                   claimed.c.tenant_id_int, u.c.purpose, u.c.model, u.c.prompt_tokens,
                   u.c.completion_tokens, bindparam("b_now", type_=TS))
            .select_from(claimed.join(u, true()))).cte("billed")
        statement = statement.add_cte(billed)
    return statement


_PG_APPEND = {False: _pg_append(False), True: _pg_append(True)}


def _refuse_append(conn: Connection, session_id: str) -> NoReturn:
    """Why no seq could be claimed: the session is missing or closed."""
    _refuse(session_id, exists=conn.execute(
        select(chat_sessions.c.id).where(chat_sessions.c.id == session_id)).first() is not None)


def _refuse(session_id: str, *, exists: bool) -> NoReturn:
    """An append refused: the session is missing, or (it exists) closed."""
    if not exists:
        raise SessionNotFound(f"no session {session_id!r}")
    raise SessionClosed(f"session {session_id!r} is closed")


def _usage_values(session: SessionRow, billed: BilledUsage, now: datetime) -> dict[str, Any]:
    return {"session_id": session.id, **ref_values("tenant", session.tenant),
            "purpose": billed.purpose, "model": billed.model,
            "prompt_tokens": billed.usage.prompt_tokens,
            "completion_tokens": billed.usage.completion_tokens, "created_at": now}


def _append_error(exc: IntegrityError | sqlite3.IntegrityError,
                  batch: Sequence[tuple[MessageDraft, int | None, BilledUsage | None]],
                  ) -> ChatkeepError:
    """What a refused append means: a reused tool-call id, or a store failure."""
    orig = exc.orig if isinstance(exc, IntegrityError) else exc
    calls = [c.id for d, _, _ in batch for c in d.tool_calls]
    if calls and "tool_calls" in str(orig):
        return InvalidMessage(f"a tool call id in {calls} is already used in this session")
    return StoreError(f"could not append message: {orig}")


class Repository:
    """SQL for sessions, messages, tool calls and usage. Thread-safe; share one per process."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock
        self._sqlite = _SqliteDirect(engine) if _SqliteDirect.serves(engine) else None

    # -- schema --------------------------------------------------------------------------

    def create_schema(self) -> None:
        """Create or upgrade the schema (embedded use); production may run
        ``chatkeep db upgrade`` as a deployment step instead."""
        from chatkeep.store.migrate import ensure_schema

        ensure_schema(self.engine)

    def transaction(self) -> AbstractContextManager[Connection]:
        """One transaction; database errors surface as ``StoreError`` after rollback."""
        return transaction(self.engine)

    def reading(self) -> AbstractContextManager[Connection]:
        """A connection for reads; database errors surface as ``StoreError`` here too."""
        return reading(self.engine)

    # -- sessions ------------------------------------------------------------------------

    def create_session(self, tenant: Ref, actor: Ref | None, subject: Ref | None, *,
                       title: str | None = None, anonymize_pii: bool = True,
                       metadata: dict[str, Any] | None = None) -> SessionRow:
        """Insert a session with a new time-ordered id; returns its row."""
        with self.transaction() as conn:
            return self._insert_session(conn, tenant, actor, subject, title=title,
                                        anonymize_pii=anonymize_pii, metadata=metadata)

    def create_session_with_messages(
        self, tenant: Ref, actor: Ref | None, subject: Ref | None,
        batch: Sequence[tuple[MessageDraft, int | None, BilledUsage | None]], *,
        title: str | None = None, anonymize_pii: bool = True,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[list[Message], SessionRow]:
        """Create a session and append ``batch`` to it in one transaction (an import):
        either the session exists with every message, or nothing was written."""
        if not batch:
            raise InvalidMessage("nothing to append: the batch is empty")
        try:
            with self.transaction() as conn:
                created = self._insert_session(conn, tenant, actor, subject, title=title,
                                               anonymize_pii=anonymize_pii, metadata=metadata)
                return self._append(conn, created.id, batch)
        except IntegrityError as exc:
            raise _append_error(exc, batch) from None

    def _insert_session(self, conn: Connection, tenant: Ref, actor: Ref | None,
                        subject: Ref | None, *, title: str | None, anonymize_pii: bool,
                        metadata: dict[str, Any] | None) -> SessionRow:
        now = self.clock()
        values = {
            "id": new_session_id(), **ref_values("tenant", tenant),
            **ref_values("actor", actor), **ref_values("subject", subject),
            "title": title, "anonymize_pii": anonymize_pii, "total_tokens": 0, "last_seq": 0,
            "summary": None, "summary_watermark": 0, "summary_version": 0,
            "distilled_through": 0, "distil_version": 0, "pii_vault": None,
            "pii_vault_version": 0, "closed_at": None, "last_message_at": now,
            "created_at": now, "metadata": metadata or {},
        }
        return _row_to_session(conn.execute(_INSERT_SESSION, values).one())

    def get_session(self, session_id: str, tenant: Ref | None = None) -> SessionRow:
        """Load a session; with ``tenant`` given, another tenant's session is not found."""
        with self.reading() as conn:
            return self._load_session(conn, session_id, tenant)

    def _load_session(self, conn: Connection, session_id: str, tenant: Ref | None) -> SessionRow:
        if tenant is None:  # every turn's read: a prebuilt statement
            row = conn.execute(_SESSION_BY_ID, {"b_session_id": session_id}).first()
        else:
            row = conn.execute(_SESSION_BY_ID.where(ref_filter(chat_sessions, "tenant", tenant)),
                               {"b_session_id": session_id}).first()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r}"
                                  + (f" for tenant {tenant}" if tenant else ""))
        return _row_to_session(row)

    def list_sessions(self, tenant: Ref, *, actor: Ref | None = None,
                      subject: Ref | None = None, limit: int = 50,
                      before: datetime | None = None) -> list[SessionRow]:
        """A tenant's sessions, most recently active first (served by the tenant index)."""
        query = select(chat_sessions).where(ref_filter(chat_sessions, "tenant", tenant))
        if actor is not None:
            query = query.where(ref_filter(chat_sessions, "actor", actor))
        if subject is not None:
            query = query.where(ref_filter(chat_sessions, "subject", subject))
        if before is not None:
            query = query.where(chat_sessions.c.last_message_at < before)
        query = query.order_by(chat_sessions.c.last_message_at.desc(),
                               chat_sessions.c.id.desc()).limit(limit)
        with self.reading() as conn:
            return [_row_to_session(r) for r in conn.execute(query)]

    def update_session(self, session_id: str, **values: Any) -> SessionRow:
        """Set plain columns (``anonymize_pii``, ``title``, ``metadata``, ``closed_at``)."""
        allowed = {"anonymize_pii", "title", "metadata", "closed_at"}
        unknown = set(values) - allowed
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)} directly")
        with self.transaction() as conn:
            row = conn.execute(
                update(chat_sessions).where(chat_sessions.c.id == session_id).values(**values)
                .returning(chat_sessions)
            ).first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}")
            return _row_to_session(row)

    # -- messages ------------------------------------------------------------------------

    def append_message(self, session_id: str, role: Role, content: str | None, *,
                       tool_calls: Sequence[ToolCall] = (), tool_call_id: str | None = None,
                       name: str | None = None, tokens: int | None = None,
                       metadata: dict[str, Any] | None = None,
                       billed: BilledUsage | None = None) -> tuple[Message, SessionRow]:
        """Append one message (and its tool calls and usage) atomically; returns it and
        the session as it stands after the write."""
        draft = MessageDraft(role, content, tuple(tool_calls), tool_call_id, name,
                             metadata=metadata or {})
        messages, session = self.append_messages(session_id, [(draft, tokens, billed)])
        return messages[0], session

    def append_messages(
        self, session_id: str,
        batch: Sequence[tuple[MessageDraft, int | None, BilledUsage | None]],
    ) -> tuple[list[Message], SessionRow]:
        """Append a batch of messages in one transaction: all of them, with consecutive
        ``seq`` values, their tool calls and their usage, or none (a tool result may answer
        a call made earlier in the same batch). Returns them and the session row after.

        The hot path of every ``add_*``: prebuilt statements (no per-call SQL construction),
        one ``UPDATE ... RETURNING`` for the seq range, one insert for the messages, one for
        their tool calls and one ``UPDATE ... RETURNING`` per tool result. On SQLite the
        same statements go straight to the driver (see ``_SqliteDirect``)."""
        if not batch:
            raise InvalidMessage("nothing to append: the batch is empty")
        if self._sqlite is not None:
            return self._sqlite.append(session_id, batch, self.clock())
        if self.engine.dialect.name == "postgresql" and _plain(batch):
            return self._append_in_one_statement(session_id, batch)
        try:
            with self.transaction() as conn:
                return self._append(conn, session_id, batch)
        except IntegrityError as exc:
            raise _append_error(exc, batch) from None

    def _append(self, conn: Connection, session_id: str,
                batch: Sequence[tuple[MessageDraft, int | None, BilledUsage | None]],
                ) -> tuple[list[Message], SessionRow]:
        now = self.clock()
        billed_tokens = sum(b.usage.total_tokens for _, _, b in batch if b is not None)
        session = self._claim_seq(conn, session_id, now, billed_tokens, len(batch))
        first = session.last_seq - len(batch) + 1
        rows: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        usages: list[dict[str, Any]] = []
        messages = new_messages(session_id, first, now, batch)
        for message, (draft, tokens, billed) in zip(messages, batch, strict=True):
            seq = message.seq
            rows.append({
                "session_id": session_id, "seq": seq, "role": draft.role.value,
                "content": draft.content,
                "tool_calls": [c.to_openai() for c in draft.tool_calls] or None,
                "tool_call_id": draft.tool_call_id, "name": draft.name, "tokens": tokens,
                "created_at": now, "metadata": message.metadata,
                "native": message.native or None,
            })
            calls.extend({"session_id": session_id, "call_id": c.id, "call_seq": seq,
                          "name": c.name, "result_seq": None} for c in draft.tool_calls)
            if billed is not None:
                usages.append(_usage_values(session, billed, now))
        # Calls and answers first: a refused answer or a reused call id then fails before
        # anything takes a sequence value (PostgreSQL does not give those back).
        if calls:
            conn.execute(_INSERT_TOOL_CALL, calls)
        for message in messages:
            if message.role is Role.TOOL:
                self._answer_tool_call(conn, session_id, message.tool_call_id, message.seq)
        conn.execute(_INSERT_MESSAGE, rows)
        if usages:
            conn.execute(_INSERT_USAGE, usages)
        return messages, session

    def _append_in_one_statement(
        self, session_id: str,
        batch: Sequence[tuple[MessageDraft, int | None, BilledUsage | None]],
    ) -> tuple[list[Message], SessionRow]:
        """PostgreSQL, a batch without tool plumbing: claim the seq range, insert the
        messages and their usage in one statement (data-modifying CTEs), which is its own
        transaction: one round trip instead of BEGIN, UPDATE, INSERT(s) and COMMIT."""
        now = self.clock()
        rows = [{"k": k, "role": draft.role.value, "content": draft.content,
                 "tool_call_id": draft.tool_call_id, "name": draft.name, "tokens": tokens,
                 "metadata": dict(draft.metadata), "native": dict(draft.native) or None}
                for k, (draft, tokens, _) in enumerate(batch, start=1)]
        usages = [{"purpose": b.purpose, "model": b.model,
                   "prompt_tokens": b.usage.prompt_tokens,
                   "completion_tokens": b.usage.completion_tokens}
                  for _, _, b in batch if b is not None]
        params = {"b_session_id": session_id, "b_count": len(batch), "b_now": now,
                  "b_billed": sum(b.usage.total_tokens for _, _, b in batch if b is not None),
                  "b_rows": rows, "b_usages": usages}
        with autocommit(self.engine) as conn:
            row = conn.execute(_PG_APPEND[bool(usages)], params).first()
            if row is None:
                _refuse_append(conn, session_id)
        session = _row_to_session(row)
        first = session.last_seq - len(batch) + 1
        return new_messages(session_id, first, now, batch), session

    def _claim_seq(self, conn: Connection, session_id: str, now: datetime,
                   billed_tokens: int, count: int = 1) -> SessionRow:
        """Take the next ``count`` seq values (the row lock orders concurrent appenders);
        returns the session row as the update left it (``last_seq`` = the last one taken)."""
        row = conn.execute(_CLAIM_SEQ, {"b_session_id": session_id, "b_count": count,
                                        "b_now": now, "b_billed": billed_tokens}).first()
        if row is None:
            _refuse_append(conn, session_id)
        return _row_to_session(row)

    def _answer_tool_call(self, conn: Connection, session_id: str, call_id: str | None,
                          seq: int) -> None:
        """Mark the call answered by ``seq``: one ``UPDATE ... RETURNING`` on the happy
        path; only a refused answer reads the call again to say why."""
        if not call_id:
            raise InvalidMessage("a tool message needs the tool_call_id it answers")
        answered = conn.execute(_ANSWER_CALL, {"b_session_id": session_id,
                                               "b_call_id": call_id, "b_seq": seq}).first()
        if answered is not None:
            return
        row = conn.execute(
            select(chat_tool_calls.c.call_seq, chat_tool_calls.c.result_seq).where(
                chat_tool_calls.c.session_id == session_id, chat_tool_calls.c.call_id == call_id)
        ).first()
        if row is None or row[0] >= seq:
            raise InvalidMessage(
                f"tool result for {call_id!r} has no matching earlier tool call in this session")
        raise InvalidMessage(
            f"tool call {call_id!r} was already answered by message seq {row[1]}")

    def read_messages(self, session_id: str, *, after_seq: int = 0,
                      through_seq: int | None = None, limit: int | None = None,
                      live_only: bool = False) -> list[Message]:
        """Messages with ``after_seq < seq <= through_seq`` in order (index range scan);
        ``live_only`` leaves retracted ones out."""
        query = select(*_MESSAGE_COLUMNS).where(
            chat_messages.c.session_id == session_id, chat_messages.c.seq > after_seq)
        if live_only:
            query = query.where(_LIVE)
        if through_seq is not None:
            query = query.where(chat_messages.c.seq <= through_seq)
        query = query.order_by(chat_messages.c.seq)
        if limit is not None:
            query = query.limit(limit)
        with self.reading() as conn:
            return [_row_to_message(r) for r in conn.execute(query)]

    def read_history(self, session_id: str) -> tuple[SessionRow, list[Message],
                                                      list[Message]]:
        """What ``build_history`` reads, on one connection: the session row, then its
        system messages at or below the summary watermark (pinned instructions, a partial
        index) and every live message after it (an index range), so cost follows the
        tail, not the session's length. (The watermark goes to the second statement as a
        value, not joined from the row: then the planner knows how few rows follow it
        and walks the index even in a table one long session dominates.)"""
        if self._sqlite is not None:
            return self._sqlite.read_history(session_id)
        with self.reading() as conn:
            row = self._load_session(conn, session_id, None)
            return (row, *self._read_unsummarised(conn, session_id, row.summary_watermark))

    def _read_unsummarised(self, conn: Connection, session_id: str,
                           watermark: int) -> tuple[list[Message], list[Message]]:
        query = _UNSUMMARISED if watermark > 0 else _ALL_LIVE
        rows = conn.execute(query, {"b_session_id": session_id, "b_watermark": watermark})
        return _split_at([_row_to_message(r) for r in rows], watermark)

    # -- retraction ----------------------------------------------------------------------

    def retract_last(self, session_id: str) -> Message | None:
        """Mark the newest live message retracted (kept for the record, out of every
        replay); frees its tool-call bookkeeping, so a retried call may reuse its id or be
        answered again. Returns it, or ``None`` when nothing is live."""
        now = self.clock()
        with self.transaction() as conn:
            row = conn.execute(select(*_MESSAGE_COLUMNS).where(
                chat_messages.c.session_id == session_id, _LIVE)
                .order_by(chat_messages.c.seq.desc()).limit(1)).first()
            if row is None:
                self._load_session(conn, session_id, None)  # SessionNotFound if missing
                return None
            message = _row_to_message(row)
            conn.execute(update(chat_messages).where(
                chat_messages.c.session_id == session_id, chat_messages.c.seq == message.seq)
                .values(retracted_at=now))
            self._free_tool_calls(conn, session_id, message)
        return dataclasses.replace(message, retracted_at=now)

    def retract_all(self, session_id: str) -> tuple[int, SessionRow]:
        """Retract every live message and drop the summary built from them, in one
        transaction; returns how many messages and the session row after."""
        now = self.clock()
        with self.transaction() as conn:
            count = conn.execute(update(chat_messages).where(
                chat_messages.c.session_id == session_id, _LIVE)
                .values(retracted_at=now)).rowcount
            conn.execute(delete(chat_tool_calls).where(
                chat_tool_calls.c.session_id == session_id))
            row = conn.execute(update(chat_sessions).where(chat_sessions.c.id == session_id)
                               .values(summary=None,
                                       summary_version=chat_sessions.c.summary_version + 1)
                               .returning(chat_sessions)).first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}")
            return int(count), _row_to_session(row)

    def _free_tool_calls(self, conn: Connection, session_id: str, message: Message) -> None:
        if message.tool_calls:
            conn.execute(delete(chat_tool_calls).where(
                chat_tool_calls.c.session_id == session_id,
                chat_tool_calls.c.call_seq == message.seq))
        if message.role is Role.TOOL:
            conn.execute(update(chat_tool_calls).where(
                chat_tool_calls.c.session_id == session_id,
                chat_tool_calls.c.result_seq == message.seq).values(result_seq=None))

    # -- usage ---------------------------------------------------------------------------

    def add_usage(self, session_id: str, billed: BilledUsage) -> SessionRow:
        """Record usage and move ``total_tokens`` by the same amount, in one transaction.
        Allowed on a closed session: the tokens were spent all the same."""
        now = self.clock()
        with self.transaction() as conn:
            row = conn.execute(
                update(chat_sessions).where(chat_sessions.c.id == session_id)
                .values(total_tokens=chat_sessions.c.total_tokens + billed.usage.total_tokens)
                .returning(chat_sessions)
            ).first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}")
            session = _row_to_session(row)
            self._insert_usage(conn, session, billed, now)
            return session

    def _insert_usage(self, conn: Connection, session: SessionRow, billed: BilledUsage,
                      now: datetime) -> None:
        conn.execute(_INSERT_USAGE, _usage_values(session, billed, now))

    def usage_report(self, tenant: Ref | None = None, *, since: datetime | None = None,
                     until: datetime | None = None) -> list[UsageLine]:
        """Token usage grouped by tenant, purpose and model."""
        u = chat_usage.c
        query = select(
            u.tenant_type, u.tenant_id, u.tenant_id_int, u.purpose, u.model,
            func.coalesce(func.sum(u.prompt_tokens), 0),
            func.coalesce(func.sum(u.completion_tokens), 0), func.count(),
        ).group_by(u.tenant_type, u.tenant_id, u.tenant_id_int, u.purpose, u.model)
        if tenant is not None:
            query = query.where(ref_filter(chat_usage, "tenant", tenant))
        if since is not None:
            query = query.where(u.created_at >= since)
        if until is not None:
            query = query.where(u.created_at < until)
        with self.reading() as conn:
            rows = conn.execute(query.order_by(u.tenant_type, u.tenant_id, u.purpose)).all()
        lines = []
        for t_type, t_id, t_int, purpose, model, prompt, completion, calls in rows:
            ref = Ref.from_columns(t_type, t_id, t_int)
            assert ref is not None
            lines.append(UsageLine(ref, purpose, model, int(prompt), int(completion), int(calls)))
        return lines

    def usage_sum(self, session_id: str) -> int:
        """Sum of the ledger for one session (what ``total_tokens`` must equal)."""
        u = chat_usage.c
        query = select(func.coalesce(func.sum(u.prompt_tokens + u.completion_tokens), 0)).where(
            u.session_id == session_id)
        with self.reading() as conn:
            return int(conn.execute(query).scalar_one())

    # -- summary -------------------------------------------------------------------------

    def compare_and_set_summary(self, session_id: str, expected_version: int, summary: str,
                                watermark: int) -> SessionRow | None:
        """Store a new summary and watermark if nobody else did since ``expected_version``.

        Returns the new row, or ``None`` when the race was lost (the caller re-reads).
        """
        with self.transaction() as conn:
            result = conn.execute(_SET_SUMMARY, {
                "b_session_id": session_id, "b_expected": expected_version,
                "b_summary": summary, "b_watermark": watermark}).first()
            return None if result is None else _row_to_session(result)

    # -- PII vault -----------------------------------------------------------------------

    def read_vault(self, session_id: str) -> tuple[str | None, int]:
        """The sealed placeholder mapping of a session and its version."""
        query = select(chat_sessions.c.pii_vault, chat_sessions.c.pii_vault_version).where(
            chat_sessions.c.id == session_id)
        with self.reading() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r}")
        return row[0], int(row[1])

    def vaults_after(self, session_id: str, limit: int) -> list[tuple[str, str, int]]:
        """``(session id, sealed vault, version)`` of sessions holding a vault, in id order
        after ``session_id`` (``""`` = from the start): what a re-key walks, in pages."""
        query = (select(chat_sessions.c.id, chat_sessions.c.pii_vault,
                        chat_sessions.c.pii_vault_version)
                 .where(chat_sessions.c.id > session_id, chat_sessions.c.pii_vault.is_not(None))
                 .order_by(chat_sessions.c.id).limit(limit))
        with self.reading() as conn:
            return [(r[0], r[1], int(r[2])) for r in conn.execute(query)]

    def count_vaults(self) -> int:
        """How many sessions hold a placeholder vault."""
        query = select(func.count()).where(chat_sessions.c.pii_vault.is_not(None))
        with self.reading() as conn:
            return int(conn.execute(query).scalar_one())

    def compare_and_set_vault(self, session_id: str, expected_version: int, blob: str) -> bool:
        """Store a grown placeholder mapping unless another writer did first."""
        with self.transaction() as conn:
            result = conn.execute(
                update(chat_sessions)
                .where(chat_sessions.c.id == session_id,
                       chat_sessions.c.pii_vault_version == expected_version)
                .values(pii_vault=blob, pii_vault_version=expected_version + 1))
            return result.rowcount == 1


class _Pysqlite:
    """Statements straight to a ``sqlite3`` connection."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self.db.execute(sql, params).fetchall()

    def many(self, sql: str, rows: list[list[Any]]) -> None:
        if len(rows) == 1:
            self.db.execute(sql, rows[0])
        else:
            self.db.executemany(sql, rows)


class _Aiosqlite:
    """Statements to an aiosqlite connection, awaited from inside the async bridge: one
    hop to its thread per statement (``execute_fetchall``), where SQLAlchemy's adapter
    makes four (cursor, execute, fetch, close)."""

    def __init__(self, db: Any) -> None:
        self.db = db

    @property
    def in_transaction(self) -> bool:
        return bool(self.db.in_transaction)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return list(await_only(self.db.execute_fetchall(sql, params)))

    def many(self, sql: str, rows: list[list[Any]]) -> None:
        for row in rows:
            await_only(self.db.execute_fetchall(sql, row))


class _SqliteDirect:
    """A turn's append and read on the SQLite driver itself (pysqlite, or aiosqlite under
    the async API), for SQLite files.

    The same statements as the Core path (``_CLAIM_SEQ``, the inserts, ``_ANSWER_CALL``;
    the prebuilt reads compiled once), sent without SQLAlchemy's per-statement machinery,
    which cost more than SQLite's own work (an append is ~0.1 ms of SQLite). Values go
    through the dialect's own type processors, so the stored bytes are those the Core path
    writes and the values read those it reads (tests compare both).
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        dialect = engine.dialect
        quote = dialect.identifier_preparer.quote

        def bind(column: Any) -> Callable[[Any], Any] | None:
            processor: Callable[[Any], Any] | None = \
                column.type.dialect_impl(dialect).bind_processor(dialect)
            return processor

        def insert_sql(table: Any, names: Sequence[str]) -> tuple[str, _Processors]:
            sql = (f"INSERT INTO {quote(table.name)} ({', '.join(quote(n) for n in names)}) "
                   f"VALUES ({', '.join('?' for _ in names)})")
            return sql, _processors([bind(table.c[n]) for n in names])

        self.session_names = [c.name for c in chat_sessions.columns]
        self.session_results = _processors([
            c.type.dialect_impl(dialect).result_processor(dialect, None)
            for c in chat_sessions.columns])
        self.timestamp = bind(chat_sessions.c.last_message_at) or _same
        self.message_sql, self.message_binds = insert_sql(chat_messages, _MESSAGE_FIELDS)
        self.call_sql, self.call_binds = insert_sql(chat_tool_calls, _CALL_FIELDS)
        self.usage_sql, self.usage_binds = insert_sql(chat_usage, _USAGE_FIELDS)

        def positional(statement: Any) -> tuple[str, Callable[[dict[str, Any]], list[Any]]]:
            """The SQL, and what turns named values into its positional parameters (the
            statement's own literals, such as ``role = 'system'``, filled in)."""
            compiled = statement.compile(dialect=dialect)
            names, fixed = tuple(compiled.positiontup or ()), compiled.params
            return str(compiled), lambda given: [given.get(n, fixed[n]) for n in names]

        # The Core path's own statements, compiled once for the driver.
        self.claim_sql = positional(_CLAIM_SEQ)
        self.answer_sql = positional(_ANSWER_CALL)
        self.session_sql = positional(_SESSION_BY_ID)
        self.all_live_sql = positional(_ALL_LIVE)
        self.unsummarised_sql = positional(_UNSUMMARISED)
        self.message_names = [c.name for c in _MESSAGE_COLUMNS]
        self.message_results = _processors([
            c.type.dialect_impl(dialect).result_processor(dialect, None)
            for c in _MESSAGE_COLUMNS])

    @staticmethod
    def serves(engine: Engine) -> bool:
        """Whether ``engine`` is SQLite on pysqlite, or on aiosqlite (the async API's engine,
        whose repository runs inside the bridge)."""
        return engine.dialect.name == "sqlite" and engine.dialect.driver in ("pysqlite",
                                                                              "aiosqlite")

    def append(self, session_id: str,
               batch: Sequence[tuple[MessageDraft, int | None, BilledUsage | None]],
               now: datetime) -> tuple[list[Message], SessionRow]:
        """``Repository.append_messages`` in one ``BEGIN IMMEDIATE`` ... ``COMMIT``."""
        try:
            with self._connection() as db:
                return self._in_transaction(
                    db, "BEGIN IMMEDIATE", lambda: self._write(db, session_id, batch, now))
        except sqlite3.IntegrityError as exc:
            raise _append_error(exc, batch) from None

    def read_history(self, session_id: str) -> tuple[SessionRow, list[Message],
                                                      list[Message]]:
        """``Repository.read_history``: both reads in one deferred transaction (one WAL
        snapshot), the same statements as the Core path."""
        with self._connection() as db:
            return self._in_transaction(db, "BEGIN", lambda: self._read(db, session_id))

    @contextmanager
    def _connection(self) -> Iterator[_Pysqlite | _Aiosqlite]:
        pooled = self.engine.raw_connection()
        try:
            driver = pooled.driver_connection
            yield _Pysqlite(driver) if isinstance(driver, sqlite3.Connection) \
                else _Aiosqlite(driver)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"database error: {type(exc).__name__}: {exc}") from exc
        finally:
            pooled.close()

    @staticmethod
    def _in_transaction(db: _Pysqlite | _Aiosqlite, begin: str, work: Callable[[], T]) -> T:
        db.rows(begin)
        try:
            result = work()
            db.rows("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.rows("ROLLBACK")
            raise
        return result

    def _read(self, db: _Pysqlite | _Aiosqlite, session_id: str) -> tuple[
            SessionRow, list[Message], list[Message]]:
        params: dict[str, Any] = {"b_session_id": session_id}
        found = db.rows(self.session_sql[0], self.session_sql[1](params))
        if not found:
            raise SessionNotFound(f"no session {session_id!r}")
        row = _row_to_session(_Mapped(dict(zip(
            self.session_names, _bound(self.session_results, found[0]), strict=True))))
        watermark = row.summary_watermark
        sql, names = self.unsummarised_sql if watermark > 0 else self.all_live_sql
        params["b_watermark"] = watermark
        messages = [_row_to_message(_Mapped(dict(zip(
            self.message_names, _bound(self.message_results, raw), strict=True))))
            for raw in db.rows(sql, names(params))]
        return (row, *_split_at(messages, watermark))

    def _write(self, db: _Pysqlite | _Aiosqlite, session_id: str,
               batch: Sequence[tuple[MessageDraft, int | None, BilledUsage | None]],
               now: datetime) -> tuple[list[Message], SessionRow]:
        billed_tokens = sum(b.usage.total_tokens for _, _, b in batch if b is not None)
        stamp = self.timestamp(now)
        sql, params = self.claim_sql
        claimed = db.rows(sql, params({"b_count": len(batch), "b_now": stamp,
                                       "b_billed": billed_tokens, "b_session_id": session_id}))
        if not claimed:
            _refuse(session_id, exists=bool(
                db.rows("SELECT 1 FROM chat_sessions WHERE id = ?", (session_id,))))
        raw = claimed[0]
        session = _row_to_session(_Mapped(dict(zip(
            self.session_names, _bound(self.session_results, raw), strict=True))))
        first = session.last_seq - len(batch) + 1
        rows: list[list[Any]] = []
        calls: list[list[Any]] = []
        usages: list[list[Any]] = []
        tenant = ref_values("tenant", session.tenant)
        messages = new_messages(session_id, first, now, batch)
        for message, (draft, tokens, billed) in zip(messages, batch, strict=True):
            seq = message.seq
            values = (session_id, seq, draft.role.value, draft.content,
                      [c.to_openai() for c in draft.tool_calls] or None, draft.tool_call_id,
                      draft.name, tokens, now, message.metadata, message.native or None)
            rows.append(_bound(self.message_binds, values))
            calls.extend(_bound(self.call_binds, (session_id, c.id, seq, c.name))
                         for c in draft.tool_calls)
            if billed is not None:
                usages.append(_bound(self.usage_binds, (
                    session_id, tenant["tenant_type"], tenant["tenant_id"],
                    tenant["tenant_id_int"], billed.purpose, billed.model,
                    billed.usage.prompt_tokens, billed.usage.completion_tokens, now)))
        if calls:  # calls and answers first, as in the Core path
            db.many(self.call_sql, calls)
        for message in messages:
            if message.role is Role.TOOL:
                self._answer(db, session_id, message.tool_call_id, message.seq)
        db.many(self.message_sql, rows)
        if usages:
            db.many(self.usage_sql, usages)
        return messages, session

    def _answer(self, db: _Pysqlite | _Aiosqlite, session_id: str, call_id: str | None,
                seq: int) -> None:
        if not call_id:
            raise InvalidMessage("a tool message needs the tool_call_id it answers")
        sql, params = self.answer_sql
        if db.rows(sql, params({"b_seq": seq, "b_session_id": session_id, "b_call_id": call_id})):
            return
        found = db.rows("SELECT call_seq, result_seq FROM chat_tool_calls WHERE "
                        "session_id = ? AND call_id = ?", (session_id, call_id))
        row = found[0] if found else None
        if row is None or row[0] >= seq:
            raise InvalidMessage(
                f"tool result for {call_id!r} has no matching earlier tool call in this session")
        raise InvalidMessage(
            f"tool call {call_id!r} was already answered by message seq {row[1]}")


_MESSAGE_FIELDS = ("session_id", "seq", "role", "content", "tool_calls", "tool_call_id", "name",
                   "tokens", "created_at", "metadata", "native")
_CALL_FIELDS = ("session_id", "call_id", "call_seq", "name")
_USAGE_FIELDS = ("session_id", "tenant_type", "tenant_id", "tenant_id_int", "purpose", "model",
                 "prompt_tokens", "completion_tokens", "created_at")


class _Mapped:
    """A plain dict dressed as a result row (``_row_to_session`` reads ``row._mapping``)."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


def _same(value: Any) -> Any:
    return value


_Processors = list[tuple[int, Callable[[Any], Any]]]
"""The type processors of the columns that have one, by position."""


def _processors(per_column: Sequence[Callable[[Any], Any] | None]) -> _Processors:
    return [(i, f) for i, f in enumerate(per_column) if f is not None]


def _bound(processors: _Processors, values: Sequence[Any]) -> list[Any]:
    """``values`` with each column's processor applied (most columns have none)."""
    out = list(values)
    for i, process in processors:
        out[i] = process(out[i])
    return out
