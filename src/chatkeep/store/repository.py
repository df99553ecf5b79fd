"""The repository: the only code in chatkeep that issues SQL.

Every write is one short transaction. Ordering and concurrency are settled by
the database: a message's ``seq`` comes from an ``UPDATE ... RETURNING`` on the
session row (a row lock on PostgreSQL, the write lock on SQLite), so it is
gapless and never duplicated; the summary is written with compare-and-set on
``summary_version``. No in-process lock is relied on.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, union_all, update
from sqlalchemy.exc import IntegrityError

from chatkeep.errors import InvalidMessage, SessionClosed, SessionNotFound, StoreError
from chatkeep.messages import Message, MessageDraft, Role, ToolCall, Usage
from chatkeep.refs import Ref
from chatkeep.store.connections import reading, transaction
from chatkeep.store.schema import (
    chat_messages,
    chat_sessions,
    chat_tool_calls,
    chat_usage,
    ref_filter,
    ref_values,
)


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


def _row_to_message(row: Any) -> Message:
    m = row._mapping
    calls = tuple(ToolCall.from_openai(c) for c in (m["tool_calls"] or []))
    return Message(
        session_id=m["session_id"], seq=int(m["seq"]), role=Role(m["role"]),
        content=m["content"], tool_calls=calls, tool_call_id=m["tool_call_id"],
        name=m["name"], tokens=m["tokens"], created_at=as_utc(m["created_at"]),
        metadata=dict(m["metadata"] or {}), native=dict(m["native"] or {}),
    )


_MESSAGE_COLUMNS = [
    chat_messages.c.session_id, chat_messages.c.seq, chat_messages.c.role,
    chat_messages.c.content, chat_messages.c.tool_calls, chat_messages.c.tool_call_id,
    chat_messages.c.name, chat_messages.c.tokens, chat_messages.c.created_at,
    chat_messages.c.metadata, chat_messages.c.native,
]


class Repository:
    """SQL for sessions, messages, tool calls and usage. Thread-safe; share one per process."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock

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
        with self.transaction() as conn:
            row = conn.execute(insert(chat_sessions).values(**values)
                               .returning(chat_sessions)).one()
            return _row_to_session(row)

    def get_session(self, session_id: str, tenant: Ref | None = None) -> SessionRow:
        """Load a session; with ``tenant`` given, another tenant's session is not found."""
        with self.reading() as conn:
            return self._load_session(conn, session_id, tenant)

    def _load_session(self, conn: Connection, session_id: str, tenant: Ref | None) -> SessionRow:
        query = select(chat_sessions).where(chat_sessions.c.id == session_id)
        if tenant is not None:
            query = query.where(ref_filter(chat_sessions, "tenant", tenant))
        row = conn.execute(query).first()
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
        a call made earlier in the same batch). Returns them and the session row after."""
        if not batch:
            raise InvalidMessage("nothing to append: the batch is empty")
        now = self.clock()
        billed_tokens = sum(b.usage.total_tokens for _, _, b in batch if b is not None)
        messages: list[Message] = []
        try:
            with self.transaction() as conn:
                session = self._claim_seq(conn, session_id, now, billed_tokens, len(batch))
                first = session.last_seq - len(batch) + 1
                for offset, (draft, tokens, billed) in enumerate(batch):
                    message = Message(
                        session_id, first + offset, draft.role, draft.content,
                        draft.tool_calls, draft.tool_call_id, draft.name, tokens, now,
                        dict(draft.metadata), dict(draft.native))
                    self._insert_message(conn, message)
                    if billed:
                        self._insert_usage(conn, session, billed, now)
                    messages.append(message)
        except IntegrityError as exc:
            calls = [c.id for d, _, _ in batch for c in d.tool_calls]
            if calls and "tool_calls" in str(exc.orig):
                raise InvalidMessage(
                    f"a tool call id in {calls} is already used in this session") from None
            raise StoreError(f"could not append message: {exc.orig}") from exc
        return messages, session

    def _insert_message(self, conn: Connection, message: Message) -> None:
        if message.role is Role.TOOL:
            self._answer_tool_call(conn, message.session_id, message.tool_call_id, message.seq)
        conn.execute(insert(chat_messages).values(
            session_id=message.session_id, seq=message.seq, role=message.role.value,
            content=message.content,
            tool_calls=[c.to_openai() for c in message.tool_calls] or None,
            tool_call_id=message.tool_call_id, name=message.name, tokens=message.tokens,
            created_at=message.created_at, metadata=dict(message.metadata),
            native=dict(message.native) or None,
        ))
        if message.tool_calls:
            conn.execute(insert(chat_tool_calls), [
                {"session_id": message.session_id, "call_id": c.id, "call_seq": message.seq,
                 "name": c.name, "result_seq": None} for c in message.tool_calls
            ])

    def _claim_seq(self, conn: Connection, session_id: str, now: datetime,
                   billed_tokens: int, count: int = 1) -> SessionRow:
        """Take the next ``count`` seq values (the row lock orders concurrent appenders);
        returns the session row as the update left it (``last_seq`` = the last one taken)."""
        row = conn.execute(
            update(chat_sessions)
            .where(chat_sessions.c.id == session_id, chat_sessions.c.closed_at.is_(None))
            .values(last_seq=chat_sessions.c.last_seq + count, last_message_at=now,
                    total_tokens=chat_sessions.c.total_tokens + billed_tokens)
            .returning(chat_sessions)
        ).first()
        if row is None:
            exists = conn.execute(
                select(chat_sessions.c.id).where(chat_sessions.c.id == session_id)
            ).first()
            if exists is None:
                raise SessionNotFound(f"no session {session_id!r}")
            raise SessionClosed(f"session {session_id!r} is closed")
        return _row_to_session(row)

    def _answer_tool_call(self, conn: Connection, session_id: str, call_id: str | None,
                          seq: int) -> None:
        if not call_id:
            raise InvalidMessage("a tool message needs the tool_call_id it answers")
        row = conn.execute(
            select(chat_tool_calls.c.result_seq).where(
                chat_tool_calls.c.session_id == session_id, chat_tool_calls.c.call_id == call_id)
        ).first()
        if row is None:
            raise InvalidMessage(
                f"tool result for {call_id!r} has no matching earlier tool call in this session")
        if row[0] is not None:
            raise InvalidMessage(
                f"tool call {call_id!r} was already answered by message seq {row[0]}")
        conn.execute(
            update(chat_tool_calls)
            .where(chat_tool_calls.c.session_id == session_id,
                   chat_tool_calls.c.call_id == call_id)
            .values(result_seq=seq)
        )

    def read_messages(self, session_id: str, *, after_seq: int = 0,
                      through_seq: int | None = None, limit: int | None = None) -> list[Message]:
        """Messages with ``after_seq < seq <= through_seq`` in order (index range scan)."""
        query = select(*_MESSAGE_COLUMNS).where(
            chat_messages.c.session_id == session_id, chat_messages.c.seq > after_seq)
        if through_seq is not None:
            query = query.where(chat_messages.c.seq <= through_seq)
        query = query.order_by(chat_messages.c.seq)
        if limit is not None:
            query = query.limit(limit)
        with self.reading() as conn:
            return [_row_to_message(r) for r in conn.execute(query)]

    def read_unsummarised(self, session_id: str, watermark: int) -> tuple[list[Message],
                                                                          list[Message]]:
        """What ``build_history`` reads, in one statement: the system messages at or below
        ``watermark`` (pinned instructions, served by a partial index) and every message
        after it (an index range). Cost follows those, not the session's length."""
        after = select(*_MESSAGE_COLUMNS).where(
            chat_messages.c.session_id == session_id, chat_messages.c.seq > watermark)
        if watermark <= 0:
            query = after.order_by(chat_messages.c.seq)
        else:
            pinned = select(*_MESSAGE_COLUMNS).where(
                chat_messages.c.session_id == session_id, chat_messages.c.role == "system",
                chat_messages.c.seq <= watermark)
            query = union_all(pinned, after).order_by("seq")
        with self.reading() as conn:
            messages = [_row_to_message(r) for r in conn.execute(query)]
        split = next((i for i, m in enumerate(messages) if m.seq > watermark), len(messages))
        return messages[:split], messages[split:]

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
        conn.execute(insert(chat_usage).values(
            session_id=session.id, **ref_values("tenant", session.tenant),
            purpose=billed.purpose, model=billed.model,
            prompt_tokens=billed.usage.prompt_tokens,
            completion_tokens=billed.usage.completion_tokens, created_at=now,
        ))

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
            result = conn.execute(
                update(chat_sessions)
                .where(chat_sessions.c.id == session_id,
                       chat_sessions.c.summary_version == expected_version,
                       chat_sessions.c.summary_watermark < watermark)
                .values(summary=summary, summary_watermark=watermark,
                        summary_version=expected_version + 1)
                .returning(chat_sessions)
            ).first()
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

    def compare_and_set_vault(self, session_id: str, expected_version: int, blob: str) -> bool:
        """Store a grown placeholder mapping unless another writer did first."""
        with self.transaction() as conn:
            result = conn.execute(
                update(chat_sessions)
                .where(chat_sessions.c.id == session_id,
                       chat_sessions.c.pii_vault_version == expected_version)
                .values(pii_vault=blob, pii_vault_version=expected_version + 1))
            return result.rowcount == 1
