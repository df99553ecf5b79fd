"""The inspector's read of the quotas (issue 33): each stored quota with what its window
spent, what calls hold reserved, and the reservations in flight on it (those whose lease
ended wait for the sweep).

Nothing here writes. A tenant given is part of the ``WHERE`` clause.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, ScalarSelect, func, or_, select

from chatkeep.refs import Ref
from chatkeep.store.connections import reading
from chatkeep.store.schema import chat_quotas, chat_reservations, ref_filter

_Q = chat_quotas.c
_R = chat_reservations.c


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """One stored quota as the usage page shows it. ``spent`` is the current window's
    (0 when the stored window ended: the next reservation starts a new one); ``held``:
    reservations in flight on it, ``expired`` of them past their lease (the sweep ends
    them)."""

    tenant: Ref
    actor: Ref | None
    tokens: int
    window_kind: str
    window_seconds: int
    window_end: int
    """When the stored window ends (epoch seconds)."""
    rolled: bool
    """Whether the stored window had ended when read (``spent`` is then 0)."""
    spent: int
    reserved: int
    held: int
    expired: int

    @property
    def remaining(self) -> int:
        """What a reservation may still take."""
        return max(0, self.tokens - self.spent - self.reserved)


def _in_flight(now: int | None = None) -> ScalarSelect[int]:
    """The reservations held on the outer quota row (``now``: only those whose lease
    ended by then)."""
    clauses = [_R.tenant_type == _Q.tenant_type, _R.tenant_id == _Q.tenant_id,
               or_(_R.key_a == _Q.scope_key, _R.key_b == _Q.scope_key)]
    if now is not None:
        clauses.append(_R.lease_until <= now)
    return select(func.count()).where(*clauses).correlate(chat_quotas).scalar_subquery()


def quota_lines(engine: Engine, tenant: Ref | None, now: int, *,
                limit: int = 1000) -> list[QuotaLine]:
    """Every stored quota (or ``tenant``'s: its own and its actors'), tenant-wide first,
    at most ``limit``; ``now`` (epoch seconds) decides which windows ended and which
    leases."""
    query = (select(_Q.tenant_type, _Q.tenant_id, _Q.tenant_id_int, _Q.actor_type,
                    _Q.actor_id, _Q.actor_id_int, _Q.tokens, _Q.window_kind,
                    _Q.window_seconds, _Q.window_end, _Q.spent, _Q.reserved,
                    _in_flight(), _in_flight(now))
             .order_by(_Q.tenant_type, _Q.tenant_id, _Q.scope_key).limit(limit))
    if tenant is not None:
        query = query.where(ref_filter(chat_quotas, "tenant", tenant))
    with reading(engine) as conn:
        rows = conn.execute(query).all()
    lines = []
    for (tenant_type, tenant_id, tenant_int, actor_type, actor_id, actor_int, tokens, kind,
         seconds, end, spent, reserved, held, expired) in rows:
        owner = Ref.from_columns(tenant_type, tenant_id, tenant_int)
        assert owner is not None
        ended = now >= int(end)
        lines.append(QuotaLine(owner, Ref.from_columns(actor_type, actor_id, actor_int),
                               int(tokens), str(kind), int(seconds), int(end), ended,
                               0 if ended else int(spent),
                               int(reserved), int(held), int(expired)))
    return lines
