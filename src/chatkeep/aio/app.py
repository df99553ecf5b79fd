"""``AsyncChatkeep``: the async twin of ``Chatkeep``, wiring the same parts.

The constructor does no I/O (it can run at import time or in a FastAPI lifespan);
the schema is created on first use, and ``await keep.close()`` (or ``async with``)
drains background jobs and disposes of the connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from chatkeep.aio.bridge import BridgedChatModel, BridgedEmbedder, bridge
from chatkeep.aio.dispatch import TaskDispatcher
from chatkeep.aio.engine import make_async_engine
from chatkeep.aio.services import AsyncHistoryCompressor, AsyncMemoryService, AsyncPrivacyGuard
from chatkeep.aio.sessions import AsyncSessionService
from chatkeep.app import Chatkeep
from chatkeep.config import Config
from chatkeep.errors import ConfigError, KeepClosed
from chatkeep.jobs import Dispatcher, InlineDispatcher, ThreadPoolDispatcher
from chatkeep.llm.adapt import as_async_chat_model
from chatkeep.llm.base import AsyncChatModel
from chatkeep.llm.openai_client import async_model_from_config
from chatkeep.memory.embeddings import AsyncEmbedder, AsyncOpenAIEmbedder, embedder_from_config
from chatkeep.privacy.detector import Recognizer
from chatkeep.refs import Ref
from chatkeep.store.repository import UsageLine
from chatkeep.tokens import TokenCounter

P = ParamSpec("P")
T = TypeVar("T")


class AsyncChatkeep:
    """Async twin of ``Chatkeep``: same arguments, every I/O method awaited.

    ``database_url``: ``sqlite:///file.db`` (run on aiosqlite) or ``postgresql://...``
    (asyncpg; ``postgresql+psycopg://`` keeps psycopg's async connection). ``model``: an
    ``openai.AsyncOpenAI`` client or an ``AsyncChatModel``; a sync client is a
    ``ConfigError``. ``dispatcher``: ``"task"`` (the default: jobs as tasks on the loop),
    ``"inline"``, or a ``Dispatcher`` such as Celery's. ``embedder``: an ``AsyncEmbedder``
    (default: ``memory.embedding_model`` through ``openai.AsyncOpenAI``).
    """

    def __init__(self, database_url: str, *, model: Any = None,
                 config: Config | Mapping[str, Any] | None = None,
                 dispatcher: str | Dispatcher | None = None,
                 counter: TokenCounter | None = None, create_schema: bool = True,
                 recognizers: Sequence[Recognizer] = (),
                 embedder: AsyncEmbedder | None = None) -> None:
        self.config = Config.load(config)
        self.embedder: AsyncEmbedder | None = embedder or embedder_from_config(
            self.config.memory, self.config.llm, cls=AsyncOpenAIEmbedder)  # type: ignore[assignment]
        self.model: AsyncChatModel | None = (
            as_async_chat_model(model) if model is not None
            else async_model_from_config(self.config.llm))
        self.dispatcher = _async_dispatcher(dispatcher)
        self.engine = make_async_engine(
            database_url, sqlite_synchronous=self.config.store.sqlite_synchronous)
        self._options: dict[str, Any] = {"counter": counter, "create_schema": create_schema,
                                         "recognizers": recognizers}
        self._core: Chatkeep | None = None
        self._starting: asyncio.Lock | None = None
        self._closed = False
        self.sessions = AsyncSessionService(self)
        self.compressor = AsyncHistoryCompressor(self)
        self.memory = AsyncMemoryService(self)
        self.privacy = AsyncPrivacyGuard(self)

    async def core(self) -> Chatkeep:
        """The sync core this twin drives, created (with the schema) on first use."""
        if self._closed:
            raise KeepClosed("this AsyncChatkeep is closed")
        if self._core is None:
            self._starting = self._starting or asyncio.Lock()
            async with self._starting:
                if self._core is None:
                    model = BridgedChatModel(self.model) if self.model is not None else None
                    embedder = (BridgedEmbedder(self.embedder) if self.embedder is not None
                                else None)
                    core = Chatkeep(self.engine.sync_engine, model=model,
                                    config=self.config, dispatcher=self.dispatcher,
                                    embedder=embedder, **self._options)
                    # Opened here, under the lock: concurrent first calls wait for the
                    # schema instead of racing it (the greenlets share one thread).
                    await bridge(core.start)
                    self._core = core
        return self._core

    async def run(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run a core callable through the bridge (after checking the keep is open)."""
        await self.core()
        return await bridge(fn, *args, **kwargs)

    async def start(self) -> AsyncChatkeep:
        """Async twin of ``Chatkeep.start``: open the database now, not on first use."""
        await self.core()
        return self

    async def usage(self, tenant: Ref | None = None, *, since: datetime | None = None,
                    until: datetime | None = None) -> list[UsageLine]:
        """Token usage by tenant, purpose and model."""
        core = await self.core()
        return await self.run(core.usage, tenant, since=since, until=until)

    async def close(self) -> None:
        """Wait for background jobs, then release the connections; later calls raise."""
        if self._closed:
            return
        if isinstance(self.dispatcher, TaskDispatcher):
            await self.dispatcher.drain()
        self._closed = True
        await self.engine.dispose()

    async def __aenter__(self) -> AsyncChatkeep:
        await self.core()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


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
