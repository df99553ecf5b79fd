"""Retention's SQL: per-tenant policies (``chat_retention``) and the candidates a sweep
deletes, read in pages by id. The deletes themselves go through
:class:`chatkeep.store.lifecycle.LifecycleStore` (the same path as any delete).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, and_, delete, insert, not_, select, update

from chatkeep.refs import Ref
from chatkeep.store.connections import reading, retrying_reads, transaction
from chatkeep.store.rows import as_utc, utcnow
from chatkeep.store.schema import chat_retention, chat_sessions, ref_filter, ref_values


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """A tenant's policy: sessions idle, memories neither recalled nor updated, this
    many days are deleted (``None``: kept)."""

    tenant: Ref
    session_idle_days: int | None
    memory_idle_days: int | None
    updated_at: datetime | None = None


class RetentionStore:
    """Policies and sweep candidates. Thread-safe; one per keep."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def set_policy(self, tenant: Ref, session_idle_days: int | None,
                   memory_idle_days: int | None) -> RetentionPolicy:
        """Store ``tenant``'s policy (replacing any), in one transaction."""
        now = self.clock()
        values = {"session_idle_days": session_idle_days,
                  "memory_idle_days": memory_idle_days, "updated_at": now}
        with transaction(self.engine) as conn:
            changed = conn.execute(update(chat_retention).where(
                ref_filter(chat_retention, "tenant", tenant)).values(**values)).rowcount
            if not changed:
                conn.execute(insert(chat_retention).values(**ref_values("tenant", tenant),
                                                           **values))
        return RetentionPolicy(tenant, session_idle_days, memory_idle_days, now)

    def clear_policy(self, tenant: Ref) -> bool:
        """Remove ``tenant``'s policy (the config's default applies again)."""
        with transaction(self.engine) as conn:
            return bool(conn.execute(delete(chat_retention).where(
                ref_filter(chat_retention, "tenant", tenant))).rowcount)

    @retrying_reads
    def policies(self, tenant: Ref | None = None) -> list[RetentionPolicy]:
        """Every tenant's stored policy (or ``tenant``'s), in tenant order."""
        r = chat_retention.c
        query = select(chat_retention).order_by(r.tenant_type, r.tenant_id)
        if tenant is not None:
            query = query.where(ref_filter(chat_retention, "tenant", tenant))
        with reading(self.engine) as conn:
            rows = conn.execute(query).all()
        found = []
        for row in rows:
            ref = Ref.from_columns(row.tenant_type, row.tenant_id, row.tenant_id_int)
            assert ref is not None
            found.append(RetentionPolicy(ref, row.session_idle_days, row.memory_idle_days,
                                         as_utc(row.updated_at)))
        return found

    @retrying_reads
    def idle_sessions(self, tenant: Ref | None, idle_before: datetime, after_id: str,
                      limit: int, *, excluding: list[Ref] = ()  # type: ignore[assignment]
                      ) -> list[tuple[str, Ref]]:
        """Up to ``limit`` ``(id, tenant)`` of sessions idle since ``idle_before``, in id
        order after ``after_id``: ``tenant``'s, or (``None``) every tenant's but those
        ``excluding`` names (the tenants with a policy of their own)."""
        s = chat_sessions.c
        query = select(s.id, s.tenant_type, s.tenant_id, s.tenant_id_int).where(
            s.last_message_at < idle_before, s.id > after_id)
        if tenant is not None:
            query = query.where(ref_filter(chat_sessions, "tenant", tenant))
        for other in excluding:
            query = query.where(not_(and_(s.tenant_type == other.type,
                                          s.tenant_id == other.id_text)))
        with reading(self.engine) as conn:
            rows = conn.execute(query.order_by(s.id).limit(limit)).all()
        found = []
        for row in rows:
            ref = Ref.from_columns(row.tenant_type, row.tenant_id, row.tenant_id_int)
            assert ref is not None
            found.append((str(row.id), ref))
        return found

    @retrying_reads
    def tenants_with_memories(self, excluding: list[Ref]) -> list[Ref]:
        """The tenants that have memories, but those ``excluding`` names."""
        from chatkeep.store.schema import memories

        m = memories.c
        with reading(self.engine) as conn:
            rows = conn.execute(select(m.tenant_type, m.tenant_id, m.tenant_id_int)
                                .distinct()).all()
        found = [Ref.from_columns(r.tenant_type, r.tenant_id, r.tenant_id_int) for r in rows]
        return [r for r in found if r is not None and r not in excluding]

    @retrying_reads
    def tenants_with_expired(self, now: datetime) -> list[Ref]:
        """The tenants with memories expired by ``now`` (over the partial index of
        memories that expire), in tenant order."""
        from chatkeep.store.schema import memories

        m = memories.c
        with reading(self.engine) as conn:
            rows = conn.execute(select(m.tenant_type, m.tenant_id, m.tenant_id_int).where(
                m.expires_at.is_not(None), m.expires_at <= now).distinct()
                .order_by(m.tenant_type, m.tenant_id)).all()
        found = [Ref.from_columns(r.tenant_type, r.tenant_id, r.tenant_id_int) for r in rows]
        return [r for r in found if r is not None]

    @retrying_reads
    def memory_expiry(self, tenant: Ref | None, now: datetime) -> list[tuple[Ref, int, int]]:
        """``(tenant, expired, expiring)`` per tenant with memories that expire: how many
        expired by ``now`` (awaiting the sweep) and how many will later. Read over the
        partial index of memories that expire (``ix_memories_expires``)."""
        from sqlalchemy import case, func

        from chatkeep.store.schema import memories

        m = memories.c
        query = (select(m.tenant_type, m.tenant_id, m.tenant_id_int,
                        func.sum(case((m.expires_at <= now, 1), else_=0)).label("expired"),
                        func.count().label("expiring"))
                 .where(m.expires_at.is_not(None))
                 .group_by(m.tenant_type, m.tenant_id, m.tenant_id_int)
                 .order_by(m.tenant_type, m.tenant_id))
        if tenant is not None:
            query = query.where(ref_filter(memories, "tenant", tenant))
        with reading(self.engine) as conn:
            rows = conn.execute(query).all()
        found = []
        for row in rows:
            ref = Ref.from_columns(row.tenant_type, row.tenant_id, row.tenant_id_int)
            assert ref is not None
            expired = int(row.expired or 0)
            found.append((ref, expired, int(row.expiring) - expired))
        return found
