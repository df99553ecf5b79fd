"""``MemoryService`` (``keep.memory``): distil, sweep, recall, forget, list.

The one entry point the facade, the job handler and the CLI use; the work is done
by ``Distiller``, ``Sweeper`` and ``Recaller``, and the SQL by ``MemoryStore``.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from chatkeep.config import MemoryConfig
from chatkeep.errors import DistillationError, InvalidArgument
from chatkeep.history.compressor import OutboundFilter
from chatkeep.jobs import Dispatcher, InlineDispatcher
from chatkeep.llm.base import ChatModel
from chatkeep.memory.distiller import Distiller, DistilResult
from chatkeep.memory.recall import Memory, Recaller, Retriever, TextRetriever
from chatkeep.memory.scopes import Scope
from chatkeep.memory.sweep import DEFAULT_LEASE, Sweeper
from chatkeep.refs import Ref, require_ref
from chatkeep.sessions import ChatSession, SessionService
from chatkeep.store.memories import MemoryStore
from chatkeep.store.repository import Repository
from chatkeep.tokens import TokenCounter

log = logging.getLogger("chatkeep.memory")

DISTIL_JOB = "distil"


class MemoryService:
    """Durable memories distilled from conversations, and recall for sessions.

    ``model`` is the ``ChatModel`` that extracts facts (``None``: ``distil`` refuses
    with ``DistillationError``). ``outbound_filter`` redacts what the distiller sends;
    ``retriever`` ranks recall (default: the database's full-text index).
    """

    def __init__(self, repository: Repository, model: ChatModel | None, *,
                 sessions: SessionService | None = None,
                 dispatcher: Dispatcher | None = None,
                 config: MemoryConfig | None = None, language: str = "English",
                 outbound_filter: OutboundFilter | None = None,
                 retriever: Retriever | None = None, counter: TokenCounter | None = None,
                 lease: timedelta = DEFAULT_LEASE) -> None:
        self.config = config or MemoryConfig()
        self.config.validate()
        self.model = model
        self.sessions = sessions or SessionService(repository, counter)
        self.dispatcher = dispatcher or InlineDispatcher()
        self.store = MemoryStore(repository.engine, repository.clock)
        self.retriever = retriever or TextRetriever(self.store)
        self.language = language
        self.outbound_filter = outbound_filter
        self.counter = counter
        self.sweeper = Sweeper(self.store, self.config, lease)
        self.recaller = Recaller(self.store, self.retriever, self.config.recall_limit)

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
            session = self.sessions.get(session)
        distiller = Distiller(self.store, self.model, self.retriever,
                              model_name=self.config.distil_model, language=self.language,
                              outbound_filter=self.outbound_filter, counter=self.counter)
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
        return self.store.rewind(session_id, through_seq)

    # -- sweeping ------------------------------------------------------------------------

    def claim_idle(self, idle_after: timedelta | None = None,
                   batch_size: int | None = None) -> list[str]:
        """Claim idle sessions with undistilled messages (``sweep`` without dispatching)."""
        return self.sweeper.claim(idle_after, batch_size)

    def sweep(self, idle_after: timedelta | None = None,
              batch_size: int | None = None) -> list[str]:
        """Dispatch ``"distil"`` for sessions idle longer than ``idle_after`` (default
        ``memory.sweep_idle_after``) that have undistilled messages; at most
        ``batch_size`` per run. Returns the session ids dispatched."""
        claimed = self.sweeper.claim(idle_after, batch_size)
        for session_id in claimed:
            self.dispatcher.dispatch(DISTIL_JOB, session_id)
        log.info("sweep dispatched %d sessions", len(claimed))
        return claimed

    # -- reading -------------------------------------------------------------------------

    def recall(self, session: ChatSession, query: str | None = None,
               limit: int | None = None) -> list[Memory]:
        """Live memories that apply to ``session``: its tenant's, its subject's and (when it
        has an actor) the actor's personal ones. Ranked by relevance to ``query`` with
        recency breaking ties; without a query, the most recent."""
        return self.recaller.recall(session.tenant, session.actor, session.subject,
                                    query, limit)

    def provider(self, session: ChatSession) -> list[str]:
        """Memory texts for ``build_history`` (``HistoryCompressor.memory_provider``)."""
        return self.recaller.provider(session)

    def list(self, tenant: Ref, *, scope: Scope | str | None = None,
             actor: Ref | None = None, subject: Ref | None = None,
             include_superseded: bool = False, limit: int = 100) -> list[Memory]:
        """A tenant's memories for review, newest first."""
        require_ref(tenant, "tenant")
        return self.store.list_memories(
            tenant, scope=None if scope is None else Scope(scope).value, actor=actor,
            subject=subject, include_superseded=include_superseded, limit=limit)

    # -- erasure -------------------------------------------------------------------------

    def forget(self, tenant: Ref, actor: Ref | None = None, *,
               whole_tenant: bool = False) -> int:
        """Erase ``actor``'s personal memories in ``tenant`` (right to erasure), or with
        ``whole_tenant=True`` every memory of the tenant. Returns the rows deleted.

        Tenant and subject memories learnt from the actor's conversations stay: they
        describe the organisation and its records, not the person.
        """
        require_ref(tenant, "tenant")
        if whole_tenant == (actor is not None):
            raise InvalidArgument("pass either actor= or whole_tenant=True")
        if actor is not None:
            deleted = self.store.delete_personal(tenant, require_ref(actor, "actor"))
            log.info("forgot %d personal memories of %s in %s", deleted, actor, tenant)
        else:
            deleted = self.store.delete_tenant(tenant)
            log.info("forgot all %d memories of %s", deleted, tenant)
        return deleted
