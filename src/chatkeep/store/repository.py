"""The repository: sessions, messages, tool calls and usage in SQL.

Every write is one short transaction. Ordering and concurrency are settled by
the database: a message's ``seq`` comes from an ``UPDATE ... RETURNING`` on the
session row (a row lock on PostgreSQL, the write lock on SQLite), so it is
gapless and never duplicated; the summary is written with compare-and-set on
``summary_version``. No in-process lock is relied on. A turn's append, its history
read and a fold's write are procedures (:mod:`chatkeep.store.procedures`) run on the
transport picked for the engine: its driver itself where that serves
(:mod:`chatkeep.store.direct`), else SQLAlchemy Core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError

from chatkeep.errors import InvalidArgument, InvalidMessage, SessionNotFound
from chatkeep.messages import Message, Role
from chatkeep.refs import Ref
from chatkeep.store import procedures, replay
from chatkeep.store.connections import reading, retrying_reads, transaction
from chatkeep.store.direct import driver_transport
from chatkeep.store.executor import CoreExecutor, CoreTransport, Transport
from chatkeep.store.procedures import Batch, append_error, usage_values
from chatkeep.store.quotas import Boarding, Settlement
from chatkeep.store.rows import (
    BilledUsage,
    SessionRow,
    UsageLine,
    as_utc,
    message_from_row,
    session_from_row,
    time_ordered_id,
    utcnow,
)
from chatkeep.store.schema import (
    chat_folds,
    chat_messages,
    chat_sessions,
    chat_tool_calls,
    chat_usage,
    ref_filter,
    ref_values,
)
from chatkeep.store.statements import (
    CLAIM_FOLD,
    FAIL_FOLD,
    INSERT_KEYED_SESSION,
    INSERT_SESSION,
    INSERT_USAGE,
    LIVE,
    MESSAGE_COLUMNS,
    RELEASE_FOLD,
    RENEW_FOLD,
)
from chatkeep.validation import INT32_MAX, check_int

__all__ = ["BilledUsage", "Repository", "SessionRow", "UsageLine", "as_utc", "utcnow"]

class Repository:
    """SQL for sessions, messages, tool calls and usage. Thread-safe; share one per process."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock
        self._transport: Transport = driver_transport(engine) or CoreTransport(engine)

    @property
    def transport(self) -> Transport:
        """The engine's transport (its driver's, else SQLAlchemy Core's): where the store's
        procedures (:mod:`chatkeep.store.procedures`) run."""
        return self._transport

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
                       pii_protected: bool = False,
                       metadata: dict[str, Any] | None = None) -> SessionRow:
        """Insert a session with a new time-ordered id; returns its row. ``pii_protected``:
        created under the application's redaction switch (every process redacts it)."""
        with self.transaction() as conn:
            return self._insert_session(conn, tenant, actor, subject, title=title,
                                        anonymize_pii=anonymize_pii,
                                        pii_protected=pii_protected, metadata=metadata)

    def open_session(self, key: str, tenant: Ref, actor: Ref | None, subject: Ref | None, *,
                     title: str | None = None, anonymize_pii: bool = True,
                     pii_protected: bool = False,
                     metadata: dict[str, Any] | None = None) -> tuple[SessionRow, bool]:
        """The tenant's session named ``key``, created with these values if there is none;
        returns it and whether this call created it. Race-safe without a lock: the insert
        yields to the unique index (``ON CONFLICT DO NOTHING``) and the loser reads the
        winner's row, so concurrent openers of one key all get one session."""
        found = self.find_session(key, tenant)
        if found is not None:
            return found, False
        statement = INSERT_KEYED_SESSION[self.engine.dialect.name]
        with self.transaction() as conn:
            row = conn.execute(statement, self._session_values(
                tenant, actor, subject, title=title, anonymize_pii=anonymize_pii,
                pii_protected=pii_protected, metadata=metadata, key=key)).first()
        if row is not None:
            return session_from_row(row), True
        found = self.find_session(key, tenant)
        if found is None:  # inserted and deleted between our two statements
            raise SessionNotFound(f"session {key!r} of tenant {tenant} was deleted while "
                                  "being opened")
        return found, False

    @retrying_reads
    def find_session(self, key: str, tenant: Ref) -> SessionRow | None:
        """The tenant's session named ``key``, or ``None`` (one statement on the
        engine's transport: every turn of an integration looks its session up by key)."""
        return self._transport.run(procedures.find_session, tenant, key)

    @retrying_reads
    def session_ids_starting(self, prefix: str, tenant: Ref | None = None, *,
                             limit: int = 2) -> list[str]:
        """Up to ``limit`` ids that start with ``prefix`` (of ``tenant``'s sessions when
        given): how the CLI accepts a short id, and tells an ambiguous one."""
        escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        query = select(chat_sessions.c.id).where(
            chat_sessions.c.id.like(f"{escaped}%", escape="\\"))
        if tenant is not None:
            query = query.where(ref_filter(chat_sessions, "tenant", tenant))
        with self.reading() as conn:
            return [str(i) for i in conn.scalars(query.order_by(chat_sessions.c.id)
                                                 .limit(limit))]

    def create_session_with_messages(
        self, tenant: Ref, actor: Ref | None, subject: Ref | None,
        batch: Batch, *,
        title: str | None = None, anonymize_pii: bool = True, pii_protected: bool = False,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[list[Message], SessionRow]:
        """Create a session and append ``batch`` to it in one transaction (an import):
        either the session exists with every message, or nothing was written."""
        if not batch:
            raise InvalidMessage("nothing to append: the batch is empty")
        try:
            with self.transaction() as conn:
                created = self._insert_session(conn, tenant, actor, subject, title=title,
                                               anonymize_pii=anonymize_pii,
                                               pii_protected=pii_protected, metadata=metadata)
                return procedures.append_in(CoreExecutor(conn), created.id, batch,
                                            self.clock())
        except IntegrityError as exc:
            raise append_error(exc, batch) from None

    def _insert_session(self, conn: Connection, tenant: Ref, actor: Ref | None,
                        subject: Ref | None, *, title: str | None, anonymize_pii: bool,
                        pii_protected: bool, metadata: dict[str, Any] | None) -> SessionRow:
        values = self._session_values(tenant, actor, subject, title=title,
                                      anonymize_pii=anonymize_pii,
                                      pii_protected=pii_protected, metadata=metadata)
        return session_from_row(conn.execute(INSERT_SESSION, values).one())

    def _session_values(self, tenant: Ref, actor: Ref | None, subject: Ref | None, *,
                        title: str | None, anonymize_pii: bool, pii_protected: bool,
                        metadata: dict[str, Any] | None,
                        key: str | None = None) -> dict[str, Any]:
        now = self.clock()
        return {
            "id": time_ordered_id(), **ref_values("tenant", tenant),
            **ref_values("actor", actor), **ref_values("subject", subject),
            "title": title, "anonymize_pii": anonymize_pii, "total_tokens": 0, "last_seq": 0,
            "summary": None, "summary_watermark": 0, "summary_version": 0,
            "distilled_through": 0, "distil_version": 0, "pii_vault": None,
            "pii_vault_version": 0, "pii_protected": pii_protected, "closed_at": None,
            "last_message_at": now,
            "created_at": now, "metadata": metadata or {}, "key": key,
        }

    @retrying_reads
    def get_session(self, session_id: str, tenant: Ref | None = None) -> SessionRow:
        """Load a session; with ``tenant`` given, another tenant's session is not found
        (one prebuilt statement on the engine's transport)."""
        return self._transport.run(procedures.get_session, session_id, tenant)

    @retrying_reads
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
            return [session_from_row(r) for r in conn.execute(query)]

    def update_session(self, session_id: str, **values: Any) -> SessionRow:
        """Set plain columns (``anonymize_pii``, ``title``, ``metadata``, ``closed_at``)."""
        allowed = {"anonymize_pii", "title", "metadata", "closed_at"}
        unknown = set(values) - allowed
        if unknown:
            raise InvalidArgument(f"cannot update {sorted(unknown)} directly")
        with self.transaction() as conn:
            row = conn.execute(
                update(chat_sessions).where(chat_sessions.c.id == session_id).values(**values)
                .returning(chat_sessions)
            ).first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}")
            return session_from_row(row)

    # -- messages ------------------------------------------------------------------------

    def append_messages(self, session_id: str, batch: Batch, *,
                        settle: Settlement | None = None) -> tuple[list[Message], SessionRow]:
        """Append a batch of messages in one transaction: all of them, with consecutive
        ``seq`` values, their tool calls and their usage, or none (a tool result may answer
        a call made earlier in the same batch). Returns them and the session row after.

        The hot path of every ``add_*``: prebuilt statements (no per-call SQL construction),
        one ``UPDATE ... RETURNING`` for the seq range, one insert for the messages, one for
        their tool calls and one ``UPDATE ... RETURNING`` per tool result; on PostgreSQL a
        batch without tool plumbing is one statement (:func:`procedures.append`).
        ``settle``: the quota reservation the batch answers, settled in its transaction."""
        if not batch:
            raise InvalidMessage("nothing to append: the batch is empty")
        # Whole: on aiosqlite, one trip to the driver's thread for the transaction.
        return self._transport.run(procedures.append, session_id, batch, self.clock, settle)

    @retrying_reads
    def read_messages(self, session_id: str, *, after_seq: int = 0,
                      through_seq: int | None = None, limit: int | None = None,
                      live_only: bool = False) -> list[Message]:
        """Messages with ``after_seq < seq <= through_seq`` in order (index range scan);
        ``live_only`` leaves retracted ones out. One prebuilt statement on the engine's
        transport (:func:`procedures.read_messages`)."""
        check_int(after_seq, "after_seq", minimum=-INT32_MAX)
        if through_seq is not None:
            check_int(through_seq, "through_seq", minimum=-INT32_MAX)
        if limit is not None:
            check_int(limit, "limit", minimum=0, maximum=INT32_MAX)
        return self._transport.run(procedures.read_messages, session_id, after_seq,
                                   through_seq, limit, live_only)

    @retrying_reads
    def marks_after(self, session_id: str, key: str, after_seq: int) -> set[str]:
        """The values under metadata ``key`` of the messages after ``after_seq`` (an index
        range, only that value read: no message is built; one statement)."""
        return self._transport.run(procedures.marks_after_seq, session_id, key, after_seq)

    @retrying_reads
    def stored_marks(self, session_id: str, key: str, values: Iterable[str]) -> set[str]:
        """Which of ``values`` the session's messages carry under metadata ``key`` (an id
        an integration recorded them by), retracted ones included: only those values come
        back, so the cost follows the session's rows in the database, not in Python."""
        dialect = self.engine.dialect.name
        return self._transport.run(procedures.looked_up, lambda ex, marks: (
            procedures.marks_in_session(ex, dialect, session_id, key, marks)), values)

    def append_unmarked(self, session_id: str, key: str, batch: Batch) -> list[Message]:
        """Append the messages of ``batch`` whose metadata ``key`` the session does not
        hold yet, in one transaction with the session locked: recording the same
        integration ids twice, even from overlapping runs, stores them once
        (:func:`procedures.append_unmarked`). Returns what was appended."""
        return self._transport.run(procedures.append_unmarked, session_id, key, batch,
                                   self.clock())

    @retrying_reads
    def calls_taken(self, session_id: str, call_ids: Iterable[str]) -> set[str]:
        """Which of ``call_ids`` the session's tool calls already use."""
        return self._transport.run(procedures.looked_up, lambda ex, ids: (
            procedures.calls_taken(ex, session_id, ids)), call_ids)

    @retrying_reads
    def marks_elsewhere(self, session_id: str, session_key: str, key: str,
                        values: Iterable[str]) -> set[str]:
        """Which of ``values`` messages of another session named ``session_key`` (another
        tenant's: a key is unique per tenant) carry under metadata ``key``."""
        return self._transport.run(procedures.looked_up, lambda ex, marks: (
            procedures.marks_in_other_sessions(ex, session_id, session_key, key, marks)),
            values)

    @retrying_reads
    def read_history(self, session_id: str) -> tuple[SessionRow, list[Message],
                                                      list[Message]]:
        """What ``build_history`` reads, on one connection: the session row, then its
        system messages at or below the summary watermark (pinned instructions, a partial
        index) and every live message after it (an index range), so cost follows the
        tail, not the session's length (:func:`procedures.read_history`)."""
        return procedures.read_history(self._transport, session_id)

    # -- retraction ----------------------------------------------------------------------

    def retract_last(self, session_id: str) -> Message | None:
        """Mark the newest live message retracted (kept for the record, out of every
        replay); frees its tool-call bookkeeping, so a retried call may reuse its id or be
        answered again. Returns it, or ``None`` when nothing is live.

        It bumps ``summary_version`` first, in the same transaction: a fold planned before
        the retraction then loses its compare-and-set and plans again, so a message popped
        while the summarizer was reading it never reaches the stored summary (the row
        lock this takes also orders it with appends and with a fold's write)."""
        now = self.clock()
        with self.transaction() as conn:
            bumped = conn.execute(update(chat_sessions).where(chat_sessions.c.id == session_id)
                                  .values(summary_version=chat_sessions.c.summary_version + 1))
            if not bumped.rowcount:
                raise SessionNotFound(f"no session {session_id!r}")
            row = conn.execute(select(*MESSAGE_COLUMNS).where(
                chat_messages.c.session_id == session_id, LIVE)
                .order_by(chat_messages.c.seq.desc()).limit(1)).first()
            if row is None:
                return None
            message = message_from_row(row)
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
                chat_messages.c.session_id == session_id, LIVE)
                .values(retracted_at=now)).rowcount
            conn.execute(delete(chat_tool_calls).where(
                chat_tool_calls.c.session_id == session_id))
            row = conn.execute(update(chat_sessions).where(chat_sessions.c.id == session_id)
                               .values(summary=None,
                                       summary_version=chat_sessions.c.summary_version + 1)
                               .returning(chat_sessions)).first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}")
            return int(count), session_from_row(row)

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
            session = session_from_row(row)
            conn.execute(INSERT_USAGE, usage_values(session, billed, now))
            return session

    @retrying_reads
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

    @retrying_reads
    def usage_sum(self, session_id: str) -> int:
        """Sum of the ledger for one session (what ``total_tokens`` must equal)."""
        u = chat_usage.c
        query = select(func.coalesce(func.sum(u.prompt_tokens + u.completion_tokens), 0)).where(
            u.session_id == session_id)
        with self.reading() as conn:
            return int(conn.execute(query).scalar_one())

    # -- replay (issue 34 part 2) ---------------------------------------------------------

    def record_manifest(self, session_id: str, tenant: Ref, last_seq: int, manifest: str,
                        texts: Mapping[str, str], *,
                        reservation: Boarding | None = None) -> int:
        """Store a built request's manifest as the session's next turn, with the texts it
        names and the call's ``reservation`` (:func:`chatkeep.store.replay.record_manifest`);
        returns the turn."""
        return replay.record_manifest(self._transport, session_id, tenant, last_seq,
                                      manifest, texts, self.clock(), reservation=reservation)

    # -- summary -------------------------------------------------------------------------

    def compare_and_set_summary(self, session_id: str, expected_version: int, summary: str,
                                watermark: int,
                                fold: dict[str, Any] | None = None) -> SessionRow | None:
        """Store a new summary and watermark if nobody else did since ``expected_version``.

        Returns the new row, or ``None`` when the race was lost (the caller re-reads).
        ``fold`` records the fold in ``chat_folds`` in the same transaction.
        """
        return procedures.set_summary(self._transport, session_id, expected_version,
                                      summary, watermark, fold, self.clock())

    def swap_state(self, session_id: str, key: str, decide: procedures.Decide,
                   batch: Batch = ()) -> tuple[list[Message], SessionRow | None]:
        """A compare-and-set on an integration's state under ``key`` in the session's
        metadata, atomic with appending ``batch`` (:func:`procedures.swap_state`): how the
        Pydantic AI store checks a conversation's revision as it saves."""
        return procedures.swap_state(CoreTransport(self.engine), session_id, key, decide,
                                     batch, self.clock())

    def claim_fold(self, session_id: str, expected_version: int,
                   lease: timedelta) -> datetime | None:
        """Claim the fold of summary version ``expected_version`` for ``lease``: the lease's
        end (what releasing it takes), or ``None`` when another caller holds a live claim,
        the session backs off after failed folds, or the version moved on."""
        now = self.clock()
        until = now + lease
        with self.transaction() as conn:
            claimed = conn.execute(CLAIM_FOLD, {"b_session_id": session_id,
                                                "b_expected": expected_version,
                                                "b_now": now, "b_until": until}).first()
        return until if claimed is not None else None

    def renew_fold(self, session_id: str, until: datetime,
                   lease: timedelta) -> datetime | None:
        """Extend the claim that ends at ``until`` by ``lease`` from now: the new end, or
        ``None`` when the claim is no longer ours (it ended and another caller took it)."""
        new_until = self.clock() + lease
        with self.transaction() as conn:
            renewed = conn.execute(RENEW_FOLD, {"b_session_id": session_id, "b_until": until,
                                                "b_new_until": new_until}).first()
        return new_until if renewed is not None else None

    def release_fold(self, session_id: str, until: datetime, *,
                     retry_at: datetime | None = None) -> None:
        """Give back the claim that ends at ``until`` (a later claimant's is left alone);
        with ``retry_at``, the fold failed: count it and back off until then."""
        with self.transaction() as conn:
            if retry_at is None:
                conn.execute(RELEASE_FOLD, {"b_session_id": session_id, "b_until": until})
            else:
                conn.execute(FAIL_FOLD, {"b_session_id": session_id, "b_until": until,
                                         "b_retry_at": retry_at})

    # -- PII vault -----------------------------------------------------------------------

    @retrying_reads
    def read_vault(self, session_id: str) -> tuple[str | None, int]:
        """The sealed placeholder mapping of a session and its version."""
        query = select(chat_sessions.c.pii_vault, chat_sessions.c.pii_vault_version).where(
            chat_sessions.c.id == session_id)
        with self.reading() as conn:
            row = conn.execute(query).first()
        if row is None:
            raise SessionNotFound(f"no session {session_id!r}")
        return row[0], int(row[1])

    @retrying_reads
    def vaults_after(self, session_id: str, limit: int) -> list[tuple[str, str, int]]:
        """``(session id, sealed vault, version)`` of sessions holding a vault, in id order
        after ``session_id`` (``""`` = from the start): what a re-key walks, in pages."""
        query = (select(chat_sessions.c.id, chat_sessions.c.pii_vault,
                        chat_sessions.c.pii_vault_version)
                 .where(chat_sessions.c.id > session_id, chat_sessions.c.pii_vault.is_not(None))
                 .order_by(chat_sessions.c.id).limit(limit))
        with self.reading() as conn:
            return [(r[0], r[1], int(r[2])) for r in conn.execute(query)]

    @retrying_reads
    def count_vaults(self) -> int:
        """How many sessions hold a placeholder vault."""
        query = select(func.count()).where(chat_sessions.c.pii_vault.is_not(None))
        with self.reading() as conn:
            return int(conn.execute(query).scalar_one())

    def compare_and_set_vault(self, session_id: str, expected_version: int, blob: str) -> bool:
        """Store a grown placeholder mapping unless another writer did first. A session
        with a vault was redacted, so it is marked ``pii_protected`` in the same write."""
        with self.transaction() as conn:
            result = conn.execute(
                update(chat_sessions)
                .where(chat_sessions.c.id == session_id,
                       chat_sessions.c.pii_vault_version == expected_version)
                .values(pii_vault=blob, pii_vault_version=expected_version + 1,
                        pii_protected=True))
            return result.rowcount == 1

    @retrying_reads
    def folds(self, session_id: str, limit: int = 100) -> list[dict[str, Any]]:
        """A session's stored folds, newest first: the seqs each took and its cost."""
        query = (select(chat_folds).where(chat_folds.c.session_id == session_id)
                 .order_by(chat_folds.c.version.desc()).limit(limit))
        with self.reading() as conn:
            return [{**r._mapping, "created_at": as_utc(r.created_at)}
                    for r in conn.execute(query)]
