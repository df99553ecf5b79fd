"""Which sessions need distilling, and the lease a worker holds while it distils one.

The sweep claims idle sessions with undistilled messages; each claim is a compare-and-set
on the session's ``distil_lease_until``, so concurrent sweeps never claim one twice, and a
killed worker's lease simply runs out.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from sqlalchemy import Engine, or_, select, update

from chatkeep.store.connections import reading, transaction
from chatkeep.store.repository import as_utc, utcnow
from chatkeep.store.schema import chat_sessions


class DistilLeases:
    """Distil leases over ``chat_sessions`` (thread-safe)."""

    def __init__(self, engine: Engine, clock: Callable[[], datetime] = utcnow) -> None:
        self.engine = engine
        self.clock = clock

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
