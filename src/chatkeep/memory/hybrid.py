"""Hybrid recall: full-text and vector ranks fused into one ranking.

``HybridRetriever`` asks the store twice for the same candidate scope (the session's
readable scopes inside its tenant, filtered before anything is ranked): the full-text
index for memories sharing the query's words, and the vector index for those nearest
in meaning. ``fuse`` merges the two rankings by weighted reciprocal rank (RRF): a
memory's score is ``text_weight / (k + text_rank) + vector_weight / (k + vector_rank)``
(a list it is absent from adds nothing). Rank fusion needs no calibration between
bm25 / ``ts_rank`` and cosine scales, which differ per backend and per model; a memory
found by both lists beats one found by either alone, which is what keeps exact-word
matches (names, ids, amounts) on top while paraphrases still surface through the
vector list. The constants were chosen on the development set in
``bench/data/recall/dev.json`` (``bench/recall_eval.py --tune``); the held-out set
was not looked at while choosing.

Without an embedder, or when the embedding call fails, recall is full-text only
(logged), exactly as ``TextRetriever``.

Quotas (issue 33): a call made for a tenant (a ``Payer``) reserves its input tokens on
the tenant's quota before it is sent (embeddings have no output ceiling), is settled at
the tokens the endpoint reports (``CountingEmbedder``; its estimate otherwise) and
released when it fails. A refused call sends nothing and raises ``QuotaExceeded`` to
the caller, who decides what a refusal means: a memory written without its vector
(``embed_missing`` retries it), a recall by words only. Offline embedders reserve
nothing (:func:`~chatkeep.memory.embedders.base.is_offline`); a cached query vector
costs no call and reserves nothing.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from chatkeep.errors import ModelError, QuotaExceeded, StoreError
from chatkeep.memory.embedders.base import CountingEmbedder, Embedder, is_offline
from chatkeep.memory.embedders.mask import EmbedMask
from chatkeep.memory.text import query_terms
from chatkeep.observability import metrics
from chatkeep.observability import tracing as telemetry
from chatkeep.observability.attributes import tenant_label
from chatkeep.quotas import QuotaService, Reservation
from chatkeep.refs import Ref
from chatkeep.sessions import ChatSession
from chatkeep.store.memories import MemoryStore
from chatkeep.store.memory_rows import MemoryRow
from chatkeep.tokens import HeuristicCounter, TokenCounter

log = logging.getLogger("chatkeep.memory")


@dataclass(frozen=True, slots=True)
class Fusion:
    """Weighted reciprocal-rank fusion settings (defaults tuned on the development set)."""

    k: float = 5.0
    """Rank damping: small values reward the top of each list more."""
    # Chosen on the development set: text_weight 0.25 keeps recall@5 at its best (0.96)
    # with MRR@10 0.90; text_weight 1.0 put every word question first but cost paraphrases
    # their first place (MRR 0.79). So words lift a memory by a rank or two among those
    # near in meaning, rather than outvote meaning.
    text_weight: float = 0.25
    """Weight of the full-text ranking."""
    vector_weight: float = 1.0
    """Weight of the vector ranking."""
    pool: int = 20
    """Candidates taken from each list before fusing (at least the limit asked for)."""


DEFAULT_FUSION = Fusion()


@dataclass(frozen=True, slots=True)
class Payer:
    """Whose quota an embedding call reserves on: the ``tenant`` (and its ``actor``'s
    quota when it has one), for ``session_id`` when the text belongs to a session."""

    tenant: Ref
    actor: Ref | None = None
    session_id: str | None = None

    @classmethod
    def of(cls, session: ChatSession) -> Payer:
        """The payer of a call made for ``session``."""
        return cls(session.tenant, session.actor, session.id)


def fuse(text_hits: Sequence[MemoryRow], vector_hits: Sequence[MemoryRow], limit: int,
         fusion: Fusion = DEFAULT_FUSION) -> list[MemoryRow]:
    """The ``limit`` best memories of both rankings by weighted RRF (``score`` = the fused
    score); ties go to the better vector rank, then the better full-text rank, then the
    newer memory."""
    scores: dict[int, float] = {}
    rows: dict[int, MemoryRow] = {}
    ranks: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for weight, hits, seen in ((fusion.vector_weight, vector_hits, ranks[0]),
                               (fusion.text_weight, text_hits, ranks[1])):
        for rank, row in enumerate(hits, start=1):
            scores[row.id] = scores.get(row.id, 0.0) + weight / (fusion.k + rank)
            rows.setdefault(row.id, row)
            seen[row.id] = rank
    order = sorted(scores, key=lambda i: (-round(scores[i], 12),
                                          ranks[0].get(i, len(vector_hits) + 1),
                                          ranks[1].get(i, len(text_hits) + 1), -i))
    return [replace(rows[i], score=scores[i]) for i in order[:limit]]


class HybridRetriever:
    """A ``Retriever`` ranking by words and meaning (see the module docstring).

    ``mask`` rewrites everything sent to the embedding model (the privacy guard's typed
    masking, ``pii_mask``, when ``privacy.anonymize_pii`` is on): memories with the values
    they carry, queries with their session's vault and the question they answer. Query
    vectors are cached (LRU) by the masked text, the only form that ever left.
    """

    def __init__(self, store: MemoryStore, embedder: Embedder, *,
                 fusion: Fusion = DEFAULT_FUSION, mask: EmbedMask | None = None,
                 cache_size: int = 1024,
                 quotas: QuotaService | Callable[[], QuotaService | None] | None = None,
                 counter: TokenCounter | None = None) -> None:
        self.store = store
        self.embedder = embedder
        self.fusion = fusion
        self.mask = mask
        self.cache_size = cache_size
        self._quotas = quotas
        self.counter: TokenCounter = counter or HeuristicCounter()
        """Estimates what a call's reservation holds (its input tokens)."""
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model(self) -> str:
        """The embedding model whose vectors this retriever reads."""
        return self.embedder.model

    @property
    def quotas(self) -> QuotaService | None:
        """Reserves each call made for a ``Payer`` (given, or read from the callable
        given: the memory service's, which the keep sets)."""
        quotas = self._quotas
        return quotas() if callable(quotas) else quotas

    @quotas.setter
    def quotas(self, quotas: QuotaService | Callable[[], QuotaService | None] | None) -> None:
        self._quotas = quotas

    def embed(self, texts: Sequence[str], sealed: Sequence[str | None] | None = None, *,
              payer: Payer | None = None) -> list[list[float] | None]:
        """Vectors for memory ``texts`` in one batched call, each masked with the values its
        memory carries (``sealed``, its ``sealed_pii``: the same on the first attempt and on
        every retry or backfill); all ``None`` when the call fails (logged): the caller then
        stores its memories unembedded, marked for ``embed``. ``payer``: the tenant the
        call reserves on first; ``QuotaExceeded`` (nothing sent) when its quota cannot
        hold the texts' tokens."""
        if not texts:
            return []
        return self._send([self._masked(t, sealed[n] if sealed else None)
                           for n, t in enumerate(texts)], payer)

    def search(self, tenant: Ref, scope_keys: Sequence[str], query: str, limit: int, *,
               vector: Sequence[float] | None = None, sealed: str | None = None,
               session: ChatSession | None = None,
               context: str | None = None, payer: Payer | None = None) -> list[MemoryRow]:
        """The fused ranking of the memories in ``scope_keys`` for ``query`` (``vector``:
        its embedding when the caller has it already; otherwise it is embedded masked with
        ``sealed``, ``session`` and ``context``, see ``query_vector``, reserved on
        ``payer``'s quota: refused, the ranking is by words only)."""
        pool = max(limit, self.fusion.pool)
        text_hits = self.store.recall.search(tenant, scope_keys, query_terms(query), pool)
        if vector is None:
            try:
                vector = self.query_vector(query, sealed=sealed, session=session,
                                           context=context, payer=payer)
            except QuotaExceeded:
                return text_hits[:limit]  # logged where it was refused
        if vector is None:
            return text_hits[:limit]
        return self.rank(tenant, scope_keys, text_hits, vector, limit)

    def rank(self, tenant: Ref, scope_keys: Sequence[str], text_hits: Sequence[MemoryRow],
             vector: Sequence[float], limit: int) -> list[MemoryRow]:
        """``text_hits`` (the full-text ranking, its pool) fused with the memories nearest
        ``vector``; by words only when the vector search fails (logged)."""
        try:
            vector_hits = self.store.recall.vector_search(tenant, scope_keys, vector,
                                                          self.model,
                                                          max(limit, self.fusion.pool))
        except StoreError as exc:
            log.warning("vector search failed, recall is full-text only: %s", exc)
            return list(text_hits[:limit])
        return fuse(text_hits, vector_hits, limit, self.fusion)

    def query_vector(self, query: str, *, sealed: str | None = None,
                     session: ChatSession | None = None,
                     context: str | None = None,
                     payer: Payer | None = None) -> list[float] | None:
        """The vector of ``query`` (``None``: blank, or the call failed). Masked like any
        text of ``session`` would be: its vault's values, the values ``sealed`` carries, and
        what the recognizers detect with ``context``, the message the query answers. A
        call (not a cached vector) reserves on ``payer``'s quota first:
        ``QuotaExceeded`` when refused (nothing sent)."""
        if not query.strip():
            return None
        sent = self._masked(query, sealed, session, context)
        with self._lock:
            cached = self._cache.get(sent)
            if cached is not None:
                self._cache.move_to_end(sent)
                return cached
        vector = self._send([sent], payer)[0]
        if vector is not None and self.cache_size > 0:
            with self._lock:
                self._cache[sent] = vector
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return vector

    def _send(self, sent: list[str], payer: Payer | None = None) -> list[list[float] | None]:
        """One embeddings request for texts already masked, reserved on ``payer``'s quota
        (``QuotaExceeded``: refused, nothing sent), settled at what the endpoint counted,
        released when it fails."""
        held = self._reserve(sent, payer)
        counted: list[int | None] = [None]

        def call() -> list[list[float]]:
            if isinstance(self.embedder, CountingEmbedder):
                vectors, counted[0] = self.embedder.embed_counted(sent)
                return vectors
            return self.embedder.embed(sent)

        try:
            vectors = telemetry.embed(self.embedder, call) if telemetry.ON else call()
        except ModelError as exc:
            if held is not None:
                held.release()  # failed before its answer: nothing billed
            log.warning("embedding %d texts failed (they stay marked for embedding): %s",
                        len(sent), exc)
            return [None] * len(sent)
        except BaseException:
            if held is not None:
                held.release()
            raise
        if held is not None:
            held.settle(counted[0])  # None: the estimate it reserved
        if len(vectors) != len(sent):
            log.warning("embedding %d texts failed (they stay marked for embedding): %s: "
                        "%d vectors for %d texts", len(sent), self.model, len(vectors),
                        len(sent))
            return [None] * len(sent)
        return [list(v) for v in vectors]

    def _reserve(self, sent: Sequence[str], payer: Payer | None) -> Reservation | None:
        """The reservation of one call for ``payer`` (its input tokens; an embedding has
        no output), or ``None`` when no quota is wired, none applies, or the embedder runs
        here. ``QuotaExceeded`` when refused (counted, logged)."""
        if payer is None or self.quotas is None or is_offline(self.embedder):
            return None
        tokens = sum(self.counter.count(text) for text in sent)
        try:
            held = self.quotas.reserve(payer.tenant, tokens, actor=payer.actor,
                                       session_id=payer.session_id, purpose="embedding")
        except QuotaExceeded as exc:
            metrics.record_quota_refusal(tenant_label(payer.tenant), "embedding")
            log.info("embedding %d texts for %s refused for quota: %s", len(sent),
                     payer.tenant, exc)
            raise
        return held if held.id is not None else None

    def _masked(self, text: str, sealed: str | None, session: ChatSession | None = None,
                context: str | None = None) -> str:
        if self.mask is None:
            return text
        return self.mask(text, sealed, session=session, context=context)
