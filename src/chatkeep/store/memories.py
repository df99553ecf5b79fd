"""SQL for memories: search, the distillation commit, sweep leases, erasure.

The memory logic (``chatkeep.memory``) decides what to write; this module is how.
Two guarantees live here:

* ``commit_distillation`` moves the session's ``distilled_through`` watermark by
  compare-and-set on ``distil_version`` *and* writes the memory rows in the same
  transaction, so a crash cannot separate them and a lost race writes nothing.
* A live memory is unique per (tenant, scope, normalised text): inserts use
  ``ON CONFLICT DO NOTHING`` on a partial unique index, so even two tenants' worth
  of concurrent workers cannot store one fact twice in one scope.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Select,
    and_,
    column,
    delete,
    func,
    literal_column,
    or_,
    select,
    table,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.expression import ColumnClause

from chatkeep.refs import Ref
from chatkeep.store.connections import reading, transaction
from chatkeep.store.memory_index import FTS_TABLE, PG_TEXT_CONFIG
from chatkeep.store.repository import as_utc, utcnow
from chatkeep.store.schema import chat_sessions, memories, ref_filter, ref_values

_fts = table(FTS_TABLE, column("rowid"), column(FTS_TABLE))


@dataclass(frozen=True, slots=True)
class MemoryRow:
    """One stored memory. ``superseded_by`` set = replaced, out of recall."""

    id: int
    tenant: Ref
    scope: str
    subject: Ref | None
    actor: Ref | None
    content: str
    source_session_id: str | None
    source_through_seq: int
    created_at: datetime
    updated_at: datetime
    superseded_by: int | None = None
    score: float | None = None
    """Relevance to the query that found it (higher is better); ``None`` when listed."""


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """A memory to insert; ``supersedes`` is the id of the live row it replaces."""

    tenant: Ref
    scope: str
    scope_key: str
    subject: Ref | None
    actor: Ref | None
    content: str
    content_key: str
    supersedes: int | None = None


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a distillation commit changed."""

    inserted: list[int]
    duplicates: int
    superseded: int


def _tenant_is(tenant: Ref) -> Any:
    return ref_filter(memories, "tenant", tenant)


def _row(row: Any, score: float | None = None) -> MemoryRow:
    m = row._mapping
    tenant = Ref.from_columns(m["tenant_type"], m["tenant_id"], m["tenant_id_int"])
    assert tenant is not None
    return MemoryRow(
        id=int(m["id"]), tenant=tenant, scope=m["scope"],
        subject=Ref.from_columns(m["subject_type"], m["subject_id"], m["subject_id_int"]),
        actor=Ref.from_columns(m["actor_type"], m["actor_id"], m["actor_id_int"]),
        content=m["content"], source_session_id=m["source_session_id"],
        source_through_seq=int(m["source_through_seq"]),
        created_at=as_utc(m["created_at"]) or utcnow(),
        updated_at=as_utc(m["updated_at"]) or utcnow(),
        superseded_by=None if m["superseded_by"] is None else int(m["superseded_by"]),
        score=score,
    )


class MemoryStore:
    """Memory persistence over the same engine as the ``Repository`` (thread-safe)."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    # -- reading -------------------------------------------------------------------------

    def _live_in(self, tenant: Ref, scope_keys: Sequence[str]) -> Any:
        return and_(_tenant_is(tenant), memories.c.scope_key.in_(list(scope_keys)),
                    memories.c.superseded_by.is_(None))

    def search(self, tenant: Ref, scope_keys: Sequence[str], terms: Sequence[str],
               limit: int) -> list[MemoryRow]:
        """Live memories in ``scope_keys`` matching any of ``terms``, best first, newest
        first among equals (served by the FTS5 table / the GIN expression index)."""
        if not terms or not scope_keys or limit <= 0:
            return []
        query, score_label = self._text_query(terms)
        query = query.where(self._live_in(tenant, scope_keys)).order_by(
            literal_column(score_label).desc(), memories.c.updated_at.desc(),
            memories.c.id.desc()).limit(limit)
        with reading(self.engine) as conn:
            if conn.dialect.name not in ("sqlite", "postgresql"):
                raise NotImplementedError(f"no text search for {conn.dialect.name}")
            return [_row(r, float(r._mapping[score_label])) for r in conn.execute(query)]

    def _text_query(self, terms: Sequence[str]) -> tuple[Select[Any], str]:
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            match = " OR ".join(f'"{t}"' for t in terms)  # terms are \w+: no quotes inside
            score = (-func.bm25(literal_column(FTS_TABLE))).label("score")
            query = (select(memories, score).select_from(
                _fts.join(memories, memories.c.id == _fts.c.rowid))
                .where(_fts.c[FTS_TABLE].op("MATCH")(match)))
            return query, "score"
        config: ColumnClause[Any] = literal_column(f"'{PG_TEXT_CONFIG}'")
        vector = func.to_tsvector(config, memories.c.content)
        tsquery = func.websearch_to_tsquery(config, " or ".join(terms))
        query = select(memories, func.ts_rank(vector, tsquery).label("score")).where(
            vector.op("@@")(tsquery))
        return query, "score"

    def recent(self, tenant: Ref, scope_keys: Sequence[str], limit: int,
               exclude: Sequence[int] = ()) -> list[MemoryRow]:
        """Live memories in ``scope_keys``, most recently written first."""
        if not scope_keys or limit <= 0:
            return []
        query = select(memories).where(self._live_in(tenant, scope_keys))
        if exclude:
            query = query.where(memories.c.id.not_in(list(exclude)))
        query = query.order_by(memories.c.updated_at.desc(), memories.c.id.desc()).limit(limit)
        with reading(self.engine) as conn:
            return [_row(r) for r in conn.execute(query)]

    def find_live(self, tenant: Ref, scope_key: str, content_key: str) -> MemoryRow | None:
        """The live memory with this normalised text in this scope, if any."""
        query = select(memories).where(self._live_in(tenant, [scope_key]),
                                       memories.c.content_key == content_key)
        with reading(self.engine) as conn:
            row = conn.execute(query).first()
        return _row(row) if row is not None else None

    def find_known(self, tenant: Ref, scope_key: str, content_key: str, session_id: str,
                   after_seq: int) -> MemoryRow | None:
        """A memory that already holds this text in this scope: a live one, or one taken
        from this very session past ``after_seq`` and superseded since (re-distilling a
        range must not bring back a fact that was later replaced)."""
        from_here = and_(memories.c.source_session_id == session_id,
                         memories.c.source_through_seq > after_seq)
        query = (select(memories)
                 .where(_tenant_is(tenant), memories.c.scope_key == scope_key,
                        memories.c.content_key == content_key,
                        or_(memories.c.superseded_by.is_(None), from_here))
                 .order_by(memories.c.superseded_by.is_(None).desc()).limit(1))
        with reading(self.engine) as conn:
            row = conn.execute(query).first()
        return _row(row) if row is not None else None

    def list_memories(self, tenant: Ref, *, scope: str | None = None, actor: Ref | None = None,
             subject: Ref | None = None, include_superseded: bool = False,
             limit: int = 100) -> list[MemoryRow]:
        """A tenant's memories for review (``chatkeep memories list``), newest first."""
        query = select(memories).where(_tenant_is(tenant))
        if scope is not None:
            query = query.where(memories.c.scope == scope)
        if actor is not None:
            query = query.where(memories.c.actor_type == actor.type,
                                memories.c.actor_id == actor.id_text)
        if subject is not None:
            query = query.where(memories.c.subject_type == subject.type,
                                memories.c.subject_id == subject.id_text)
        if not include_superseded:
            query = query.where(memories.c.superseded_by.is_(None))
        query = query.order_by(memories.c.updated_at.desc(), memories.c.id.desc()).limit(limit)
        with reading(self.engine) as conn:
            return [_row(r) for r in conn.execute(query)]

    def count(self, tenant: Ref | None = None, *, live_only: bool = False) -> int:
        """Number of memory rows (all tenants when ``tenant`` is ``None``)."""
        query = select(func.count()).select_from(memories)
        if tenant is not None:
            query = query.where(_tenant_is(tenant))
        if live_only:
            query = query.where(memories.c.superseded_by.is_(None))
        with reading(self.engine) as conn:
            return int(conn.execute(query).scalar_one())

    # -- the distillation commit ---------------------------------------------------------

    def commit_distillation(self, session_id: str, expected_version: int, through_seq: int,
                            writes: Sequence[MemoryWrite]) -> CommitResult | None:
        """Advance ``distilled_through`` to ``through_seq`` and write ``writes``, atomically.

        Returns ``None`` (and writes nothing) when ``distil_version`` moved since the
        caller read it: another worker distilled this range first.
        """
        now = self.clock()
        with transaction(self.engine) as conn:
            moved = conn.execute(
                update(chat_sessions)
                .where(chat_sessions.c.id == session_id,
                       chat_sessions.c.distil_version == expected_version,
                       chat_sessions.c.distilled_through < through_seq)
                .values(distilled_through=through_seq, distil_version=expected_version + 1))
            if moved.rowcount != 1:
                return None  # nothing was written; the empty transaction commits
            inserted: list[int] = []
            duplicates = superseded = 0
            for write in writes:
                new_id = self._insert(conn, write, session_id, through_seq, now)
                if new_id is None:
                    duplicates += 1
                    new_id = self._live_id(conn, write)
                else:
                    inserted.append(new_id)
                if write.supersedes is not None and new_id is not None \
                        and new_id != write.supersedes:
                    superseded += self._supersede(conn, write, new_id, now)
            return CommitResult(inserted, duplicates, superseded)

    def _insert(self, conn: Connection, write: MemoryWrite, session_id: str,
                through_seq: int, now: datetime) -> int | None:
        values = {
            **ref_values("tenant", write.tenant), **ref_values("subject", write.subject),
            **ref_values("actor", write.actor), "scope": write.scope,
            "scope_key": write.scope_key, "content": write.content,
            "content_key": write.content_key, "source_session_id": session_id,
            "source_through_seq": through_seq, "created_at": now, "updated_at": now,
            "superseded_by": None,
        }
        dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        statement = (dialect_insert(memories).values(**values).on_conflict_do_nothing()
                     .returning(memories.c.id))
        row = conn.execute(statement).first()
        return None if row is None else int(row[0])

    def _live_id(self, conn: Connection, write: MemoryWrite) -> int | None:
        row = conn.execute(select(memories.c.id).where(
            self._live_in(write.tenant, [write.scope_key]),
            memories.c.content_key == write.content_key)).first()
        return None if row is None else int(row[0])

    def _supersede(self, conn: Connection, write: MemoryWrite, new_id: int,
                   now: datetime) -> int:
        # Same tenant and scope only: a fact can never retire another scope's memory.
        result = conn.execute(
            update(memories)
            .where(memories.c.id == write.supersedes, memories.c.superseded_by.is_(None),
                   self._live_in(write.tenant, [write.scope_key]))
            .values(superseded_by=new_id, updated_at=now))
        return int(result.rowcount)

    def rewind(self, session_id: str, through_seq: int = 0) -> bool:
        """Move ``distilled_through`` back to ``through_seq`` (compare-and-set by version
        bump); ``False`` when the session is not past it."""
        with transaction(self.engine) as conn:
            result = conn.execute(
                update(chat_sessions)
                .where(chat_sessions.c.id == session_id,
                       chat_sessions.c.distilled_through > through_seq)
                .values(distilled_through=through_seq,
                        distil_version=chat_sessions.c.distil_version + 1))
            return bool(result.rowcount == 1)

    # -- sessions: what needs distilling, and leases -------------------------------------

    def claim_idle(self, idle_before: datetime, lease_until: datetime,
                   limit: int) -> list[str]:
        """Claim up to ``limit`` sessions quiet since ``idle_before`` that have undistilled
        messages and no live lease; each claim is a compare-and-set on the lease, so
        concurrent sweeps never claim one session twice."""
        now = self.clock()
        s = chat_sessions.c
        free = or_(s.distil_lease_until.is_(None), s.distil_lease_until < now)
        candidates = (select(s.id).where(s.last_message_at < idle_before,
                                         s.last_seq > s.distilled_through, free)
                      .order_by(s.last_message_at, s.id).limit(limit))
        claimed: list[str] = []
        with transaction(self.engine) as conn:
            for (session_id,) in conn.execute(candidates).all():
                result = conn.execute(update(chat_sessions)
                                      .where(s.id == session_id, free)
                                      .values(distil_lease_until=lease_until))
                if result.rowcount == 1:
                    claimed.append(session_id)
        return claimed

    def set_lease(self, session_id: str, until: datetime | None) -> None:
        """Hold (``until``) or release (``None``) the distil lease of one session."""
        with transaction(self.engine) as conn:
            conn.execute(update(chat_sessions).where(chat_sessions.c.id == session_id)
                         .values(distil_lease_until=until))

    def lease_of(self, session_id: str) -> datetime | None:
        """When the session's distil lease expires (``None`` = not leased)."""
        with reading(self.engine) as conn:
            value = conn.execute(select(chat_sessions.c.distil_lease_until)
                                 .where(chat_sessions.c.id == session_id)).scalar()
        return as_utc(value)

    # -- erasure -------------------------------------------------------------------------

    def delete_personal(self, tenant: Ref, actor: Ref) -> int:
        """Delete every personal memory of ``actor`` in ``tenant`` (superseded ones too)."""
        statement = delete(memories).where(
            _tenant_is(tenant), memories.c.actor_type == actor.type,
            memories.c.actor_id == actor.id_text)
        with transaction(self.engine) as conn:
            return int(conn.execute(statement).rowcount)

    def delete_tenant(self, tenant: Ref) -> int:
        """Delete all of ``tenant``'s memories."""
        with transaction(self.engine) as conn:
            return int(conn.execute(delete(memories).where(_tenant_is(tenant))).rowcount)
