"""The memory store's values and shared filters: rows as read, writes as asked.

Every part of the memory store (``memory_recall``, ``memory_writes``, ``memory_vectors``,
``memory_lifecycle``, ``memory_leases``) reads and writes these, and the inspector's reads
shape their rows with :func:`memory_row`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, or_, select

from chatkeep.refs import Ref
from chatkeep.store.repository import as_utc, utcnow
from chatkeep.store.schema import memories, ref_filter

Vector = Sequence[float]
"""An embedding as the embedder returned it."""

# Built once: recall runs it on every query, and building a statement costs more than
# SQLite takes to answer it.
BY_IDS = select(memories).where(memories.c.id.in_(bindparam("ids", expanding=True)))


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
    sealed_pii: str | None = None
    """The personal values ``content`` holds, sealed (opaque): what lets recall redact them
    literally in any session. ``None`` when it holds none."""
    expires_at: datetime | None = None
    """When it expires (``None``: never): from then on it is not served, and the retention
    sweep deletes it."""
    last_recalled_at: datetime | None = None
    """When recall last served it, to the granularity ``memory.recall_stamp_every``
    (``None``: never since it was written, or before chatkeep kept the time)."""

    def expired(self, now: datetime) -> bool:
        """Whether it has expired at ``now``."""
        return self.expires_at is not None and self.expires_at <= now


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
    sealed_pii: str | None = None
    embedding: tuple[float, ...] | None = None
    """The content's vector, computed before the transaction; ``None`` = to be embedded."""
    embedding_model: str | None = None
    """The model that made ``embedding``."""


@dataclass(frozen=True, slots=True)
class VectorStatus:
    """How many live memories have a vector of one model, and how many do not."""

    model: str
    embedded: int
    missing: int


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a distillation commit changed."""

    inserted: list[int]
    duplicates: int
    superseded: int


def tenant_is(tenant: Ref) -> Any:
    """The filter for ``tenant``'s memories (every memory query starts from it)."""
    return ref_filter(memories, "tenant", tenant)


def live_in(tenant: Ref, scope_keys: Sequence[str]) -> Any:
    """The filter for ``tenant``'s live memories in ``scope_keys`` (not superseded): what
    a write compares with (an expired memory still holds its text until the sweep)."""
    return and_(tenant_is(tenant), memories.c.scope_key.in_(list(scope_keys)),
                memories.c.superseded_by.is_(None))


def unexpired(now: datetime) -> Any:
    """The filter for memories not expired at ``now``: what recall may serve."""
    return or_(memories.c.expires_at.is_(None), memories.c.expires_at > now)


def memory_row(row: Any, score: float | None = None) -> MemoryRow:
    """A ``memories`` result row as a ``MemoryRow`` (the store's reads, and the inspector's)."""
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
        score=score, sealed_pii=m["pii"], expires_at=as_utc(m["expires_at"]),
        last_recalled_at=as_utc(m["last_recalled_at"]),
    )


def read_one(conn: Connection, memory_id: int) -> MemoryRow:
    """The memory ``memory_id`` as read in ``conn``'s transaction (it must exist)."""
    return memory_row(conn.execute(BY_IDS, {"ids": [memory_id]}).one())
