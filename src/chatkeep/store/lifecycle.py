"""The lifecycle's SQL (issue 36): delete a session with every row that holds its
content, erase a scope in bounded batches recorded as a resumable job, legal holds, the
lifecycle log, and what makes a delete final on disk (SQLite's FTS merge and WAL
checkpoint).

Each write is one short transaction that re-reads the holds first, so a hold placed
while an erasure runs stops its next batch; the job's counts move in the same
transaction as the rows they count (a killed run leaves exact numbers). The rules that
decide (which hold covers what) are plain functions over values, shared with
:mod:`chatkeep.lifecycle.plan`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    and_,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)

from chatkeep.errors import HoldNotFound, ScopeOnHold, SessionNotFound
from chatkeep.messages import Message
from chatkeep.refs import Ref
from chatkeep.store.connections import (
    autocommit,
    driver_error,
    ensure_started,
    reading,
    retrying_reads,
    transaction,
)
from chatkeep.store.memory_index import FTS_TABLE, VECTOR_TABLE, vector_table_exists
from chatkeep.store.rows import as_utc, message_from_row, utcnow
from chatkeep.store.schema import (
    chat_checkpoints,
    chat_erased_items,
    chat_erasures,
    chat_folds,
    chat_holds,
    chat_lifecycle_log,
    chat_messages,
    chat_replay_manifests,
    chat_replay_texts,
    chat_sessions,
    chat_summary_versions,
    chat_tool_calls,
    chat_usage,
    memories,
    ref_filter,
    ref_values,
)
from chatkeep.store.statements import MESSAGE_COLUMNS

SCOPES = ("session", "actor", "subject", "tenant")
"""What can be erased: one session, an actor's or a subject's data, a whole tenant."""
SURFACES = ("sessions", "messages", "tool_calls", "folds", "summaries", "vaults",
            "memories", "vectors", "usage_unlinked", "memories_unlinked")
"""Where an erasure counts what it removed (``usage_unlinked``: ledger rows kept as
numbers with their session link removed; ``memories_unlinked``: memories kept, their
source session link removed)."""


# -- values ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EraseScope:
    """What to erase: ``kind`` is one of :data:`SCOPES`; ``ref`` is the actor or subject,
    ``session_id`` the session."""

    kind: str
    tenant: Ref
    ref: Ref | None = None
    session_id: str | None = None

    @property
    def columns(self) -> tuple[str | None, str | None]:
        """``(scope_type, scope_id)`` as stored: ids, never content."""
        if self.kind == "session":
            return None, self.session_id
        if self.ref is not None:
            return self.ref.type, self.ref.id_text
        return None, None

    def describe(self) -> str:
        """The scope in words, for messages and ``--dry-run``."""
        if self.kind == "session":
            return f"session {self.session_id} of tenant {self.tenant}"
        if self.kind == "tenant":
            return f"the whole tenant {self.tenant}"
        return f"{self.kind} {self.ref} of tenant {self.tenant}"


@dataclass(frozen=True, slots=True)
class HoldRow:
    """One legal hold: its scope (a session, an actor, a subject; none = the tenant), the
    reason, when it was placed and released."""

    id: int
    tenant: Ref
    actor: Ref | None
    subject: Ref | None
    session_id: str | None
    reason: str
    placed_by: str | None
    placed_at: datetime
    released_at: datetime | None

    @property
    def kind(self) -> str:
        """``session``, ``actor``, ``subject`` or ``tenant``: what the hold covers."""
        if self.session_id is not None:
            return "session"
        if self.actor is not None:
            return "actor"
        if self.subject is not None:
            return "subject"
        return "tenant"

    @property
    def active(self) -> bool:
        """Not released."""
        return self.released_at is None

    def describe(self) -> str:
        """What the hold covers, in words."""
        what = {"session": f"session {self.session_id}", "actor": f"actor {self.actor}",
                "subject": f"subject {self.subject}", "tenant": "the whole tenant"}
        return f"hold {self.id} on {what[self.kind]}"


Parties = tuple[str, Ref | None, Ref | None]
"""A session as holds see it: ``(id, actor, subject)``."""


def hold_covers(hold: HoldRow, session: Parties) -> bool:
    """Whether ``hold`` covers the session: it names it, its actor or its subject, or it
    holds the whole tenant."""
    session_id, actor, subject = session
    if hold.kind == "tenant":
        return True
    if hold.session_id is not None:
        return hold.session_id == session_id
    if hold.actor is not None:
        return hold.actor == actor
    return hold.subject == subject


def holds_in_the_way(scope: EraseScope, holds: Iterable[HoldRow],
                     sessions: Iterable[Parties]) -> list[HoldRow]:
    """The active holds that refuse erasing ``scope`` whose sessions are ``sessions``:
    on a whole tenant every hold; else a tenant-wide hold, a hold on the scope's own actor
    or subject, and any hold covering one of its sessions."""
    active = [h for h in holds if h.active]
    if scope.kind == "tenant":
        return active
    listed = list(sessions)
    found = []
    for hold in active:
        if hold.kind == "tenant" or any(hold_covers(hold, s) for s in listed) or (
                scope.kind == "actor" and hold.actor == scope.ref) or (
                scope.kind == "subject" and hold.subject == scope.ref):
            found.append(hold)
    return found


def refuse_held(scope: EraseScope, held: Sequence[HoldRow]) -> None:
    """Raise ``ScopeOnHold`` naming the first hold's reason, when any hold is in the way."""
    if held:
        first = held[0]
        raise ScopeOnHold(f"{scope.describe()} is under legal {first.describe()}: "
                          f"{first.reason}", reason=first.reason, hold_id=first.id)


@dataclass(frozen=True, slots=True)
class MemoryFact:
    """What the erasure plan needs to know of a memory (no content): whose it is, where it
    came from, whether it carries personal values."""

    id: int
    scope: str
    personal_of_scope: bool
    """Personal to the erased actor, or a memory of the erased subject."""
    from_scope_session: bool
    """Distilled from one of the scope's sessions."""
    carries_values: bool
    """Holds sealed personal values (``pii``)."""


@dataclass(frozen=True, slots=True)
class Inventory:
    """What the store holds of a scope, read in one snapshot: the sessions (with their
    parties and message counts), the memory facts, the tenant's active holds."""

    scope: EraseScope
    sessions: list[Parties]
    message_counts: dict[str, int]
    memories: list[MemoryFact]
    holds: list[HoldRow]
    vector_ids: frozenset[int] = frozenset()
    """The memories among ``memories`` that have a vector."""
    usage_rows: int = 0


@dataclass(slots=True)
class ErasureJob:
    """An erasure's row: its id, scope, state, the counts so far and when it began."""

    id: str
    scope: EraseScope
    state: str
    counts: dict[str, int]
    started_at: datetime
    finished_at: datetime | None = None
    digest: str | None = None
    requested_by: str | None = None
    items: dict[str, list[str]] = field(default_factory=dict)


# -- row conversions -------------------------------------------------------------------------

def _hold(row: Any) -> HoldRow:
    m = row._mapping
    tenant = Ref.from_columns(m["tenant_type"], m["tenant_id"], m["tenant_id_int"])
    assert tenant is not None
    placed = as_utc(m["placed_at"])
    assert placed is not None
    return HoldRow(int(m["id"]), tenant,
                   Ref.from_columns(m["actor_type"], m["actor_id"], m["actor_id_int"]),
                   Ref.from_columns(m["subject_type"], m["subject_id"], m["subject_id_int"]),
                   m["session_id"], m["reason"], m["placed_by"], placed,
                   as_utc(m["released_at"]))


def _counts(value: Any) -> dict[str, int]:
    return {k: int(v) for k, v in dict(value or {}).items()}


def _scope_of(m: Mapping[str, Any], tenant: Ref) -> EraseScope:
    kind = m["scope"]
    if kind == "session":
        return EraseScope(kind, tenant, session_id=m["scope_id"])
    if kind == "tenant":
        return EraseScope(kind, tenant)
    ref = Ref.from_columns(m["scope_type"], m["scope_id"], False)
    return EraseScope(kind, tenant, ref=ref)


def _job(row: Any) -> ErasureJob:
    m = row._mapping
    tenant = Ref.from_columns(m["tenant_type"], m["tenant_id"], m["tenant_id_int"])
    assert tenant is not None
    started = as_utc(m["started_at"])
    assert started is not None
    return ErasureJob(m["id"], _scope_of(m, tenant), m["state"], _counts(m["counts"]),
                      started, as_utc(m["finished_at"]), m["digest"], m["requested_by"])


def _tenant_is(table: Any, tenant: Ref) -> ColumnElement[bool]:
    return ref_filter(table, "tenant", tenant)


def _scope_sessions(scope: EraseScope) -> ColumnElement[bool]:
    """``WHERE`` clause on ``chat_sessions`` for the scope's sessions."""
    clause = _tenant_is(chat_sessions, scope.tenant)
    if scope.kind == "session":
        return and_(clause, chat_sessions.c.id == scope.session_id)
    if scope.kind in ("actor", "subject"):
        assert scope.ref is not None
        return and_(clause, ref_filter(chat_sessions, scope.kind, scope.ref))
    return clause


def _parties(row: Any) -> Parties:
    m = row._mapping
    return (m["id"], Ref.from_columns(m["actor_type"], m["actor_id"], m["actor_id_int"]),
            Ref.from_columns(m["subject_type"], m["subject_id"], m["subject_id_int"]))


_MEMORY_HOLD_COLUMNS = (memories.c.id, memories.c.actor_type, memories.c.actor_id,
                        memories.c.subject_type, memories.c.subject_id,
                        memories.c.source_session_id)
"""What a hold is checked against on a memory (:func:`_memory_held`)."""

_PARTY_COLUMNS = (chat_sessions.c.id, chat_sessions.c.actor_type, chat_sessions.c.actor_id,
                  chat_sessions.c.actor_id_int, chat_sessions.c.subject_type,
                  chat_sessions.c.subject_id, chat_sessions.c.subject_id_int)


class LifecycleStore:
    """SQL for deletes, erasures, holds and the lifecycle log. Thread-safe; one per keep."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock
        self._vectors: bool | None = None

    # -- holds ---------------------------------------------------------------------------

    def place_hold(self, tenant: Ref, *, actor: Ref | None = None,
                   subject: Ref | None = None, session_id: str | None = None,
                   reason: str, placed_by: str | None = None) -> HoldRow:
        """Record a legal hold (and its log line) in one transaction; a hold on a session
        must name one of ``tenant``'s (else ``SessionNotFound``)."""
        now = self.clock()
        with transaction(self.engine) as conn:
            if session_id is not None and conn.execute(select(chat_sessions.c.id).where(
                    _tenant_is(chat_sessions, tenant),
                    chat_sessions.c.id == session_id)).first() is None:
                raise SessionNotFound(f"no session {session_id!r} for tenant {tenant}")
            row = conn.execute(insert(chat_holds).values(
                **ref_values("tenant", tenant), **ref_values("actor", actor),
                **ref_values("subject", subject), session_id=session_id, reason=reason,
                placed_by=placed_by, placed_at=now, released_at=None)
                .returning(chat_holds)).one()
            hold = _hold(row)
            self._log(conn, tenant, "hold_placed", hold.kind, _hold_columns(hold),
                      placed_by, now, hold_id=hold.id)
            return hold

    def release_hold(self, tenant: Ref, hold_id: int, *, by: str | None = None) -> HoldRow:
        """Release an active hold of ``tenant`` (``HoldNotFound`` when there is none)."""
        now = self.clock()
        with transaction(self.engine) as conn:
            row = conn.execute(update(chat_holds).where(
                _tenant_is(chat_holds, tenant), chat_holds.c.id == hold_id,
                chat_holds.c.released_at.is_(None)).values(released_at=now)
                .returning(chat_holds)).first()
            if row is None:
                raise HoldNotFound(f"no active hold {hold_id} for tenant {tenant}")
            hold = _hold(row)
            self._log(conn, tenant, "hold_released", hold.kind, _hold_columns(hold), by,
                      now, hold_id=hold.id)
            return hold

    @retrying_reads
    def list_holds(self, tenant: Ref | None = None, *, include_released: bool = False,
                   session_id: str | None = None) -> list[HoldRow]:
        """Holds, newest first (every tenant's when ``tenant`` is ``None``); with
        ``session_id``, the active ones covering that session."""
        query = select(chat_holds)
        if tenant is not None:
            query = query.where(_tenant_is(chat_holds, tenant))
        if not include_released or session_id is not None:
            query = query.where(chat_holds.c.released_at.is_(None))
        with reading(self.engine) as conn:
            holds = [_hold(r) for r in conn.execute(
                query.order_by(chat_holds.c.id.desc()))]
            if session_id is None:
                return holds
            row = conn.execute(select(*_PARTY_COLUMNS, chat_sessions.c.tenant_type,
                                      chat_sessions.c.tenant_id)
                               .where(chat_sessions.c.id == session_id)).first()
        if row is None:
            return []
        parties = _parties(row)
        return [h for h in holds if h.tenant.type == row.tenant_type
                and h.tenant.id_text == row.tenant_id and hold_covers(h, parties)]

    def _active_holds(self, conn: Connection, tenant: Ref) -> list[HoldRow]:
        return [_hold(r) for r in conn.execute(select(chat_holds).where(
            _tenant_is(chat_holds, tenant), chat_holds.c.released_at.is_(None))
            .order_by(chat_holds.c.id))]

    # -- deleting one session -------------------------------------------------------------

    def delete_session(self, session_id: str, tenant: Ref | None, *,
                       by: str | None = None) -> dict[str, int]:
        """Delete the session and every row holding its content, in one transaction,
        after checking its holds (``ScopeOnHold``; ``SessionNotFound`` for a missing or
        another tenant's session); the log records the counts. Then make it final on disk
        (:meth:`settle`)."""
        now = self.clock()
        with transaction(self.engine) as conn:
            query = select(*_PARTY_COLUMNS, chat_sessions.c.tenant_type,
                           chat_sessions.c.tenant_id, chat_sessions.c.tenant_id_int).where(
                chat_sessions.c.id == session_id)
            if tenant is not None:
                query = query.where(_tenant_is(chat_sessions, tenant))
            row = conn.execute(query.with_for_update()).first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}"
                                      + (f" for tenant {tenant}" if tenant else ""))
            owner = Ref.from_columns(row.tenant_type, row.tenant_id, row.tenant_id_int)
            assert owner is not None
            scope = EraseScope("session", owner, session_id=session_id)
            parties = _parties(row)
            refuse_held(scope, holds_in_the_way(
                scope, self._active_holds(conn, owner), [parties]))
            counts = self._purge_session(conn, parties)
            self._log(conn, owner, "delete_session", "session", (None, session_id), by, now,
                      counts=counts)
        self.settle(memories_touched=counts.get("memories", 0) > 0)
        return counts

    def expire_session(self, session_id: str, tenant: Ref, idle_before: datetime, *,
                       by: str | None = "retention") -> tuple[str, dict[str, int]]:
        """Retention's delete of one session, through the same purge: ``("deleted",
        counts)``; or, writing nothing, ``("held", {})`` under a hold, ``("skipped", {})``
        when it is gone, no longer idle (a message arrived), or another sweeper holds its
        row (``SKIP LOCKED`` on PostgreSQL; SQLite's write lock serialises sweepers)."""
        now = self.clock()
        with transaction(self.engine) as conn:
            row = conn.execute(select(*_PARTY_COLUMNS).where(
                chat_sessions.c.id == session_id, _tenant_is(chat_sessions, tenant),
                chat_sessions.c.last_message_at < idle_before)
                .with_for_update(skip_locked=True)).first()
            if row is None:
                return "skipped", {}
            parties = _parties(row)
            scope = EraseScope("session", tenant, session_id=session_id)
            if holds_in_the_way(scope, self._active_holds(conn, tenant), [parties]):
                return "held", {}
            counts = self._purge_session(conn, parties)
            self._log(conn, tenant, "retention_delete", "session", (None, session_id), by,
                      now, counts=counts)
        return "deleted", counts

    def expire_memories(self, tenant: Ref, stale_before: datetime | None, now: datetime,
                        limit: int, after_id: int = 0, *,
                        by: str | None = "retention") -> tuple[int, int, int, int | None]:
        """Retention's delete of up to ``limit`` of ``tenant``'s memories that expired by
        ``now`` (with the earlier versions they superseded, as a delete takes them) or
        (``stale_before`` set) were neither updated nor recalled since ``stale_before``,
        skipping what a hold covers (its actor, its subject, its source session; a
        tenant-wide hold keeps them all) and rows another sweeper has locked, in id order
        after ``after_id``. Returns ``(deleted, of which expired, held, the last id looked
        at)`` (``None``: nothing was left to look at)."""
        m = memories.c
        due = and_(m.expires_at.is_not(None), m.expires_at <= now)
        if stale_before is not None:
            due = or_(due, and_(m.updated_at < stale_before,
                                or_(m.last_recalled_at.is_(None),
                                    m.last_recalled_at < stale_before)))
        with transaction(self.engine) as conn:
            holds = self._active_holds(conn, tenant)
            rows = conn.execute(select(*_MEMORY_HOLD_COLUMNS, m.expires_at).where(
                _tenant_is(memories, tenant), due, m.id > after_id).order_by(m.id)
                .limit(limit).with_for_update(skip_locked=True)).all()
            last = int(rows[-1].id) if rows else None
            if any(h.kind == "tenant" for h in holds):
                return 0, 0, len(rows), last
            expired = [r for r in rows if _expired(r.expires_at, now)]
            rows = list(rows) + self._earlier_versions(conn, tenant, [int(r.id) for r in expired])
            free = sorted({int(r.id) for r in rows
                           if not any(_memory_held(h, r) for h in holds)})
            counts = dict.fromkeys(SURFACES, 0)
            self._delete_memories(conn, free, counts)
            if free:
                self._log(conn, tenant, "retention_delete", "memories", (None, None), by,
                          now, counts={"memories": counts["memories"],
                                       "vectors": counts["vectors"]})
        gone = set(free)
        return (counts["memories"], sum(1 for r in expired if int(r.id) in gone),
                len({int(r.id) for r in rows}) - len(free), last)

    def _earlier_versions(self, conn: Connection, tenant: Ref, ids: Sequence[int]) -> list[Any]:
        """The rows (hold columns) of the versions ``ids`` superseded, in turn, locked."""
        m = memories.c
        found: list[Any] = []
        seen, frontier = set(ids), list(ids)
        while frontier:  # ids are unique and each step only adds new ones: it ends
            rows = conn.execute(select(*_MEMORY_HOLD_COLUMNS).where(
                _tenant_is(memories, tenant), m.superseded_by.in_(frontier))
                .with_for_update(skip_locked=True)).all()
            fresh = [r for r in rows if int(r.id) not in seen]
            seen.update(int(r.id) for r in fresh)
            found += fresh
            frontier = [int(r.id) for r in fresh]
        return found

    def _purge_session(self, conn: Connection, parties: Parties) -> dict[str, int]:
        """Every row of the session, in this transaction: messages, tool calls, folds,
        its memories (those carrying values or personal to its actor; the others
        unlinked), the ledger's link, then the row (summary, vault, key, title, metadata
        and integration state with it), and its LangGraph checkpoints."""
        session_id, actor, _ = parties
        m = memories.c
        counts = dict.fromkeys(SURFACES, 0)
        state = conn.execute(select(chat_sessions.c.summary, chat_sessions.c.pii_vault)
                             .where(chat_sessions.c.id == session_id)).first()
        if state is None:
            return counts
        counts["summaries"] = int(state[0] is not None)
        counts["vaults"] = int(state[1] is not None)
        counts["messages"] = conn.execute(delete(chat_messages).where(
            chat_messages.c.session_id == session_id)).rowcount
        counts["tool_calls"] = conn.execute(delete(chat_tool_calls).where(
            chat_tool_calls.c.session_id == session_id)).rowcount
        counts["folds"] = conn.execute(delete(chat_folds).where(
            chat_folds.c.session_id == session_id)).rowcount
        conn.execute(delete(chat_checkpoints).where(  # LangGraph's, with their values
            chat_checkpoints.c.session_id == session_id))
        _delete_replay(conn, session_id)
        own = [m.source_session_id == session_id, m.pii.is_not(None)]
        if actor is not None:
            own[1] = or_(m.pii.is_not(None), and_(m.actor_type == actor.type,
                                                  m.actor_id == actor.id_text))
        doomed = [int(i) for i in conn.execute(select(m.id).where(*own)).scalars()]
        self._delete_memories(conn, doomed, counts)
        counts["memories_unlinked"] = conn.execute(update(memories).where(
            m.source_session_id == session_id).values(source_session_id=None)).rowcount
        counts["usage_unlinked"] = conn.execute(update(chat_usage).where(
            chat_usage.c.session_id == session_id).values(session_id=None)).rowcount
        counts["sessions"] = conn.execute(delete(chat_sessions).where(
            chat_sessions.c.id == session_id)).rowcount
        return {k: int(v) for k, v in counts.items()}

    def _delete_memories(self, conn: Connection, ids: Sequence[int],
                         counts: dict[str, int]) -> None:
        if not ids:
            return
        if self._has_vectors(conn):
            counts["vectors"] += int(conn.exec_driver_sql(
                f"SELECT count(*) FROM {VECTOR_TABLE} WHERE memory_id IN "
                f"({', '.join(str(int(i)) for i in ids)})").scalar_one())
        counts["memories"] += conn.execute(delete(memories).where(
            memories.c.id.in_(list(ids)))).rowcount

    def _has_vectors(self, conn: Connection) -> bool:
        if self._vectors is None or not self._vectors:  # pgvector may arrive later
            self._vectors = vector_table_exists(conn)
        return self._vectors

    # -- purges inside a session (what a framework's delete calls) -----------------------

    def delete_last(self, session_id: str) -> int | None:
        """:meth:`pop_last`, answering the removed message's seq (``None``: none live)."""
        message = self.pop_last(session_id)
        return None if message is None else message.seq

    def pop_last(self, session_id: str) -> Message | None:
        """Delete the newest live message's row, in one transaction: its tool-call
        bookkeeping is freed (a retried call may reuse its id), ``last_seq`` falls back to
        the newest remaining message (seqs stay gapless when the tail goes), a summary
        that folded it in is dropped with its fold records (the replay starts again from
        the stored messages), and a distillation past it rewinds. Returns the message as
        it was (what a framework's ``pop_item`` hands back), or ``None`` when nothing is
        live."""
        s, msg = chat_sessions.c, chat_messages.c
        with transaction(self.engine) as conn:
            row = conn.execute(select(s.summary_watermark, s.distilled_through)
                               .where(s.id == session_id).with_for_update()).first()
            if row is None:
                raise SessionNotFound(f"no session {session_id!r}")
            watermark, distilled = int(row[0]), int(row[1])
            last = conn.execute(select(*MESSAGE_COLUMNS).where(
                msg.session_id == session_id, msg.retracted_at.is_(None))
                .order_by(msg.seq.desc()).limit(1)).first()
            if last is None:
                return None
            popped = message_from_row(last)
            seq = popped.seq
            conn.execute(delete(chat_messages).where(msg.session_id == session_id,
                                                     msg.seq == seq))
            self._free_calls(conn, session_id, seq, bool(last.tool_calls), last.role)
            values: dict[str, Any] = {
                "summary_version": s.summary_version + 1,
                "last_seq": select(func.coalesce(func.max(msg.seq), 0)).where(
                    msg.session_id == session_id).scalar_subquery()}
            if seq <= watermark:
                values.update(summary=None, summary_watermark=0)
                conn.execute(delete(chat_folds).where(chat_folds.c.session_id == session_id))
                # The summaries that folded it go too (a replay marks them erased).
                conn.execute(delete(chat_summary_versions).where(
                    chat_summary_versions.c.session_id == session_id,
                    chat_summary_versions.c.watermark >= seq))
            if seq <= distilled:
                values.update(distilled_through=seq - 1,
                              distil_version=s.distil_version + 1)
            conn.execute(update(chat_sessions).where(s.id == session_id).values(**values))
        self.settle(memories_touched=False)
        return popped

    def delete_all(self, session_id: str) -> int:
        """Delete every message row of the session with its tool calls, fold records,
        summary and placeholder vault (the values found in those messages), in one
        transaction: the session stays, empty, its seqs starting again at 1. Returns how
        many messages went."""
        s = chat_sessions.c
        with transaction(self.engine) as conn:
            if conn.execute(select(s.id).where(s.id == session_id).with_for_update()
                            ).first() is None:
                raise SessionNotFound(f"no session {session_id!r}")
            count = int(conn.execute(delete(chat_messages).where(
                chat_messages.c.session_id == session_id)).rowcount)
            conn.execute(delete(chat_tool_calls).where(
                chat_tool_calls.c.session_id == session_id))
            conn.execute(delete(chat_folds).where(chat_folds.c.session_id == session_id))
            _delete_replay(conn, session_id)
            conn.execute(update(chat_sessions).where(s.id == session_id).values(
                summary=None, summary_watermark=0, summary_version=s.summary_version + 1,
                last_seq=0, distilled_through=0, distil_version=s.distil_version + 1,
                pii_vault=None, pii_vault_version=s.pii_vault_version + 1))
        self.settle(memories_touched=False)
        return count

    def _free_calls(self, conn: Connection, session_id: str, seq: int, had_calls: bool,
                    role: str) -> None:
        t = chat_tool_calls.c
        if had_calls:
            conn.execute(delete(chat_tool_calls).where(t.session_id == session_id,
                                                       t.call_seq == seq))
        if role == "tool":
            conn.execute(update(chat_tool_calls).where(
                t.session_id == session_id, t.result_seq == seq).values(result_seq=None))

    # -- erasure: what is there, then batches ------------------------------------------------

    @retrying_reads
    def inventory(self, scope: EraseScope) -> Inventory:
        """What the store holds of ``scope`` (one snapshot on SQLite): its sessions and
        their message counts, the facts of every memory the scope may own, the tenant's
        active holds. Ids and counts only: no content is read."""
        with reading(self.engine) as conn:
            sessions = [_parties(r) for r in conn.execute(
                select(*_PARTY_COLUMNS).where(_scope_sessions(scope))
                .order_by(chat_sessions.c.id))]
            in_scope = select(chat_sessions.c.id).where(_scope_sessions(scope))
            counts = {str(sid): int(n) for sid, n in conn.execute(
                select(chat_messages.c.session_id, func.count())
                .where(chat_messages.c.session_id.in_(in_scope))
                .group_by(chat_messages.c.session_id))}
            facts = self._memory_facts(conn, scope, in_scope)
            vectors: frozenset[int] = frozenset()
            if facts and self._has_vectors(conn):
                ids = ", ".join(str(f.id) for f in facts)
                vectors = frozenset(int(i) for i in conn.exec_driver_sql(
                    f"SELECT memory_id FROM {VECTOR_TABLE} WHERE memory_id IN ({ids})")
                    .scalars())
            usage = int(conn.execute(select(func.count()).where(
                chat_usage.c.session_id.in_(in_scope))).scalar_one())
            holds = self._active_holds(conn, scope.tenant)
        return Inventory(scope, sessions, counts, facts, holds, vectors, usage)

    def _memory_facts(self, conn: Connection, scope: EraseScope,
                      in_scope: Any) -> list[MemoryFact]:
        m = memories.c
        from_scope = m.source_session_id.in_(in_scope)
        if scope.kind in ("actor", "subject"):
            assert scope.ref is not None
            own: ColumnElement[bool] = ref_filter(memories, scope.kind, scope.ref)
            if scope.kind == "subject":
                own = and_(own, m.actor_type.is_(None))  # personal ones are the actor's
        elif scope.kind == "tenant":
            own = true()
        else:
            own = literal(False)
        rows = conn.execute(select(m.id, m.scope, own.label("own"),
                                   from_scope.label("from_scope"),
                                   m.pii.is_not(None).label("values"))
                            .where(_tenant_is(memories, scope.tenant), or_(own, from_scope))
                            .order_by(m.id))
        return [MemoryFact(int(r.id), r.scope, bool(r.own), bool(r.from_scope),
                           bool(r.values)) for r in rows]

    def begin_erasure(self, scope: EraseScope, by: str | None = None) -> ErasureJob:
        """The running erasure of ``scope`` (a killed run's, to finish), or a new one."""
        scope_type, scope_id = scope.columns
        e = chat_erasures.c
        same = and_(_tenant_is(chat_erasures, scope.tenant), e.scope == scope.kind,
                    _is(e.scope_type, scope_type), _is(e.scope_id, scope_id),
                    e.state == "running")
        with transaction(self.engine) as conn:
            row = conn.execute(select(chat_erasures).where(same).order_by(e.started_at)
                               .limit(1).with_for_update()).first()
            if row is not None:
                return _job(row)
            row = conn.execute(insert(chat_erasures).values(
                id=str(uuid.uuid4()), **ref_values("tenant", scope.tenant),
                scope=scope.kind, scope_type=scope_type, scope_id=scope_id,
                state="running", counts=dict.fromkeys(SURFACES, 0), requested_by=by,
                started_at=self.clock(), finished_at=None, digest=None)
                .returning(chat_erasures)).one()
            return _job(row)

    def _held(self, conn: Connection, job: ErasureJob, sessions: Sequence[Parties]) -> None:
        refuse_held(job.scope, holds_in_the_way(
            job.scope, self._active_holds(conn, job.scope.tenant), sessions))

    def _bump(self, conn: Connection, job: ErasureJob, delta: Mapping[str, int],
              items: Sequence[tuple[str, str]] = ()) -> None:
        """Add ``delta`` to the job's counts and record ``items`` (surface, id), in the
        caller's transaction (the row lock orders concurrent runs of one job)."""
        row = conn.execute(select(chat_erasures.c.counts).where(
            chat_erasures.c.id == job.id).with_for_update()).one()
        counts = _counts(row[0])
        for key, value in delta.items():
            counts[key] = counts.get(key, 0) + int(value)
        conn.execute(update(chat_erasures).where(chat_erasures.c.id == job.id)
                     .values(counts=counts))
        job.counts = counts
        if items:
            done = {(s, i) for s, i in conn.execute(
                select(chat_erased_items.c.surface, chat_erased_items.c.item_id).where(
                    chat_erased_items.c.erasure_id == job.id,
                    chat_erased_items.c.item_id.in_([i for _, i in items])))}
            fresh = [{"erasure_id": job.id, **ref_values("tenant", job.scope.tenant),
                      "surface": s, "item_id": i} for s, i in items if (s, i) not in done]
            if fresh:
                conn.execute(insert(chat_erased_items), fresh)

    def erase_memories(self, job: ErasureJob, doomed: Sequence[int],
                       unlink: Sequence[int], sessions: Sequence[Parties]) -> dict[str, int]:
        """One batch: delete the memories ``doomed`` (their vectors and text-index entries
        go with them), and cut the session link of the kept ``unlink`` ones."""
        delta = dict.fromkeys(SURFACES, 0)
        with transaction(self.engine) as conn:
            self._held(conn, job, sessions)
            present = [int(i) for i in conn.execute(select(memories.c.id).where(
                _tenant_is(memories, job.scope.tenant), memories.c.id.in_(list(doomed))))
                .scalars()] if doomed else []
            self._delete_memories(conn, present, delta)
            if unlink:
                delta["memories_unlinked"] = conn.execute(update(memories).where(
                    _tenant_is(memories, job.scope.tenant), memories.c.id.in_(list(unlink)),
                    memories.c.source_session_id.is_not(None))
                    .values(source_session_id=None)).rowcount
            self._bump(conn, job, delta, [("memory", str(i)) for i in present]
                       + [("kept", str(i)) for i in unlink])
        return delta

    def erase_messages(self, job: ErasureJob, parties: Parties, limit: int) -> int:
        """One batch: delete up to ``limit`` of the session's messages (oldest first);
        how many went (0: none left)."""
        session_id = parties[0]
        with transaction(self.engine) as conn:
            self._held(conn, job, [parties])
            batch = select(chat_messages.c.id).where(
                chat_messages.c.session_id == session_id).order_by(
                chat_messages.c.id).limit(limit).scalar_subquery()
            count = int(conn.execute(delete(chat_messages).where(
                chat_messages.c.id.in_(batch))).rowcount)
            if count:
                self._bump(conn, job, {"messages": count})
        return count

    def erase_session(self, job: ErasureJob, parties: Parties) -> dict[str, int]:
        """The rest of one session (:meth:`_purge_session`), recorded in the job."""
        with transaction(self.engine) as conn:
            self._held(conn, job, [parties])
            delta = self._purge_session(conn, parties)
            self._bump(conn, job, delta,
                       [("session", parties[0])] if delta["sessions"] else [])
        return delta

    def finish_erasure(self, job: ErasureJob, digest: str, finished_at: datetime) -> None:
        """Mark the job done with its receipt's digest, and log it."""
        with transaction(self.engine) as conn:
            conn.execute(update(chat_erasures).where(chat_erasures.c.id == job.id)
                         .values(state="done", finished_at=finished_at, digest=digest))
            self._log(conn, job.scope.tenant, "erase", job.scope.kind, job.scope.columns,
                      job.requested_by, finished_at, counts=job.counts, digest=digest,
                      erasure_id=job.id)
        job.state, job.finished_at, job.digest = "done", finished_at, digest

    @retrying_reads
    def erasure(self, erasure_id: str) -> ErasureJob | None:
        """The erasure ``erasure_id`` with the ids it removed, or ``None``."""
        with reading(self.engine) as conn:
            row = conn.execute(select(chat_erasures).where(
                chat_erasures.c.id == erasure_id)).first()
            if row is None:
                return None
            job = _job(row)
            for surface, item in conn.execute(select(
                    chat_erased_items.c.surface, chat_erased_items.c.item_id).where(
                    chat_erased_items.c.erasure_id == erasure_id)):
                job.items.setdefault(surface, []).append(item)
        for ids in job.items.values():
            ids.sort()
        return job

    @retrying_reads
    def present(self, tenant: Ref, session_ids: Sequence[str],
                memory_ids: Sequence[int]) -> tuple[list[str], list[int]]:
        """Which of these sessions and memories of ``tenant`` still exist."""
        with reading(self.engine) as conn:
            sessions = sorted(str(i) for i in conn.execute(select(chat_sessions.c.id).where(
                chat_sessions.c.id.in_(list(session_ids))))) if session_ids else []
            found = sorted(int(i) for i in conn.execute(select(memories.c.id).where(
                _tenant_is(memories, tenant), memories.c.id.in_(list(memory_ids))))
                .scalars()) if memory_ids else []
        return sessions, found

    @retrying_reads
    def log(self, tenant: Ref | None = None, limit: int = 100) -> list[dict[str, Any]]:
        """The lifecycle log, newest first: who, when, what scope, counts, digest."""
        query = select(chat_lifecycle_log)
        if tenant is not None:
            query = query.where(_tenant_is(chat_lifecycle_log, tenant))
        with reading(self.engine) as conn:
            return [{**r._mapping, "counts": _counts(r.counts),
                     "created_at": as_utc(r.created_at)}
                    for r in conn.execute(query.order_by(chat_lifecycle_log.c.id.desc())
                                          .limit(limit))]

    def _log(self, conn: Connection, tenant: Ref, action: str, scope: str,
             columns: tuple[str | None, str | None], by: str | None, now: datetime, *,
             counts: Mapping[str, int] | None = None, digest: str | None = None,
             erasure_id: str | None = None, hold_id: int | None = None) -> None:
        conn.execute(insert(chat_lifecycle_log).values(
            **ref_values("tenant", tenant), action=action, scope=scope,
            scope_type=columns[0], scope_id=columns[1], actor_by=by, erasure_id=erasure_id,
            hold_id=hold_id, counts=dict(counts or {}), digest=digest, created_at=now))

    # -- bytes, not rows ---------------------------------------------------------------------

    def settle(self, *, memories_touched: bool = True) -> bool:
        """Make deletes final on disk. SQLite (``secure_delete`` is on for every chatkeep
        connection, so freed cells and pages are zeroed): merge the FTS5 index, whose
        deletes are otherwise tombstones beside the old segments, then checkpoint the WAL
        and truncate it (old page images live there). PostgreSQL: nothing here (a fresh
        dump holds only live rows; ``chatkeep db vacuum`` reclaims dead tuples). Returns
        whether the WAL was emptied (``False``: a reader kept it; the next settle will)."""
        if self.engine.dialect.name != "sqlite":
            return True
        if memories_touched:
            with transaction(self.engine) as conn:
                if conn.exec_driver_sql("SELECT count(*) FROM sqlite_master WHERE name = "
                                        f"'{FTS_TABLE}'").scalar() == 1:
                    conn.exec_driver_sql(
                        f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('optimize')")
        return checkpoint(self.engine)


def checkpoint(engine: Engine, attempts: int = 5) -> bool:
    """SQLite: ``PRAGMA wal_checkpoint(TRUNCATE)``, retried while a reader holds the WAL;
    whether it completed."""
    import time

    ensure_started(engine)
    for attempt in range(attempts):
        # On the driver's connection, outside any transaction (SQLAlchemy would begin one,
        # and a checkpoint inside a transaction is refused).
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            found = cursor.fetchone()
            busy = found is not None and found[0]
            cursor.close()
        except Exception as exc:
            raise driver_error(exc) from exc
        finally:
            raw.close()
        if not busy:
            return True
        time.sleep(0.05 * (attempt + 1))
    return False


def vacuum(engine: Engine, *, full: bool = False) -> list[str]:
    """Reclaim the space of deleted rows: SQLite ``VACUUM`` (rewrites the file) and a WAL
    truncate; PostgreSQL ``VACUUM`` (``VACUUM FULL`` with ``full``: rewrites each table,
    taking an exclusive lock) on chatkeep's tables. The statements run, in order."""
    from chatkeep.store.schema import metadata

    if engine.dialect.name == "sqlite":
        statements = ["VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"]
    else:
        verb = "VACUUM (FULL, ANALYZE)" if full else "VACUUM (ANALYZE)"
        statements = [f"{verb} {name}" for name in sorted(metadata.tables)]
        with reading(engine) as conn:
            if vector_table_exists(conn):
                statements.append(f"{verb} {VECTOR_TABLE}")
    if engine.dialect.name == "sqlite":
        ensure_started(engine)
        raw = engine.raw_connection()
        try:
            for statement in statements:
                cursor = raw.cursor()
                cursor.execute(statement)
                cursor.fetchall()
                cursor.close()
        except Exception as exc:
            raise driver_error(exc) from exc
        finally:
            raw.close()
        return statements
    with autocommit(engine) as conn:
        for statement in statements:
            conn.exec_driver_sql(statement)
    return statements


def _memory_held(hold: HoldRow, row: Any) -> bool:
    if hold.session_id is not None:
        return bool(hold.session_id == row.source_session_id)
    if hold.actor is not None:
        return bool(row.actor_type == hold.actor.type and row.actor_id == hold.actor.id_text)
    if hold.subject is not None:
        return bool(row.subject_type == hold.subject.type
                    and row.subject_id == hold.subject.id_text)
    return True


def _expired(expires_at: datetime | None, now: datetime) -> bool:
    moment = as_utc(expires_at)
    return moment is not None and moment <= now


def _is(column: Any, value: str | None) -> ColumnElement[bool]:
    clause: ColumnElement[bool] = column.is_(None) if value is None else column == value
    return clause


def _hold_columns(hold: HoldRow) -> tuple[str | None, str | None]:
    if hold.session_id is not None:
        return None, hold.session_id
    ref = hold.actor or hold.subject
    return (ref.type, ref.id_text) if ref is not None else (None, None)


__all__ = ["SCOPES", "SURFACES", "EraseScope", "ErasureJob", "HoldRow", "Inventory",
           "LifecycleStore", "MemoryFact", "checkpoint", "hold_covers", "holds_in_the_way",
           "refuse_held", "vacuum"]


def _delete_replay(conn: Connection, session_id: str) -> None:
    """The session's summary versions (their text), request manifests and the texts
    those name (system prompts, literal memories, config): with the session or its log."""
    for table in (chat_summary_versions, chat_replay_manifests, chat_replay_texts):
        conn.execute(delete(table).where(table.c.session_id == session_id))
