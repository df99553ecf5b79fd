"""Memories by id, written and removed one at a time: what a LangGraph store needs and
``keep.memory`` does not offer yet (it writes memories only by distilling conversations).

Kept in this one module, in the store's terms (its table, its transaction, its unique
index on a scope's live texts, its vector table through ``MemoryStore.store_vectors``),
so it can move into ``chatkeep.store.memories`` / ``MemoryService`` as it is. Every
statement names the tenant and the scope, so no id reaches another tenant's memory or
another scope's.

* :func:`find`: a live memory by id; a superseded one leads to the memory that replaced
  it (an updated item is found by its old key).
* :func:`add`: a new memory, carrying the personal values its text holds (sealed, so
  recall redacts them literally in any session), superseding ``replaces`` in the same
  transaction, and embedded (masked) when recall by meaning is configured. A live memory
  with the same text in the scope is returned instead of a second copy.
* :func:`remove`: delete a memory (its vector goes with it), like ``forget`` does.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import Connection, and_, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from chatkeep.app import Chatkeep
from chatkeep.errors import InvalidArgument
from chatkeep.memory.hybrid import HybridRetriever
from chatkeep.memory.scopes import ScopeTarget
from chatkeep.memory.text import content_key
from chatkeep.privacy.guard import seal_spans
from chatkeep.refs import Ref
from chatkeep.store.connections import reading, transaction
from chatkeep.store.memories import MemoryRow
from chatkeep.store.rows import as_utc, utcnow
from chatkeep.store.schema import memories, ref_filter, ref_values
from chatkeep.validation import check_text

log = logging.getLogger("chatkeep.integrations.langchain")

#: Supersessions followed from an old id to the live memory that replaced it.
MAX_HOPS = 64

__all__ = ["add", "find", "remove"]


def _in_scope(target: ScopeTarget) -> Any:
    return and_(ref_filter(memories, "tenant", target.tenant),
                memories.c.scope_key == target.key)


def find(core: Chatkeep, target: ScopeTarget, memory_id: int) -> MemoryRow | None:
    """The live memory ``memory_id`` of ``target``, or the one that superseded it;
    ``None`` when there is none in that scope (another tenant's id is not found)."""
    with reading(core.memory.store.engine) as conn:
        for _ in range(MAX_HOPS):
            row = conn.execute(select(memories).where(
                _in_scope(target), memories.c.id == memory_id)).first()
            if row is None:
                return None
            memory = _memory(row)
            if memory.superseded_by is None:
                return memory
            memory_id = memory.superseded_by
    return None


def add(core: Chatkeep, target: ScopeTarget, content: str, *, replaces: int | None = None,
        embed: bool = True) -> MemoryRow:
    """Write ``content`` as a live memory of ``target`` (see the module docstring)."""
    check_text(content, "memory content", non_empty=True)
    store = core.memory.store
    sealed = seal_spans(core.privacy.redactor.detector.detect(content),
                        core.config.privacy.encryption_key)
    key = content_key(content)
    now = store.clock()
    with transaction(store.engine) as conn:
        new_id = _insert(conn, target, content, key, sealed, now)
        if new_id is None:  # the scope holds this text already: that memory is the item
            existing = conn.execute(select(memories).where(
                _in_scope(target), memories.c.content_key == key,
                memories.c.superseded_by.is_(None))).first()
            if existing is None:  # pragma: no cover - the unique index says it exists
                raise InvalidArgument("the memory could not be written; try again")
            new_id = int(existing._mapping["id"])
        if replaces is not None and replaces != new_id:
            conn.execute(update(memories).where(
                _in_scope(target), memories.c.id == replaces,
                memories.c.superseded_by.is_(None)).values(superseded_by=new_id,
                                                          updated_at=now))
        row = conn.execute(select(memories).where(memories.c.id == new_id)).one()
    memory = _memory(row)
    if embed and isinstance(core.memory.retriever, HybridRetriever):
        _embed(core, core.memory.retriever, memory)
    return memory


def remove(core: Chatkeep, target: ScopeTarget, memory_id: int) -> bool:
    """Delete the memory ``memory_id`` of ``target`` (``False``: none there)."""
    with transaction(core.memory.store.engine) as conn:
        result = conn.execute(delete(memories).where(_in_scope(target),
                                                     memories.c.id == memory_id))
        return bool(result.rowcount)


def _insert(conn: Connection, target: ScopeTarget, content: str, key: str,
            sealed: str | None, now: Any) -> int | None:
    values = {**ref_values("tenant", target.tenant), **ref_values("subject", target.subject),
              **ref_values("actor", target.actor), "scope": target.scope.value,
              "scope_key": target.key, "content": content, "content_key": key,
              "source_session_id": None, "source_through_seq": 0, "created_at": now,
              "updated_at": now, "superseded_by": None, "pii": sealed}
    dialect_insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
    row = conn.execute(dialect_insert(memories).values(**values).on_conflict_do_nothing()
                       .returning(memories.c.id)).first()
    return None if row is None else int(row[0])


def _embed(core: Chatkeep, retriever: HybridRetriever, memory: MemoryRow) -> None:
    """The memory's vector, its text masked with the values it carries (as a distilled
    memory's is); a failed call leaves it for ``keep.memory.embed_missing``."""
    try:
        vector = retriever.query_vector(memory.content, sealed=memory.sealed_pii)
        if vector is not None:
            core.memory.store.store_vectors(retriever.model, [(memory.id, vector)])
    except Exception:
        log.exception("memory %d: embedding failed; recall by words finds it, "
                      "`chatkeep memories embed` adds its vector", memory.id)


def _memory(row: Any) -> MemoryRow:
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
        sealed_pii=m["pii"])
