"""The tenants a database holds, with their counts: what ``chatkeep tenants`` lists.

One grouped read of ``chat_sessions`` (its tenant index serves it); nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, func, select

from chatkeep.refs import Ref
from chatkeep.store.connections import reading, retrying_reads
from chatkeep.store.schema import chat_sessions


@dataclass(frozen=True, slots=True)
class TenantCount:
    """One tenant and what it holds: sessions, messages appended, tokens billed, and when
    its latest message was stored."""

    tenant: Ref
    sessions: int
    messages: int
    tokens: int
    last_message_at: datetime


@retrying_reads
def tenant_counts(engine: Engine, *, limit: int | None = None) -> list[TenantCount]:
    """Every tenant with at least one session, most recently active first."""
    s = chat_sessions.c
    last = func.max(s.last_message_at)
    query = (select(s.tenant_type, s.tenant_id, s.tenant_id_int, func.count(),
                    func.coalesce(func.sum(s.last_seq), 0),
                    func.coalesce(func.sum(s.total_tokens), 0), last)
             .group_by(s.tenant_type, s.tenant_id, s.tenant_id_int)
             .order_by(last.desc(), s.tenant_type, s.tenant_id))
    if limit is not None:
        query = query.limit(limit)
    with reading(engine) as conn:
        rows = conn.execute(query).all()
    counts = []
    for t_type, t_id, t_int, sessions, messages, tokens, latest in rows:
        ref = Ref.from_columns(t_type, t_id, t_int)
        if ref is None:  # pragma: no cover - every session has a tenant (NOT NULL)
            continue
        counts.append(TenantCount(ref, int(sessions), int(messages), int(tokens), latest))
    return counts
