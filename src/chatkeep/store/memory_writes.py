"""The memory store's writes: the distillation commit, single writes, the watermark.

The memory logic (``chatkeep.memory``) decides what to write; this module is how.
Two guarantees live here:

* ``commit_distillation`` moves the session's ``distilled_through`` watermark by
  compare-and-set on ``distil_version`` *and* writes the memory rows in the same
  transaction, so a crash cannot separate them and a lost race writes nothing.
* A live memory is unique per (tenant, scope, normalised text): inserts use
  ``ON CONFLICT DO NOTHING`` on a partial unique index, so even two tenants' worth
  of concurrent workers cannot store one fact twice in one scope.

A memory's vector, when the caller computed it beforehand, is written in the same
transaction as the memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, and_, or_, select, update

from chatkeep.errors import StoreError
from chatkeep.refs import Ref
from chatkeep.store.connections import transaction
from chatkeep.store.lazy import dialect_insert
from chatkeep.store.memory_rows import (
    CommitResult,
    MemoryRow,
    MemoryWrite,
    live_in,
    read_one,
    tenant_is,
    unexpired,
)
from chatkeep.store.memory_vectors import MemoryVectors
from chatkeep.store.repository import utcnow
from chatkeep.store.schema import chat_sessions, memories, ref_values


class MemoryWrites:
    """Writes of memories (thread-safe): each one transaction, nothing half-written."""

    def __init__(self, engine: Engine, vectors: MemoryVectors,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.vectors = vectors
        self.clock = clock

    # -- the distillation commit ---------------------------------------------------------

    def commit_distillation(self, session_id: str, expected_version: int, through_seq: int,
                            writes: Sequence[MemoryWrite]) -> CommitResult | None:
        """Advance ``distilled_through`` to ``through_seq`` and write ``writes``, atomically.

        Returns ``None`` (and writes nothing) when ``distil_version`` moved since the
        caller read it: another worker distilled this range first.
        """
        now = self.clock()
        for write in writes:  # index DDL in its own short transaction, before the write
            self._index_for(write)
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
                    self._put_vector(conn, write, new_id)
                if write.supersedes is not None and new_id is not None \
                        and new_id != write.supersedes:
                    superseded += self._supersede(conn, write, new_id, now)
            return CommitResult(inserted, duplicates, superseded)

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

    # -- memories written one at a time (keep.memory.add / update) -----------------------

    def add_memory(self, write: MemoryWrite) -> tuple[MemoryRow, bool]:
        """Write ``write`` as a live memory taken from no conversation, with its vector
        when it has one; or, when its scope has a live memory of the same normalised text
        (the unique index, as a distillation meets it), that memory. ``True``: written."""
        self._index_for(write)
        with transaction(self.engine) as conn:
            new_id, inserted = self._insert_or_live(conn, write, self.clock())
            return read_one(conn, new_id), inserted

    def supersede_memory(self, write: MemoryWrite) -> MemoryRow | None:
        """Write ``write`` and supersede the live memory ``write.supersedes`` by it (its
        tenant and scope only), in one transaction: the distiller's UPDATE, one memory at a
        time. When the scope has a live memory of the new text already, that one supersedes
        it (as in ``commit_distillation``); when the text is the old memory's own, nothing
        changes. ``None``, with nothing written, when ``write.supersedes`` is no longer a
        live memory of that scope (superseded or erased meanwhile)."""
        assert write.supersedes is not None
        self._index_for(write)
        now = self.clock()
        with transaction(self.engine) as conn:
            # Locked on PostgreSQL (a concurrent update waits, then finds it superseded);
            # SQLite's write transaction holds the database already.
            old = conn.execute(
                select(memories.c.id)
                .where(memories.c.id == write.supersedes,
                       live_in(write.tenant, [write.scope_key]))
                .with_for_update()).first()
            if old is None:
                return None
            new_id, _ = self._insert_or_live(conn, write, now)
            if new_id != write.supersedes:
                self._supersede(conn, write, new_id, now)
            return read_one(conn, new_id)

    # -- the statements ------------------------------------------------------------------

    def _index_for(self, write: MemoryWrite) -> None:
        """PostgreSQL: the vector index of ``write``'s dimension, in its own short
        transaction before the write."""
        if write.embedding is not None:
            self.vectors.ensure_vector_index(len(write.embedding))

    def _put_vector(self, conn: Connection, write: MemoryWrite, memory_id: int) -> None:
        if write.embedding is not None and write.embedding_model:
            self.vectors.put_vectors(conn, write.embedding_model, [(memory_id, write.embedding)])

    def _insert_or_live(self, conn: Connection, write: MemoryWrite,
                        now: datetime) -> tuple[int, bool]:
        """``write`` inserted (with its vector), or the live memory of its scope holding its
        text; ``(id, inserted)``."""
        for _ in range(3):  # the live copy the insert met can be superseded before the read
            new_id = self._insert(conn, write, None, 0, now)
            if new_id is not None:
                self._put_vector(conn, write, new_id)
                return new_id, True
            live = self._live_id(conn, write)
            if live is not None:
                return live, False
        raise StoreError("the memory could not be written: its scope kept changing; try again")

    def _insert(self, conn: Connection, write: MemoryWrite, session_id: str | None,
                through_seq: int, now: datetime) -> int | None:
        values = {
            **ref_values("tenant", write.tenant), **ref_values("subject", write.subject),
            **ref_values("actor", write.actor), "scope": write.scope,
            "scope_key": write.scope_key, "content": write.content,
            "content_key": write.content_key, "source_session_id": session_id,
            "source_through_seq": through_seq, "created_at": now, "updated_at": now,
            "superseded_by": None, "pii": write.sealed_pii,
        }
        dialect = "postgresql" if conn.dialect.name == "postgresql" else "sqlite"
        statement = (dialect_insert(dialect, memories).values(**values)
                     .on_conflict_do_nothing().returning(memories.c.id))
        row = conn.execute(statement).first()
        return None if row is None else int(row[0])

    def _live_id(self, conn: Connection, write: MemoryWrite) -> int | None:
        row = conn.execute(select(memories.c.id).where(
            live_in(write.tenant, [write.scope_key]),
            memories.c.content_key == write.content_key)).first()
        return None if row is None else int(row[0])

    def _supersede(self, conn: Connection, write: MemoryWrite, new_id: int,
                   now: datetime) -> int:
        # Same tenant and scope only: a fact can never retire another scope's memory.
        result = conn.execute(
            update(memories)
            .where(memories.c.id == write.supersedes, memories.c.superseded_by.is_(None),
                   live_in(write.tenant, [write.scope_key]))
            .values(superseded_by=new_id, updated_at=now))
        return int(result.rowcount)

    # -- expiry and recall times (issue 36) -----------------------------------------------

    def set_expiry(self, tenant: Ref, memory_id: int, ttl_seconds: int | None) -> bool:
        """Make the memory ``memory_id`` of ``tenant`` expire ``ttl_seconds`` from now
        (``None``: never), remembering the time to live so a refreshing read can push
        the expiry on by it. Whether there was such a memory."""
        now = self.clock()
        expires = None if ttl_seconds is None else now + timedelta(seconds=ttl_seconds)
        with transaction(self.engine) as conn:
            return bool(conn.execute(update(memories).where(
                tenant_is(tenant), memories.c.id == memory_id)
                .values(expires_at=expires, ttl_seconds=ttl_seconds)).rowcount)

    def refresh_expiry(self, tenant: Ref, memory_ids: Sequence[int]) -> int:
        """Push the expiry of those of ``memory_ids`` (``tenant``'s) that have a time to
        live and have not expired to now plus it, in one transaction (an expired one stays
        expired: the sweep deletes it). How many moved."""
        if not memory_ids:
            return 0
        now = self.clock()
        m = memories.c
        due = and_(tenant_is(tenant), m.id.in_(sorted({int(i) for i in memory_ids})),
                   m.ttl_seconds.is_not(None), unexpired(now))
        moved = 0
        with transaction(self.engine) as conn:
            ttls = conn.execute(select(m.ttl_seconds).where(due).distinct()).scalars().all()
            for ttl in ttls:  # one statement per time to live (a store has one or two)
                moved += int(conn.execute(update(memories).where(due, m.ttl_seconds == ttl)
                                          .values(expires_at=now + timedelta(seconds=ttl)))
                             .rowcount)
        return moved

    def stamp_recalled(self, tenant: Ref, memory_ids: Sequence[int], older_than: datetime,
                       now: datetime | None = None) -> int:
        """Set the recall time of those of ``memory_ids`` (``tenant``'s) whose stored one
        is older than ``older_than`` (or unset) to ``now`` (default: the clock): one
        statement for a whole recall, in its own short transaction (never the read's).
        How many were stamped."""
        if not memory_ids:
            return 0
        m = memories.c
        with transaction(self.engine) as conn:
            return int(conn.execute(update(memories).where(
                tenant_is(tenant), m.id.in_(sorted({int(i) for i in memory_ids})),
                or_(m.last_recalled_at.is_(None), m.last_recalled_at < older_than))
                .values(last_recalled_at=now or self.clock())).rowcount)

