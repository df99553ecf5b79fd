"""Recall: the memories that apply to a session, most relevant first.

Scope first, relevance second: the candidate set is always exactly the session's
readable scopes (tenant, its subject, its actor's personal ones) inside its own
tenant, whatever the retriever does. ``Retriever`` is the seam for ranking:
``TextRetriever`` uses the database's full-text index; ``HybridRetriever`` fuses it
with vectors. A query whose embedding the tenant's quota refuses is ranked by words
only, never raised: the result (a ``Recalled`` list) says so in ``quota_refused``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Protocol, runtime_checkable

from chatkeep.errors import QuotaExceeded, StoreError
from chatkeep.history.plan import previous_texts
from chatkeep.memory.hybrid import HybridRetriever, Payer
from chatkeep.memory.scopes import readable_targets
from chatkeep.memory.text import query_terms
from chatkeep.observability import tracing as telemetry
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store.memories import MemoryStore
from chatkeep.store.memory_rows import MemoryRow

Memory = MemoryRow
"""A stored memory as recall and listing return it."""

log = logging.getLogger(__name__)

RECENT_TURNS_FOR_QUERY = 6
#: Messages read before that window, so the oldest user message in it still has its context.
CONTEXT_LOOKBACK = 4


class Recalled(list[MemoryRow]):
    """The memories recall found (a plain list of them), and ``quota_refused``: why the
    query was ranked by words only because the tenant's quota refused its embedding
    (``None``: it was not refused)."""

    def __init__(self, memories: Sequence[MemoryRow] = (),
                 quota_refused: str | None = None) -> None:
        super().__init__(memories)
        self.quota_refused = quota_refused


@runtime_checkable
class Retriever(Protocol):
    """Ranks a tenant's live memories in ``scope_keys`` against ``query``."""

    def search(self, tenant: Ref, scope_keys: Sequence[str], query: str,
               limit: int) -> list[MemoryRow]:
        """At most ``limit`` matching memories, best first; only from ``scope_keys``."""
        ...


class TextRetriever:
    """Full-text ranking: SQLite FTS5 ``bm25`` / PostgreSQL ``ts_rank``, recency breaks ties."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store

    def search(self, tenant: Ref, scope_keys: Sequence[str], query: str,
               limit: int) -> list[MemoryRow]:
        """Memories sharing any meaningful word with ``query`` (stopwords dropped)."""
        return self.store.recall.search(tenant, scope_keys, query_terms(query), limit)


class Recaller:
    """Answers ``keep.memory.recall`` and feeds ``build_history`` (``provider``), and
    records when it served each memory (:meth:`stamp`)."""

    def __init__(self, store: MemoryStore, retriever: Retriever, default_limit: int,
                 stamp_every: timedelta = timedelta(hours=1)) -> None:
        self.store = store
        self.retriever = retriever
        self.default_limit = default_limit
        self.stamp_every = stamp_every

    def stamp(self, tenant: Ref, served: Recalled) -> Recalled:
        """Record that ``served`` (``tenant``'s) was recalled now (what retention's "not recalled or
        updated" reads): one statement for those whose stored recall time is older than
        ``stamp_every``, after the read, in its own transaction; none, and no round trip,
        while all are fresh. A failed stamp is logged, not raised (the next recall stamps
        again). Returns ``served``, its memories as they are now (``last_recalled_at``)."""
        now = self.store.now()
        older = now - self.stamp_every
        stale = {m.id for m in served
                 if m.last_recalled_at is None or m.last_recalled_at < older}
        if not stale:
            return served
        try:
            self.store.writes.stamp_recalled(tenant, sorted(stale), older, now)
        except StoreError as exc:
            log.warning("recall time of %d memories not recorded: %s", len(stale), exc)
            return served
        served[:] = [replace(m, last_recalled_at=now) if m.id in stale else m for m in served]
        return served

    def recall(self, tenant: Ref, actor: Ref | None, subject: Ref | None,
               query: str | None = None, limit: int | None = None, *,
               session: ChatSession | None = None) -> Recalled:
        """With a query: the matching memories by relevance. Without: the most recent.
        ``session``: the conversation asking, whose vault masks the query for the embedder
        (the query's embedding reserves on ``tenant``'s quota, for ``actor``)."""
        def run() -> Recalled:
            return self._recall(tenant, actor, subject, query, limit, session)

        if telemetry.ON:
            return telemetry.search_memory(tenant, session.id if session else None, run)
        return run()

    def _recall(self, tenant: Ref, actor: Ref | None, subject: Ref | None,
                query: str | None, limit: int | None,
                session: ChatSession | None) -> Recalled:
        limit = self.default_limit if limit is None else limit
        keys = [t.key for t in readable_targets(tenant, actor, subject)]
        if query is not None and query_terms(query):
            payer = Payer(tenant, actor, session.id if session is not None else None)
            return self.stamp(tenant, self._search(tenant, keys, query, limit, session,
                                                   payer=payer))
        return self.stamp(tenant, Recalled(self.store.recall.recent(tenant, keys, limit)))

    def provider(self, session: ChatSession) -> Recalled:
        """Memories for the system message: those matching the latest user turn, topped
        up with the most recent applicable ones (subject context matters even when the
        words do not match)."""
        if telemetry.ON:
            return telemetry.search_memory(session.tenant, session.id,
                                           lambda: self._provide(session))
        return self._provide(session)

    def _provide(self, session: ChatSession) -> Recalled:
        keys = [t.key for t in readable_targets(session.tenant, session.actor, session.subject)]
        query, context = latest_user_turn(session)
        found = self._search(session.tenant, keys, query, self.default_limit, session, context,
                             payer=Payer.of(session))
        if len(found) < self.default_limit:
            found += self.store.recall.recent(session.tenant, keys, self.default_limit - len(found),
                                       exclude=[m.id for m in found])
        return self.stamp(session.tenant, found)

    def _search(self, tenant: Ref, keys: Sequence[str], query: str, limit: int,
                session: ChatSession | None, context: str | None = None, *,
                payer: Payer) -> Recalled:
        """The retriever's ranking; a hybrid one also gets the session and the question the
        query answers, so the query is embedded masked like the session's own text, and
        reserved on ``payer``'s quota (refused: by words only, and the result says so)."""
        retriever = self.retriever
        if not isinstance(retriever, HybridRetriever):
            return Recalled(retriever.search(tenant, keys, query, limit))
        text_hits = self.store.recall.search(tenant, keys, query_terms(query),
                                             max(limit, retriever.fusion.pool))
        try:
            vector = retriever.query_vector(query, session=session, context=context,
                                            payer=payer)
        except QuotaExceeded as exc:
            return Recalled(text_hits[:limit], f"refused for quota: {exc}")
        if vector is None:
            return Recalled(text_hits[:limit])
        return Recalled(retriever.rank(tenant, keys, text_hits, vector, limit))


def latest_user_turn(session: ChatSession) -> tuple[str, str | None]:
    """The recall query: the newest live user message among the last few (a retracted one
    was taken back and is never sent anywhere), and the conversation message before it,
    its context ("536221234" answering "What's your SSN?" is an SSN)."""
    newest = session.message_count
    read = session.messages_after(max(0, newest - RECENT_TURNS_FOR_QUERY - CONTEXT_LOOKBACK))
    live = [m for m in read if m.retracted_at is None]
    previous = previous_texts(live)
    for message in reversed(live):
        if message.seq <= newest - RECENT_TURNS_FOR_QUERY:
            break
        if message.role.value == "user" and message.content:
            return message.content, previous.get(message.seq)
    return "", None
