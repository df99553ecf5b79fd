"""Recall: the memories that apply to a session, most relevant first.

Scope first, relevance second: the candidate set is always exactly the session's
readable scopes (tenant, its subject, its actor's personal ones) inside its own
tenant, whatever the retriever does. ``Retriever`` is the seam for ranking:
``TextRetriever`` uses the database's full-text index; ``HybridRetriever`` fuses it
with vectors. A query whose embedding the tenant's quota refuses is ranked by words
only, never raised: the result (a ``Recalled`` list) says so in ``quota_refused``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from chatkeep.errors import QuotaExceeded
from chatkeep.history.plan import previous_texts
from chatkeep.memory.hybrid import HybridRetriever, Payer
from chatkeep.memory.scopes import readable_targets
from chatkeep.memory.text import query_terms
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store.memories import MemoryStore
from chatkeep.store.memory_rows import MemoryRow

Memory = MemoryRow
"""A stored memory as recall and listing return it."""

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
    """Answers ``keep.memory.recall`` and feeds ``build_history`` (``provider``)."""

    def __init__(self, store: MemoryStore, retriever: Retriever, default_limit: int) -> None:
        self.store = store
        self.retriever = retriever
        self.default_limit = default_limit

    def recall(self, tenant: Ref, actor: Ref | None, subject: Ref | None,
               query: str | None = None, limit: int | None = None, *,
               session: ChatSession | None = None) -> Recalled:
        """With a query: the matching memories by relevance. Without: the most recent.
        ``session``: the conversation asking, whose vault masks the query for the embedder
        (the query's embedding reserves on ``tenant``'s quota, for ``actor``)."""
        limit = self.default_limit if limit is None else limit
        keys = [t.key for t in readable_targets(tenant, actor, subject)]
        if query is not None and query_terms(query):
            payer = Payer(tenant, actor, session.id if session is not None else None)
            return self._search(tenant, keys, query, limit, session, payer=payer)
        return Recalled(self.store.recall.recent(tenant, keys, limit))

    def provider(self, session: ChatSession) -> Recalled:
        """Memories for the system message: those matching the latest user turn, topped
        up with the most recent applicable ones (subject context matters even when the
        words do not match)."""
        keys = [t.key for t in readable_targets(session.tenant, session.actor, session.subject)]
        query, context = latest_user_turn(session)
        found = self._search(session.tenant, keys, query, self.default_limit, session, context,
                             payer=Payer.of(session))
        if len(found) < self.default_limit:
            found += self.store.recall.recent(session.tenant, keys, self.default_limit - len(found),
                                       exclude=[m.id for m in found])
        return found

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
