"""``MemoryService`` (``keep.memory``): distil, sweep, recall, forget, list, and memories
written one at a time (add, get, update, delete).

The one entry point the facade, the job handler, the CLI and the framework integrations
use; the work is done by ``Distiller``, ``Sweeper`` and ``Recaller``, and the SQL by
``MemoryStore``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from chatkeep.config import MAX_IDLE_AFTER, MemoryConfig
from chatkeep.errors import DistillationError, InvalidArgument, MemoryNotFound, QuotaExceeded
from chatkeep.jobs import Dispatcher, InlineDispatcher
from chatkeep.llm.base import ChatModel
from chatkeep.memory.carried import sealed_direct
from chatkeep.memory.distiller import Distiller, DistillerFilter, DistilResult
from chatkeep.memory.embedders.base import Embedder
from chatkeep.memory.embedders.mask import EmbedMask
from chatkeep.memory.hybrid import HybridRetriever, Payer
from chatkeep.memory.recall import Memory, Recalled, Recaller, Retriever, TextRetriever
from chatkeep.memory.scopes import Scope, ScopeTarget
from chatkeep.memory.sweep import DEFAULT_LEASE, Sweeper
from chatkeep.memory.text import content_key, normalise
from chatkeep.quotas import QuotaService
from chatkeep.refs import Ref, require_ref
from chatkeep.sessions import ChatSession, SessionService
from chatkeep.store.memories import MemoryStore
from chatkeep.store.memory_rows import MemoryWrite, VectorStatus
from chatkeep.store.repository import Repository
from chatkeep.tokens import TokenCounter
from chatkeep.validation import (
    INT32_MAX,
    INT64_MAX,
    check_bool,
    check_int,
    check_optional_text,
    check_text,
)

log = logging.getLogger("chatkeep.memory")

DISTIL_JOB = "distil"
MEMORY_CONTENT_MAX = 10_000
"""The longest text ``add`` / ``update`` take (characters): a memory is one fact, recalled
into system messages."""


@dataclass
class EmbedResult:
    """What one ``embed_missing`` run did."""

    model: str
    embedded: int = 0
    """Vectors written."""
    failed: int = 0
    """Memories whose batch failed (still marked; the next run retries them)."""
    batches: int = 0
    """Embedding calls made."""
    refused: int = 0
    """Memories whose tenant's quota refused their call (nothing sent; still marked, so
    a later run embeds them once the quota has room)."""


class MemoryService:
    """Durable memories distilled from conversations, and recall for sessions.

    ``model`` is the ``ChatModel`` that extracts facts (``None``: ``distil`` refuses
    with ``DistillationError``). ``outbound_filter`` redacts what the distiller sends;
    ``retriever`` ranks recall (default: the database's full-text index, fused with
    vector search when an ``embedder`` is given; ``embed_mask``, ``pii_mask`` when privacy
    is on, rewrites every text sent to the embedding model).
    """

    def __init__(self, repository: Repository, model: ChatModel | None, *,
                 sessions: SessionService | None = None,
                 dispatcher: Dispatcher | None = None,
                 config: MemoryConfig | None = None, language: str = "English",
                 outbound_filter: DistillerFilter | None = None,
                 retriever: Retriever | None = None, counter: TokenCounter | None = None,
                 lease: timedelta = DEFAULT_LEASE, embedder: Embedder | None = None,
                 embed_mask: EmbedMask | None = None) -> None:
        self.config = config or MemoryConfig()
        self.config.validate()
        self.model = model
        self.sessions = sessions or SessionService(repository, counter)
        self.dispatcher = dispatcher or InlineDispatcher()
        self.store = MemoryStore(repository.engine, repository.clock)
        self.embedder = embedder
        self.retriever = retriever or (
            HybridRetriever(self.store, embedder, mask=embed_mask, counter=counter,
                            quotas=lambda: self.quotas) if embedder is not None
            else TextRetriever(self.store))
        self.language = language
        self.outbound_filter = outbound_filter
        self.counter = counter
        self.sweeper = Sweeper(self.store, self.config, lease)
        #: Reserves each distiller and embedding call on the tenant's quota (the keep sets
        #: it): a refused distillation leaves the watermark, and the sweep retries it
        #: later; a refused embedding leaves its memory without a vector (``embed_missing``
        #: retries it) or its recall query ranked by words only.
        self.quotas: QuotaService | None = None
        self.recaller = Recaller(self.store, self.retriever, self.config.recall_limit,
                                 self.config.recall_stamp_every)

    def start(self) -> None:
        """Check what recall by meaning needs in the database (pgvector on PostgreSQL), so
        a missing extension is a clear error at start-up, not at the first write.
        ``Chatkeep`` runs it when it opens the database."""
        if self.embedder is not None:
            self.store.vectors.ensure_vectors()

    # -- distilling ----------------------------------------------------------------------

    def distil(self, session: str | ChatSession) -> DistilResult:
        """Turn the session's messages after ``distilled_through`` into memories.

        Idempotent: a second run over the same range writes nothing. Raises
        ``DistillationError`` (watermark untouched) when there is no model or its reply
        is unusable.
        """
        if self.model is None:
            raise DistillationError("no model configured: cannot distil memories offline "
                                    "(configure llm or pass model=)")
        if isinstance(session, str):
            session = self.sessions.get_unscoped(session)
        elif not isinstance(session, ChatSession):
            raise InvalidArgument(f"session must be a ChatSession or a session id, "
                                  f"got {type(session).__name__}")
        distiller = Distiller(self.store, self.model, self.retriever,
                              model_name=self.config.distil_model, language=self.language,
                              outbound_filter=self.outbound_filter, counter=self.counter,
                              quotas=self.quotas)
        self.sweeper.hold(session.id)
        result = distiller.run(session)  # on failure the lease stays: a back-off
        self.sweeper.release(session.id)
        return result

    def run_job(self, session_id: str) -> None:
        """The ``"distil"`` job: ``distil`` with a distillation failure logged, not raised
        (the watermark stayed and the lease backs off, so the sweep retries the range).
        Returns nothing, so a queue's result backend never has to serialise a result."""
        try:
            self.distil(session_id)
        except DistillationError as exc:
            log.warning("session %s: distillation failed, will retry later: %s",
                        session_id, exc)

    def dispatch_distil(self, session: ChatSession) -> None:
        """Queue the ``"distil"`` job for ``session`` (the ``on_compress`` hook)."""
        self.dispatcher.dispatch(DISTIL_JOB, session.id)

    def rewind(self, session_id: str, through_seq: int = 0) -> bool:
        """Make the next ``distil`` re-read messages after ``through_seq`` (after a prompt
        or model change); facts already stored are not stored again."""
        check_text(session_id, "session id")
        check_int(through_seq, "through_seq", maximum=INT32_MAX)
        return self.store.writes.rewind(session_id, through_seq)

    # -- sweeping ------------------------------------------------------------------------

    def claim_idle(self, idle_after: timedelta | None = None,
                   batch_size: int | None = None) -> list[str]:
        """Claim idle sessions with undistilled messages (``sweep`` without dispatching)."""
        _check_sweep(idle_after, batch_size)
        return self.sweeper.claim(idle_after, batch_size)

    def sweep(self, idle_after: timedelta | None = None,
              batch_size: int | None = None) -> list[str]:
        """Dispatch ``"distil"`` for sessions idle longer than ``idle_after`` (default
        ``memory.sweep_idle_after``) that have undistilled messages; at most
        ``batch_size`` per run. Returns the session ids dispatched."""
        _check_sweep(idle_after, batch_size)
        claimed = self.sweeper.claim(idle_after, batch_size)
        for session_id in claimed:
            self.dispatcher.dispatch(DISTIL_JOB, session_id)
        log.info("sweep dispatched %d sessions", len(claimed))
        return claimed

    # -- reading -------------------------------------------------------------------------

    def recall(self, session: ChatSession, query: str | None = None,
               limit: int | None = None) -> Recalled:
        """Live memories that apply to ``session``: its tenant's, its subject's and (when it
        has an actor) the actor's personal ones. Ranked by relevance to ``query`` with
        recency breaking ties; without a query, the most recent. The query is embedded
        masked like the session's own text (its vault's values too), reserved on the
        session tenant's quota: refused, the ranking is by words only and the result's
        ``quota_refused`` says why (never an error)."""
        if not isinstance(session, ChatSession):
            raise InvalidArgument(f"session must be a ChatSession, got {type(session).__name__}")
        check_optional_text(query, "query")
        if limit is not None:
            check_int(limit, "limit", minimum=1, maximum=INT32_MAX)
        return self.recaller.recall(session.tenant, session.actor, session.subject,
                                    query, limit, session=session)

    def provider(self, session: ChatSession) -> Recalled:
        """Memories for ``build_history`` (``HistoryCompressor.memory_provider``): their
        texts, and the personal values they hold, which the session redacts literally."""
        return self.recaller.provider(session)

    def list(self, tenant: Ref, *, scope: Scope | str | None = None,
             actor: Ref | None = None, subject: Ref | None = None,
             include_superseded: bool = False, include_expired: bool = True,
             limit: int = 100) -> list[Memory]:
        """A tenant's memories for review, newest first; those past their expiry and
        awaiting the sweep too (``expires_at`` says so), unless ``include_expired`` is
        off."""
        require_ref(tenant, "tenant")
        if actor is not None:
            require_ref(actor, "actor")
        if subject is not None:
            require_ref(subject, "subject")
        if scope is not None and scope not in tuple(Scope):
            raise InvalidArgument(f"unknown scope {scope!r} "
                                  f"(expected one of {', '.join(Scope)})"[:300])
        check_bool(include_superseded, "include_superseded")
        check_bool(include_expired, "include_expired")
        check_int(limit, "limit", minimum=1, maximum=INT32_MAX)
        return self.store.recall.list_memories(
            tenant, scope=None if scope is None else Scope(scope).value, actor=actor,
            subject=subject, include_superseded=include_superseded,
            include_expired=include_expired, limit=limit)

    # -- writing memories yourself -------------------------------------------------------

    def add(self, tenant: Ref, content: str, *, scope: Scope | str = Scope.TENANT,
            subject: Ref | None = None, actor: Ref | None = None) -> Memory:
        """Store ``content`` as a live memory of ``tenant``, as if distilled, and return it.

        ``scope``: ``"tenant"`` (the default: every session of the tenant recalls it),
        ``"subject"`` (with ``subject=``: sessions about that subject) or ``"personal"``
        (with ``actor=``: that actor's sessions only). A personal memory without an actor
        or a subject memory without a subject is refused (``InvalidArgument``), never
        widened, and so is an ``actor=`` / ``subject=`` the scope does not take.

        Written as the distiller writes a fact: when the scope has a live memory of the
        same normalised text, that memory is returned and nothing is written (the unique
        index); the text is stored as given, real values and all, carrying the personal
        values chatkeep's recognizers find in it (sealed, ``sealed_pii``), so a session
        that redacts gets them under its own placeholders when it recalls the memory; and
        with an embedding model it is embedded before the write, masked (``pii_mask``),
        its vector stored in the same transaction (a failed call leaves it to
        ``embed_missing``; recall by words finds it meanwhile). It comes from no
        conversation: ``source_session_id`` is ``None``.
        """
        target = _target(tenant, scope, subject, actor)
        text = _content(content)
        existing = self.store.recall.find_live(target.tenant, target.key, content_key(text))
        if existing is not None:
            return existing
        memory, inserted = self.store.writes.add_memory(self._write(target, text))
        if inserted:
            log.info("memory %d added to %s (%s)", memory.id, target.tenant,
                     target.scope.value)
        return memory

    def get(self, tenant: Ref, memory_id: int) -> Memory:
        """The memory ``memory_id`` of ``tenant``, live or superseded (``superseded_by``
        names the version that replaced it). ``MemoryNotFound`` when there is none: deleted,
        never written, or another tenant's (which looks the same)."""
        require_ref(tenant, "tenant")
        check_int(memory_id, "memory id", minimum=1, maximum=INT64_MAX)
        memory = self.store.recall.get_memory(tenant, memory_id)
        if memory is None:
            raise MemoryNotFound(f"no memory {memory_id} for tenant {tenant}")
        return memory

    def update(self, tenant: Ref, memory_id: int, content: str) -> Memory:
        """Replace the text of the live memory ``memory_id`` of ``tenant``: the distiller's
        UPDATE. A new memory of the same scope holds ``content`` and the old one is
        superseded by it (kept for the record, out of recall; ``get`` of the old id names
        the new one in ``superseded_by``). Returns the new version; the old one itself when
        the text is the same once normalised, or the scope's live memory that already says
        ``content`` (which then supersedes the old one). The new text carries the values
        chatkeep's recognizers find in it and those of the old version it still holds, and
        is embedded like ``add``'s. ``MemoryNotFound`` when the memory is not ``tenant``'s;
        ``InvalidArgument`` when it was superseded already (update the live version)."""
        memory = self._live(tenant, memory_id)
        text = _content(content)
        key = content_key(text)
        if key == content_key(memory.content):
            return memory
        target = _target_of(memory)
        known = self.store.recall.find_live(target.tenant, target.key, key) is not None
        write = self._write(target, text, merged=[memory.sealed_pii], supersedes=memory.id,
                            embed=not known)
        updated = self.store.writes.supersede_memory(write)
        if updated is None:  # superseded or deleted since it was read
            self._live(tenant, memory_id)  # raises the error that says which
            raise InvalidArgument(f"memory {memory_id} changed meanwhile: read it "
                                  "again")  # pragma: no cover - _live raised

        log.info("memory %d of %s superseded by %d", memory.id, target.tenant, updated.id)
        return updated

    def delete(self, tenant: Ref, memory_id: int) -> bool:
        """Erase the memory ``memory_id`` of ``tenant``: its row, its vector and the earlier
        versions it superseded (an update keeps those for the record; a delete is asked to
        make the fact go, so its old wording goes too). A hard delete, as ``forget`` erases:
        nothing is kept. (The distiller's DELETE is different: a conversation contradicted
        the memory, so the fact that replaces it supersedes it; that is ``update``.)
        ``False`` when there is no such memory of ``tenant`` (another tenant's is never
        touched). A memory learnt from a conversation may be learnt again if that
        conversation is ``rewind``-ed and distilled anew."""
        require_ref(tenant, "tenant")
        check_int(memory_id, "memory id", minimum=1, maximum=INT64_MAX)
        deleted = self.store.lifecycle.delete_memory(tenant, memory_id)
        if deleted:
            log.info("deleted memory %d of %s (%d rows with its earlier versions)", memory_id,
                     tenant, deleted)
        return deleted > 0

    def set_expiry(self, tenant: Ref, memory_id: int, ttl: timedelta | None) -> Memory:
        """Make the memory ``memory_id`` of ``tenant`` expire ``ttl`` from now (``None``:
        never), and return it. Past its expiry a memory is not served (recall, listings
        that leave expired ones out) and the retention sweep deletes it, whatever the
        tenant's policy; its time to live is kept, so a LangGraph store's refreshing reads
        push the expiry on by it. ``MemoryNotFound`` when there is no such memory of
        ``tenant``."""
        require_ref(tenant, "tenant")
        check_int(memory_id, "memory id", minimum=1, maximum=INT64_MAX)
        if ttl is not None and (not isinstance(ttl, timedelta)
                                or not timedelta(seconds=1) <= ttl <= MAX_IDLE_AFTER):
            raise InvalidArgument(f"ttl must be a timedelta from 1 second to "
                                  f"{MAX_IDLE_AFTER.days} days, or None")
        seconds = None if ttl is None else round(ttl.total_seconds())
        if not self.store.writes.set_expiry(tenant, memory_id, seconds):
            raise MemoryNotFound(f"no memory {memory_id} for tenant {tenant}")
        return self.get(tenant, memory_id)

    def _live(self, tenant: Ref, memory_id: int) -> Memory:
        memory = self.get(tenant, memory_id)
        if memory.superseded_by is not None:
            raise InvalidArgument(f"memory {memory_id} was superseded by memory "
                                  f"{memory.superseded_by}: update the live version")
        return memory

    def _write(self, target: ScopeTarget, text: str, *, merged: Sequence[str | None] = (),
               supersedes: int | None = None, embed: bool = True) -> MemoryWrite:
        """``text`` as a write of ``target``: the values it carries sealed, and its vector
        (masked with them) when an embedding model is configured, as the distiller
        computes them, before the write transaction."""
        sealed = sealed_direct(self.outbound_filter, text, merged)
        embedding = model = None
        if embed and isinstance(self.retriever, HybridRetriever):
            try:  # refused for quota: written without its vector, as a failed call
                (vector,) = self.retriever.embed([text], [sealed],
                                                 payer=Payer(target.tenant))
            except QuotaExceeded:
                vector = None
            if vector is not None:
                embedding, model = tuple(vector), self.retriever.model
        return MemoryWrite(tenant=target.tenant, scope=target.scope.value,
                           scope_key=target.key, subject=target.subject, actor=target.actor,
                           content=text, content_key=content_key(text), supersedes=supersedes,
                           sealed_pii=sealed, embedding=embedding, embedding_model=model)

    # -- vectors -------------------------------------------------------------------------

    @property
    def recall_mode(self) -> str:
        """``"hybrid"`` (full text and vectors) or ``"full-text only"`` (no embedder)."""
        return "hybrid" if isinstance(self.retriever, HybridRetriever) else "full-text only"

    def vector_status(self, tenant: Ref | None = None) -> VectorStatus | None:
        """Live memories with and without a vector of the configured model (``None``: no
        embedder configured)."""
        if self.embedder is None:
            return None
        return self.store.vectors.vector_status(self.embedder.model, tenant)

    def embed_missing(self, batch_size: int | None = None,
                      progress: Callable[[int], None] | None = None,
                      limit: int | None = None) -> EmbedResult:
        """Embed every live memory without a vector of the configured model: never
        embedded, left marked by a failed call, or made by another model (a model
        change). Batched calls; each batch is committed, so an interrupted run resumes
        where it stopped. A failed batch is skipped and counted (its memories stay
        marked). ``progress`` gets the number of memories each batch handled;
        ``limit`` stops after that many."""
        if self.embedder is None or not isinstance(self.retriever, HybridRetriever):
            raise InvalidArgument("no embedding model configured (memory.embedding_model)")
        size = batch_size or self.config.embedding_batch_size
        if size <= 0:
            raise InvalidArgument("batch_size must be positive")
        result = EmbedResult(self.embedder.model)
        after = 0
        while limit is None or _handled(result) < limit:
            take = size if limit is None else min(size, limit - _handled(result))
            page = self.store.vectors.missing_vectors(self.embedder.model, after, take)
            if not page:
                break
            after = page[-1].id
            for payer, rows in _by_payer(page):
                self._embed_page(self.retriever, payer, rows, result)
            if progress is not None:
                progress(len(page))
        log.info("embedded %d memories with %s (%d failed, %d refused for quota)",
                 result.embedded, result.model, result.failed, result.refused)
        return result

    def _embed_page(self, retriever: HybridRetriever, payer: Payer,
                    rows: Sequence[Memory], result: EmbedResult) -> None:
        """One call for ``rows`` (memories of one tenant), reserved on its quota; their
        vectors stored in one commit. Refused: nothing sent, they stay marked."""
        try:
            vectors = retriever.embed([m.content for m in rows],
                                      [m.sealed_pii for m in rows], payer=payer)
        except QuotaExceeded:
            result.refused += len(rows)
            return
        result.batches += 1
        done = [(m.id, v) for m, v in zip(rows, vectors, strict=True) if v is not None]
        result.embedded += self.store.vectors.store_vectors(result.model, done)
        result.failed += len(rows) - len(done)

    # -- erasure -------------------------------------------------------------------------

    def forget(self, tenant: Ref, actor: Ref | None = None, *,
               whole_tenant: bool = False) -> int:
        """Erase ``actor``'s personal memories in ``tenant`` (right to erasure), or with
        ``whole_tenant=True`` every memory of the tenant. Returns the rows deleted.

        Tenant and subject memories learnt from the actor's conversations stay: they
        describe the organisation and its records, not the person.
        """
        require_ref(tenant, "tenant")
        check_bool(whole_tenant, "whole_tenant")
        if whole_tenant == (actor is not None):
            raise InvalidArgument("pass either actor= or whole_tenant=True")
        if actor is not None:
            deleted = self.store.lifecycle.delete_personal(tenant, require_ref(actor, "actor"))
            log.info("forgot %d personal memories of %s in %s", deleted, actor, tenant)
        else:
            deleted = self.store.lifecycle.delete_tenant(tenant)
            log.info("forgot all %d memories of %s", deleted, tenant)
        return deleted


def _handled(result: EmbedResult) -> int:
    return result.embedded + result.failed + result.refused


def _by_payer(page: Sequence[Memory]) -> list[tuple[Payer, list[Memory]]]:
    """A backfill page split by tenant, whose quota pays (no actor's: a backfill is no
    call of theirs), in the page's order: one call each."""
    groups: dict[Ref, list[Memory]] = {}
    for memory in page:
        groups.setdefault(memory.tenant, []).append(memory)
    return [(Payer(tenant), rows) for tenant, rows in groups.items()]


def _check_sweep(idle_after: object, batch_size: object) -> None:
    """``sweep``'s arguments: a ``timedelta`` from zero to a century, a positive batch."""
    if idle_after is not None:
        if not isinstance(idle_after, timedelta):
            raise InvalidArgument(f"idle_after must be a timedelta, got "
                                  f"{type(idle_after).__name__}")
        if not timedelta(0) <= idle_after <= MAX_IDLE_AFTER:
            raise InvalidArgument(f"idle_after must be from 0 to {MAX_IDLE_AFTER.days} days, "
                                  f"got {idle_after}")
    if batch_size is not None:
        check_int(batch_size, "batch_size", minimum=1, maximum=INT32_MAX)


def _target(tenant: object, scope: object, subject: object, actor: object) -> ScopeTarget:
    """Where ``add`` writes: the scope's rules (``chatkeep.memory.scopes``) with the
    missing or extra reference named."""
    tenant = require_ref(tenant, "tenant")
    if isinstance(scope, Scope) or (isinstance(scope, str) and scope in tuple(Scope)):
        scope = Scope(scope)
    else:
        raise InvalidArgument(f"unknown scope {scope!r} "
                              f"(expected one of {', '.join(Scope)})"[:300])
    subject = None if subject is None else require_ref(subject, "subject")
    actor = None if actor is None else require_ref(actor, "actor")
    if scope is Scope.PERSONAL and actor is None:
        raise InvalidArgument("a personal memory needs actor=: the person it belongs to")
    if scope is Scope.SUBJECT and subject is None:
        raise InvalidArgument("a subject memory needs subject=: what it is about")
    if actor is not None and scope is not Scope.PERSONAL:
        raise InvalidArgument(f"actor= is only for scope='personal' (a {scope.value} memory "
                              "belongs to no actor)")
    if subject is not None and scope is not Scope.SUBJECT:
        raise InvalidArgument(f"subject= is only for scope='subject' (a {scope.value} "
                              "memory is about no subject)")
    return ScopeTarget(tenant, scope, subject=subject, actor=actor)


def _target_of(memory: Memory) -> ScopeTarget:
    return ScopeTarget(memory.tenant, Scope(memory.scope), subject=memory.subject,
                       actor=memory.actor)


def _content(content: object) -> str:
    """A memory's text: a string of at most ``MEMORY_CONTENT_MAX`` characters with a word
    in it (two texts differing only in case, spacing or punctuation are one memory, so a
    text of punctuation alone would be every such text)."""
    text = check_text(content, "memory content", max_length=MEMORY_CONTENT_MAX,
                      non_empty=True)
    if not normalise(text):
        raise InvalidArgument("memory content must contain a word")
    return text
