"""``AsyncChatkeep``: the async twin of ``Chatkeep``, wiring the same parts.

It builds its sync ``Chatkeep`` at once (that does no I/O, so it can run at import time
or in a FastAPI lifespan) over an async engine, and wraps it: each part is a thin twin
over the core's (:mod:`chatkeep.aio.twins`). The database is opened on first use (or by
``start()``); ``await keep.close()`` (or ``async with``) drains background jobs and
closes the connections of every event loop the keep was used on.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine

from chatkeep.aio.bridge import Bridge, BridgedChatModel, BridgedEmbedder
from chatkeep.aio.dispatch import TaskDispatcher
from chatkeep.aio.engine import make_async_engine
from chatkeep.aio.lifecycle import AsyncHoldService, AsyncRetentionService
from chatkeep.aio.pools import dispose_all, dispose_loop
from chatkeep.aio.quotas import AsyncQuotaService
from chatkeep.aio.read_lane import ReadLane
from chatkeep.aio.services import AsyncHistoryCompressor, AsyncMemoryService, AsyncPrivacyGuard
from chatkeep.aio.sessions import AsyncChatSession, AsyncSessionService
from chatkeep.aio.twins import core_of
from chatkeep.app import Chatkeep
from chatkeep.config import Config
from chatkeep.errors import ConfigError
from chatkeep.history.replay import Replay
from chatkeep.jobs import Dispatcher, InlineDispatcher, ThreadPoolDispatcher
from chatkeep.lifecycle import ErasureCheck, ErasurePlan, ErasureReceipt
from chatkeep.lifecycle.erase import Progress
from chatkeep.llm.adapt import as_async_chat_model
from chatkeep.llm.base import AsyncChatModel
from chatkeep.llm.openai_client import async_model_from_config
from chatkeep.memory.embedders import AsyncEmbedder, AsyncOpenAIEmbedder, embedder_from_config
from chatkeep.memory.embedders.factory import LOCAL
from chatkeep.memory.embedders.local import AsyncLocalEmbedder
from chatkeep.privacy.detector import Recognizer
from chatkeep.refs import Ref
from chatkeep.store.connections import retrying_reads
from chatkeep.store.executor import Transport
from chatkeep.store.repository import UsageLine
from chatkeep.tokens import TokenCounter

P = ParamSpec("P")
T = TypeVar("T")


def _async_embedder(embedder: AsyncEmbedder | str | None,
                    config: Config) -> AsyncEmbedder | None:
    """What ``AsyncChatkeep(embedder=...)`` means: as given, ``"local"``, or configured."""
    if isinstance(embedder, str):
        if embedder.strip().lower() != LOCAL:
            raise ConfigError(f"embedder={embedder!r}: the only name accepted is 'local' "
                              "(or pass an AsyncEmbedder)")
        return AsyncLocalEmbedder(batch_size=config.memory.embedding_batch_size)
    if embedder is not None:
        return embedder
    configured: AsyncEmbedder | None = embedder_from_config(  # type: ignore[assignment]
        config.memory, config.llm, cls=AsyncOpenAIEmbedder)
    return configured


class AsyncChatkeep:
    """Async twin of ``Chatkeep``: same arguments, every I/O method awaited.

    ``database_url``: ``sqlite:///file.db`` (run on aiosqlite) or ``postgresql://...``
    (asyncpg; ``postgresql+psycopg://`` keeps psycopg's async connection). ``model``: an
    ``openai.AsyncOpenAI`` client or an ``AsyncChatModel``; a sync client is a
    ``ConfigError``. ``dispatcher``: ``"task"`` (the default: jobs as tasks on the loop),
    ``"inline"``, or a ``Dispatcher`` such as Celery's. ``embedder``: an ``AsyncEmbedder``,
    or ``"local"`` (all-MiniLM-L6-v2 on this machine, ``chatkeep[local]``, run off the
    loop); default: ``memory.embedder`` / ``memory.embedding_model`` through
    ``openai.AsyncOpenAI``.
    """

    def __init__(self, database_url: str, *, model: Any = None,
                 config: Config | Mapping[str, Any] | None = None,
                 dispatcher: str | Dispatcher | None = None,
                 counter: TokenCounter | None = None, create_schema: bool = True,
                 recognizers: Sequence[Recognizer] = (),
                 embedder: AsyncEmbedder | str | None = None) -> None:
        self.config = Config.load(config)
        self.embedder = _async_embedder(embedder, self.config)
        self.model: AsyncChatModel | None = (
            as_async_chat_model(model) if model is not None
            else async_model_from_config(self.config.llm))
        self.dispatcher = _async_dispatcher(dispatcher)
        self.engine = make_async_engine(
            database_url, sqlite_synchronous=self.config.store.sqlite_synchronous,
            prepared_statements=self.config.store.prepared_statements)
        self._core = Chatkeep(
            self.engine.sync_engine, config=self.config, dispatcher=self.dispatcher,
            model=BridgedChatModel(self.model) if self.model is not None else None,
            embedder=BridgedEmbedder(self.embedder) if self.embedder is not None else None,
            counter=counter, create_schema=create_schema, recognizers=recognizers)
        self._bridge = Bridge(self._core.start,
                              functools.partial(_release_loop, self.dispatcher, self.engine))
        transport = self._core.repository.transport
        self._lane = ReadLane.of(transport)
        self._read_through = retrying_reads(transport.run)
        self.sessions = AsyncSessionService(self._core.sessions, self._bridge)
        self.compressor = AsyncHistoryCompressor(self._core.compressor, self._bridge)
        self.memory = AsyncMemoryService(self._core.memory, self._bridge)
        self.privacy = AsyncPrivacyGuard(self._core.privacy, self._bridge)
        self.holds = AsyncHoldService(self._core.holds, self._bridge)
        self.retention = AsyncRetentionService(self._core.retention, self._bridge)
        self.quotas = AsyncQuotaService(self._core.quotas, self._bridge)

    async def core(self) -> Chatkeep:
        """The sync ``Chatkeep`` this one wraps, its database open (for code given to
        :meth:`run`; only usable inside the bridge)."""
        await self._bridge.open()
        return self._core

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run sync code over the core (``fn(*args, **kwargs)``) through the bridge."""
        return await self._bridge(fn, *args, **kwargs)

    def read(self, procedure: Callable[Concatenate[Transport, P], T], /,
             *args: P.args, **kwargs: P.kwargs) -> Awaitable[T]:
        """Run a store procedure that only reads, each statement its own snapshot
        (``procedure(transport, *args, **kwargs)``, as ``Transport.run`` calls it), on the
        keep's read lane (:mod:`chatkeep.aio.read_lane`): on a SQLite file one trip to a
        reading connection's thread, without the bridge; elsewhere, or while the lane
        stands aside, on the engine's transport through the bridge. Await the result."""
        lane = self._lane
        if lane is not None and self._bridge.ready and lane.usable:
            sent = lane.submit(procedure, *args, **kwargs)
            if sent is not None:
                return sent
        return self._read(procedure, *args, **kwargs)

    async def _read(self, procedure: Callable[Concatenate[Transport, P], T], /,
                    *args: P.args, **kwargs: P.kwargs) -> T:
        await self._bridge.open()
        lane = self._lane
        if lane is not None and lane.usable:
            return await lane.run(procedure, *args, **kwargs)
        return await self._bridge(self._read_through, procedure, *args, **kwargs)

    async def start(self) -> AsyncChatkeep:
        """Async twin of ``Chatkeep.start``: open the database now, not on first use."""
        await self._bridge.open()
        return self

    async def usage(self, tenant: Ref | None = None, *, since: datetime | None = None,
                    until: datetime | None = None) -> list[UsageLine]:
        """Token usage by tenant, purpose and model."""
        return await self._bridge(self._core.usage, tenant, since=since, until=until)

    async def plan_erasure(self, tenant: Ref, *, actor: Ref | None = None,
                           subject: Ref | None = None,
                           whole_tenant: bool = False) -> ErasurePlan:
        """Async twin of ``Chatkeep.plan_erasure``: what ``erase`` would remove now."""
        return await self._bridge(self._core.plan_erasure, tenant, actor=actor,
                                  subject=subject, whole_tenant=whole_tenant)

    async def erase(self, tenant: Ref, *, actor: Ref | None = None,
                    subject: Ref | None = None, whole_tenant: bool = False,
                    by: str | None = None, batch_size: int = 1000,
                    progress: Progress | None = None) -> ErasureReceipt:
        """Async twin of ``Chatkeep.erase`` (each batch awaited on the loop; ``progress``
        is called on it)."""
        return await self._bridge(self._core.erase, tenant, actor=actor, subject=subject,
                                  whole_tenant=whole_tenant, by=by, batch_size=batch_size,
                                  progress=progress)

    async def verify_erasure(self, receipt: ErasureReceipt | Mapping[str, Any] | str
                             ) -> ErasureCheck:
        """Async twin of ``Chatkeep.verify_erasure``."""
        return await self._bridge(self._core.verify_erasure, receipt)

    async def replay(self, session: AsyncChatSession, *, turn: int) -> Replay:
        """Async twin of ``Chatkeep.replay``: request ``turn`` of ``session`` rebuilt from
        the store and checked against its recorded hash."""
        return await self._bridge(self._core.replay, core_of(session), turn=turn)

    async def close(self) -> None:
        """Wait for background jobs, then close the connections of every loop the keep
        was used on, each on its own loop (an idle loop's when it ends); later calls
        raise."""
        if self._bridge.closed:
            return
        if isinstance(self.dispatcher, TaskDispatcher):
            await self.dispatcher.drain()
        await self._bridge.close()
        if self._lane is not None:
            await self._lane.close()
        await dispose_all(self.engine)

    async def __aenter__(self) -> AsyncChatkeep:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _release_loop(dispatcher: Dispatcher, engine: AsyncEngine) -> None:
    """What a keep holds on an event loop that ends: its jobs there, its connections."""
    if isinstance(dispatcher, TaskDispatcher):
        await dispatcher.drain(here_only=True)
    await dispose_loop(engine)


def _async_dispatcher(kind: str | Dispatcher | None) -> Dispatcher:
    if kind is None or kind in ("task", "thread"):
        return TaskDispatcher()
    if kind == "inline":
        return InlineDispatcher()
    if isinstance(kind, ThreadPoolDispatcher):
        raise ConfigError("a thread pool cannot run async jobs: use dispatcher='task' "
                          "(the default) or Celery")
    if isinstance(kind, Dispatcher):
        return kind
    raise ConfigError(f"unknown dispatcher {kind!r} (use 'task', 'inline' or a Dispatcher)")
