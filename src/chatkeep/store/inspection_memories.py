"""The inspector's reads of memories: the keyset-paged list, one memory and its versions,
its provenance, its vectors, and the counts per scope.

Nothing here writes. A tenant given to a function is part of its ``WHERE`` clause.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, exists, func, select

from chatkeep.refs import Ref
from chatkeep.store.connections import reading
from chatkeep.store.keyset import PAGE, decode_cursor, encode_cursor
from chatkeep.store.memory_index import vector_table_exists
from chatkeep.store.memory_rows import MemoryRow, memory_row
from chatkeep.store.memory_vectors import vectors_table as _vectors
from chatkeep.store.schema import memories, ref_filter

_Mem = memories.c


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

