"""``Chatkeep``: the facade that wires store, model, compressor and dispatcher together.

Every part is usable alone; this is the short path::

    keep = Chatkeep("sqlite:///chat.db")
    session = keep.sessions.create(tenant=Ref("organization", 7))
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from chatkeep.config import Config
from chatkeep.errors import (
    ChatkeepError,
    ConfigError,
    InvalidArgument,
    SessionNotFound,
    StoreError,
)
from chatkeep.jobs import Dispatcher, InlineDispatcher, make_dispatcher
from chatkeep.llm.base import ChatModel
from chatkeep.llm.openai_client import model_from_config
from chatkeep.quotas import QuotaService
from chatkeep.quotas.service import SWEEP_JOB as QUOTA_SWEEP_JOB
from chatkeep.refs import Ref, require_ref
from chatkeep.sessions import SessionService
from chatkeep.store.connections import ensure_started, on_first_use, store_error
from chatkeep.store.engine import describe_url, make_engine
from chatkeep.store.migrate import ensure_schema
from chatkeep.store.quotas import QuotaStore
from chatkeep.store.repository import Repository, UsageLine
from chatkeep.tokens import HeuristicCounter, TokenCounter
from chatkeep.validation import check_retention_days

if TYPE_CHECKING:
    # The model-facing layers load when first used (``Chatkeep._build``): a program
    # that only reads the store (the CLI's read commands) never imports them.
    from chatkeep.history.compressor import HistoryCompressor
    from chatkeep.history.replay import Replay
    from chatkeep.lifecycle import (
        Eraser,
        ErasureCheck,
        ErasurePlan,
        ErasureReceipt,
        HoldService,
    )
    from chatkeep.lifecycle.erase import Progress
    from chatkeep.lifecycle.retention import RetentionService
    from chatkeep.memory import MemoryService
    from chatkeep.memory.embedders import Embedder
    from chatkeep.privacy.detector import Recognizer
    from chatkeep.privacy.guard import PrivacyGuard
    from chatkeep.sessions import ChatSession
    from chatkeep.store.lifecycle import LifecycleStore

#: The jobs' names, ``chatkeep.memory.DISTIL_JOB`` and ``chatkeep.history.compressor.FOLD_JOB``,
#: known without importing those layers (tests/test_lazy_facade.py checks they agree).
_DISTIL_JOB, _FOLD_JOB = "distil", "fold"
#: The parts ``Chatkeep`` builds on first use (``Chatkeep.__getattr__``): the
#: model-facing layers, and forgetting's (a program that only reads the store, the CLI's
#: read commands, imports neither).
_PARTS = frozenset({"privacy", "compressor", "memory", "lifecycle", "holds", "eraser",
                    "retention"})


class Chatkeep:
    """Durable multi-tenant chat sessions with a budgeted history.

    ``model``: an ``openai.OpenAI`` client or a ``ChatModel`` for summaries; ``None`` uses
    ``llm`` config / ``OPENAI_*`` env when set, and the offline extractive summarizer when not.
    ``config``: a ``Config`` or a dict of sections (merged over TOML file and env).
    ``create_schema``: create missing tables (the embedded default; use migrations in production).
    ``recognizers``: your own PII ``Recognizer`` objects, run beside the built-in ones.
    ``embedder``: an ``Embedder`` for recall by meaning, or ``"local"`` (all-MiniLM-L6-v2 on
    this machine, ``chatkeep[local]``); ``None`` uses ``memory.embedder`` /
    ``memory.embedding_model`` when set (full-text recall when not).
    """

    privacy: PrivacyGuard
    """The privacy guard: the two switches, each session's vault, the redactor (built on
    first use)."""
    compressor: HistoryCompressor
    """What the model receives, and the folds (built on first use)."""
    memory: MemoryService
    """Long-term memory: distilling, recall, the sweep (built on first use)."""
    lifecycle: LifecycleStore
    """Forgetting's store procedures: deletes, erasures, holds, the log (built on first
    use)."""
    holds: HoldService
    """Legal holds (built on first use)."""
    eraser: Eraser
    """Erasure of a data subject: plan, erase, verify (built on first use)."""
    retention: RetentionService
    """Retention policies and their sweep (built on first use)."""

    def __init__(self, database_url: str | Engine, *, model: Any = None,
                 config: Config | Mapping[str, Any] | None = None,
                 dispatcher: str | Dispatcher | None = None,
                 counter: TokenCounter | None = None, create_schema: bool = True,
                 recognizers: Sequence[Recognizer] = (),
                 embedder: Embedder | str | None = None) -> None:
        self.config = Config.load(config)
        _check_arguments(counter, create_schema, recognizers)
        if self.config.observability.capture_content:
            from chatkeep.observability import configure as configure_telemetry

            configure_telemetry(capture_content=True)
        self.counter = counter or HeuristicCounter()
        # A bad dispatcher or model fails before any connection (and before a SQLite file
        # is created).
        dispatcher_ = make_dispatcher(dispatcher)
        configured = model if model is not None else model_from_config(self.config.llm)
        self.model: ChatModel | None = None
        if configured is not None:
            from chatkeep.llm.adapt import as_chat_model

            self.model = as_chat_model(configured)
        # Wired, not opened: the database is opened (and its schema created or checked) on
        # first use, or by start().
        self.engine = (database_url if isinstance(database_url, Engine) else make_engine(
            database_url, sqlite_synchronous=self.config.store.sqlite_synchronous,
            prepared_statements=self.config.store.prepared_statements))
        on_first_use(self.engine, lambda: self._start(create_schema))
        self.repository = Repository(self.engine)
        self.sessions = SessionService(
            self.repository, self.counter,
            app_anonymize_pii=self.config.privacy.anonymize_pii,
            keep_retracted_text=self.config.privacy.keep_retracted_text)
        self.dispatcher = dispatcher_
        # The model-facing layers (privacy, compressor, memory) are built on first use,
        # under one lock, each once (``_build``); what can refuse its arguments is built
        # now, so a bad one still fails here: the privacy guard when given recognizers or
        # NER, the memory layer when an embedder is given or configured (the database's
        # start checks what it needs).
        self._recognizers = list(recognizers)
        self._embedder = embedder
        self._building = threading.RLock()
        self.dispatcher.bind(self.job_handlers())
        # Forgetting (issue 36): deletes, erasures and holds over the store's procedures,
        # built on first use (``_make_lifecycle`` ...); the retention defaults are checked
        # now, as building ``retention`` checks them.
        for days, name in ((self.config.privacy.session_retention_days,
                            "privacy.session_retention_days"),
                           (self.config.privacy.memory_retention_days,
                            "privacy.memory_retention_days")):
            check_retention_days(days, name)
        self.sessions.on_delete.append(lambda _session_id: self._forget_cached())
        # Quotas (issue 33): a reservation before every model call made for a tenant.
        self.quotas = QuotaService(QuotaStore(self.engine, self.repository.clock),
                                   self.config.quotas, self.repository.clock)
        if self._recognizers or self.config.privacy.ner:
            self._build("privacy")
        if self._wants_embedder():
            self._build("memory")

    def __getattr__(self, name: str) -> Any:
        """The model-facing parts, ``privacy``, ``compressor`` and ``memory``, and
        forgetting's, ``lifecycle``, ``holds``, ``eraser`` and ``retention``, each built
        (and wired to the others) the first time it is asked for; an attribute after."""
        if name not in _PARTS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self._build(name)

    def _build(self, name: str) -> Any:
        with self._building:  # one builder at a time: each part once, whatever the threads
            part = self.__dict__.get(name)
            if part is None:
                part = getattr(self, f"_make_{name}")()
                self.__dict__[name] = part
            return part

    def _make_lifecycle(self) -> LifecycleStore:
        from chatkeep.store.lifecycle import LifecycleStore

        return LifecycleStore(self.engine, self.repository.clock)

    def _make_holds(self) -> HoldService:
        from chatkeep.lifecycle import HoldService

        return HoldService(self.lifecycle)

    def _make_eraser(self) -> Eraser:
        from chatkeep.lifecycle import Eraser

        return Eraser(self.lifecycle, on_erased=self._forget_cached)

    def _make_retention(self) -> RetentionService:
        from chatkeep.lifecycle.retention import RetentionService
        from chatkeep.store.retention import RetentionStore

        return RetentionService(
            self.lifecycle, RetentionStore(self.engine, self.repository.clock),
            session_idle_days=self.config.privacy.session_retention_days,
            memory_idle_days=self.config.privacy.memory_retention_days,
            on_deleted=self._forget_cached)

    def _make_privacy(self) -> PrivacyGuard:
        from chatkeep.privacy.guard import PrivacyGuard

        return PrivacyGuard(self.config.privacy, self.repository, self._recognizers)

    def _make_memory(self) -> MemoryService:
        from chatkeep.memory import MemoryService
        from chatkeep.memory.embedders import make_embedder, pii_mask

        embedder = make_embedder(self._embedder, self.config.memory, self.config.llm)
        memory = MemoryService(self.repository, self.model, sessions=self.sessions,
                               dispatcher=self.dispatcher, config=self.config.memory,
                               language=self.config.chat.language, counter=self.counter,
                               outbound_filter=self.privacy, embedder=embedder,
                               embed_mask=pii_mask(self.privacy))
        memory.quotas = self.quotas
        return memory

    def _make_compressor(self) -> HistoryCompressor:
        from chatkeep.history.compressor import HistoryCompressor

        compressor = HistoryCompressor(self.model, config=self.config.chat,
                                       counter=self.counter, outbound_filter=self.privacy,
                                       repository=self.repository)
        if self.config.memory.distil_on_compress and self.model is not None:
            # (Offline there is nothing to distil with; the sweep catches up once a model
            # is configured.)
            compressor.on_compress.append(self.memory.dispatch_distil)
        if self.config.memory.recall_in_history:
            compressor.memory_provider = self.memory.provider
        if not isinstance(self.dispatcher, InlineDispatcher):
            # A turn whose fold stopped at chat.max_fold_calls_per_turn leaves the rest to
            # the background (inline, the next turns fold it: running it here would undo
            # the bound).
            compressor.on_backlog.append(
                lambda session: self.dispatcher.dispatch(_FOLD_JOB, session.id))
        compressor.quotas = self.quotas
        return compressor

    def _wants_embedder(self) -> bool:
        """Whether recall by meaning is asked for: an embedder given, or configured
        (``memory.embedder = "local"`` or a ``memory.embedding_model``)."""
        memory = self.config.memory
        return (self._embedder is not None or memory.embedder == "local"
                or bool(memory.embedding_model))

    def _forget_cached(self) -> None:
        from chatkeep.lifecycle.caches import forget_cached

        # Only what was built can hold anything.
        forget_cached(self.__dict__.get("privacy"), self.__dict__.get("memory"))

    def _start(self, create_schema: bool) -> None:
        _open(self.engine, create_schema)
        memory = self.__dict__.get("memory")
        if memory is not None:  # built at construction when it embeds
            memory.start()

    def start(self) -> Chatkeep:
        """Open the database now (and create or check its schema) instead of on first use:
        at application start-up, so a wrong URL or a server that is down fails there.
        Idempotent."""
        ensure_started(self.engine)
        return self

    def job_handlers(self) -> dict[str, Any]:
        """Job name -> handler taking a session id (what dispatchers and workers run)."""
        return {_DISTIL_JOB: self._run_distil_job, _FOLD_JOB: self._run_fold_job,
                QUOTA_SWEEP_JOB: self._run_quota_sweep_job}

    def _run_quota_sweep_job(self, session_id: str) -> None:
        """The ``"quota_sweep"`` job: end the quota reservations whose lease ended (the
        session id a job carries is unused)."""
        self.quotas.run_job(session_id)

    def _run_distil_job(self, session_id: str) -> None:
        """The ``"distil"`` job: a job queued before its session was deleted (or its actor
        erased) finds nothing to distil, and is done, not retried."""
        try:
            self.memory.run_job(session_id)
        except SessionNotFound:
            return

    def _run_fold_job(self, session_id: str) -> None:
        """The ``"fold"`` job: fold a session's backlog with no per-turn bound (a session
        deleted meanwhile has nothing to fold)."""
        try:
            session = self.sessions.get_unscoped(session_id)
        except SessionNotFound:
            return
        self.compressor.fold_backlog(session)

    def usage(self, tenant: Ref | None = None, *, since: datetime | None = None,
              until: datetime | None = None) -> list[UsageLine]:
        """Token usage by tenant, purpose and model (billing is this one query)."""
        if tenant is not None:
            require_ref(tenant, "tenant")
        for name, value in (("since", since), ("until", until)):
            if value is not None and not isinstance(value, datetime):
                raise InvalidArgument(f"{name} must be a datetime, got {type(value).__name__}")
        if since is not None and until is not None and _aware(since) >= _aware(until):
            raise InvalidArgument(f"since ({since.isoformat()}) must be before until "
                                  f"({until.isoformat()})")
        return self.repository.usage_report(tenant, since=since, until=until)

    def plan_erasure(self, tenant: Ref, *, actor: Ref | None = None,
                     subject: Ref | None = None, whole_tenant: bool = False) -> ErasurePlan:
        """What ``erase`` with these arguments would remove now (counts per surface, ids,
        what stays and why, the holds in the way), writing nothing: ``--dry-run``."""
        from chatkeep.lifecycle import erase_scope

        return self.eraser.plan(erase_scope(tenant, actor, subject, whole_tenant))

    def erase(self, tenant: Ref, *, actor: Ref | None = None, subject: Ref | None = None,
              whole_tenant: bool = False, by: str | None = None, batch_size: int = 1000,
              progress: Progress | None = None) -> ErasureReceipt:
        """Erase a data subject of ``tenant``: an ``actor`` (their conversations, their
        personal memories, memories from their conversations carrying their values), a
        ``subject`` (its conversations and memories), or ``whole_tenant`` (everything);
        vectors, text index and caches with them, the bytes gone from disk. Resumable
        (a killed run finishes when run again), in batches of ``batch_size``; refused
        with ``ScopeOnHold`` under a legal hold. Returns the receipt (no personal
        content); ``by`` names who asked, for the lifecycle log."""
        from chatkeep.lifecycle import erase_scope

        return self.eraser.erase(erase_scope(tenant, actor, subject, whole_tenant), by=by,
                                 batch_size=batch_size, progress=progress)

    def verify_erasure(self, receipt: ErasureReceipt | Mapping[str, Any] | str
                       ) -> ErasureCheck:
        """Check an erasure's receipt against this store (its digest, the store's record
        of it, nothing of its scope left): truthy when it verifies, else it lists why."""
        from chatkeep.lifecycle import ErasureReceipt

        if isinstance(receipt, str):
            receipt = ErasureReceipt.from_json(receipt)
        elif not isinstance(receipt, ErasureReceipt):
            receipt = ErasureReceipt.from_dict(dict(receipt))
        return self.eraser.verify(receipt)

    def replay(self, session: ChatSession, *, turn: int) -> Replay:
        """Rebuild request ``turn`` of ``session`` (1 is the first chatkeep built for it,
        -1 the newest) from the store alone, and check it against the SHA-256 recorded when
        it was built: ``result.match``, the rebuilt ``result.request``, and what an erasure
        removed since (``result.erased``; the hashes then differ). Reads only: no model
        call, nothing written. ``TurnNotFound`` when there is no such turn,
        ``TurnNotRecorded`` for the requests built before the database had replay."""
        from chatkeep.history.replay import replay

        return replay(self.compressor, session, turn)

    def close(self) -> None:
        """Release database connections and background threads."""
        shutdown = getattr(self.dispatcher, "shutdown", None)
        if callable(shutdown):
            shutdown()
        self.engine.dispose()

    def __enter__(self) -> Chatkeep:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_arguments(counter: object, create_schema: object, recognizers: object) -> None:
    """The constructor's own arguments, checked before anything is opened."""
    if counter is not None and not callable(getattr(counter, "count", None)):
        raise ConfigError(f"counter must have a count(text) -> int method, "
                          f"got {type(counter).__name__}")
    if not isinstance(create_schema, bool):
        raise ConfigError(f"create_schema must be True or False, got {create_schema!r}")
    if isinstance(recognizers, str | bytes) or not isinstance(recognizers, Sequence):
        raise ConfigError(f"recognizers must be a list of Recognizer objects, "
                          f"got {type(recognizers).__name__}")


def _open(engine: Engine, create_schema: bool) -> None:
    """Open the database and create (or check) the schema: a server that is down or a
    file that cannot be opened is a ``StoreError`` naming the database, and leaves no
    connection behind (the next use tries again)."""
    try:
        if create_schema:
            ensure_schema(engine)
        else:
            with engine.connect():
                pass
    except ChatkeepError:
        engine.dispose()
        raise
    except (SQLAlchemyError, OSError, TypeError) as exc:
        # TypeError: the driver refused a URL query argument at connect time.
        engine.dispose()
        cause = store_error(exc) if isinstance(exc, SQLAlchemyError) else exc
        raise StoreError(f"cannot open {describe_url(engine.url)}: "
                         f"{str(cause).removeprefix('database error: ')}") from exc


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
