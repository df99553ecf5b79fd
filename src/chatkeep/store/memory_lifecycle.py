"""The end of a memory's life: deleting (one, a person's, a tenant's) and re-keying.

Deletes remove the rows outright (their vectors and text index go with them, by the
schema's cascades and triggers); a re-key walks the memories carrying sealed personal
values in pages and swaps each seal by compare-and-set.
"""

from __future__ import annotations

from sqlalchemy import Engine, and_, delete, func, select, update

from chatkeep.refs import Ref
from chatkeep.store.connections import reading, transaction
from chatkeep.store.memory_rows import tenant_is
from chatkeep.store.schema import memories


class MemoryLifecycle:
    """Deletes and re-keys of memories (thread-safe), each in one transaction."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- erasure -------------------------------------------------------------------------

    def delete_memory(self, tenant: Ref, memory_id: int) -> int:
        """Erase the memory ``memory_id`` of ``tenant`` and the earlier versions it
        superseded, in turn (same tenant and scope; their vectors go with them, as
        ``forget`` erases). Returns the rows deleted (0: no such memory of ``tenant``)."""
        with transaction(self.engine) as conn:
            row = conn.execute(select(memories.c.scope_key).where(
                tenant_is(tenant), memories.c.id == memory_id)).first()
            if row is None:
                return 0
            in_scope = and_(tenant_is(tenant), memories.c.scope_key == row[0])
            erased, frontier = {memory_id}, [memory_id]
            while frontier:  # ids are unique and each step only adds new ones: it ends
                found = conn.execute(select(memories.c.id).where(
                    in_scope, memories.c.superseded_by.in_(frontier))).scalars().all()
                frontier = [int(i) for i in found if int(i) not in erased]
                erased.update(frontier)
            result = conn.execute(delete(memories).where(
                in_scope, memories.c.id.in_(sorted(erased))))
            return int(result.rowcount)

    def delete_personal(self, tenant: Ref, actor: Ref) -> int:
        """Delete every personal memory of ``actor`` in ``tenant`` (superseded ones too)."""
        statement = delete(memories).where(
            tenant_is(tenant), memories.c.actor_type == actor.type,
            memories.c.actor_id == actor.id_text)
        with transaction(self.engine) as conn:
            return int(conn.execute(statement).rowcount)

    def delete_tenant(self, tenant: Ref) -> int:
        """Delete all of ``tenant``'s memories."""
        with transaction(self.engine) as conn:
            return int(conn.execute(delete(memories).where(tenant_is(tenant))).rowcount)

    # -- re-keying the sealed values -----------------------------------------------------

    def sealed_after(self, memory_id: int, limit: int) -> list[tuple[int, str]]:
        """``(id, sealed values)`` of memories carrying personal values, in id order after
        ``memory_id``: what a re-key walks, in pages (every tenant: an operator task)."""
        query = (select(memories.c.id, memories.c.pii)
                 .where(memories.c.id > memory_id, memories.c.pii.is_not(None))
                 .order_by(memories.c.id).limit(limit))
        with reading(self.engine) as conn:
            return [(int(r[0]), r[1]) for r in conn.execute(query)]

    def count_sealed(self) -> int:
        """How many memories carry personal values."""
        query = select(func.count()).where(memories.c.pii.is_not(None))
        with reading(self.engine) as conn:
            return int(conn.execute(query).scalar_one())

    def replace_sealed(self, memory_id: int, old: str, new: str) -> bool:
        """Swap a memory's sealed values for ``new`` if they are still ``old``."""
        with transaction(self.engine) as conn:
            result = conn.execute(update(memories).where(
                memories.c.id == memory_id, memories.c.pii == old).values(pii=new))
            return result.rowcount == 1
