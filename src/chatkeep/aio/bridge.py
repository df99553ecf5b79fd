"""The bridge between the event loop and chatkeep's one implementation of every rule.

chatkeep's core is written once, as plain synchronous code. The async API runs it
inside a greenlet on the event loop (SQLAlchemy's asyncio bridge, ``greenlet_spawn``):
whenever the core waits for the database (an async driver: aiosqlite, asyncpg, psycopg's
async connection) or for a model (``openai.AsyncOpenAI`` through :class:`BridgedChatModel`),
the greenlet switches back to the loop, which awaits it; no thread is used and no rule,
query or prompt exists twice. The price: a plug-in that blocks (a sync HTTP call in a
custom summarizer) blocks the loop, so the async API accepts only async model clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.util import await_only, greenlet_spawn

from chatkeep.errors import KeepClosed
from chatkeep.llm.base import AsyncChatModel, Completion
from chatkeep.memory.embedders import AsyncEmbedder
from chatkeep.memory.embedders.base import is_offline

P = ParamSpec("P")
T = TypeVar("T")

log = logging.getLogger("chatkeep.aio")

__all__ = ["Bridge", "BridgedChatModel", "BridgedEmbedder", "bridge"]


async def bridge(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run the core callable ``fn`` on the event loop: its waits are awaited, not blocked."""
    result: T = await greenlet_spawn(functools.partial(fn, *args, **kwargs))
    return result


class Bridge:
    """One keep's way onto the event loops it is used on.

    A call refuses once the keep is closed (``KeepClosed``), opens the database first
    (once per keep: ``start``; concurrent first calls on a loop wait for it rather than
    race the schema, since greenlets share their thread's locks), then runs through
    :func:`bridge`. It also notes each loop: when a loop ends (shuts down its async
    generators, as ``asyncio.run`` and the Agents SDK's ``run_sync`` do), ``release`` runs
    on it, so nothing bound to that loop (connections, jobs) outlives it.
    """

    def __init__(self, start: Callable[[], object],
                 release: Callable[[], Awaitable[None]]) -> None:
        self.closed = False
        self._start = start
        self._started = False
        self._release = release
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loop] = \
            weakref.WeakKeyDictionary()
        self._guard = threading.Lock()

    @property
    def ready(self) -> bool:
        """Open, and the database started: what :meth:`open` would let through at once."""
        return self._started and not self.closed

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` through the bridge, on an open keep."""
        await self.open()
        return await bridge(fn, *args, **kwargs)

    async def open(self) -> None:
        """Refuse if closed; open the database if nobody has yet."""
        if self.closed:
            raise KeepClosed("this AsyncChatkeep is closed")
        loop = asyncio.get_running_loop()
        here = self._loops.get(loop) or await self._enter(loop)
        if not self._started:
            async with here.starting:
                if not self._started:
                    await bridge(self._start)
                    self._started = True

    async def _enter(self, loop: asyncio.AbstractEventLoop) -> _Loop:
        here = _Loop()
        # A loop kept for more runs after shutting its generators down (the Agents SDK's
        # run_sync does after each run) would warn of a new one: there the connections
        # stay for its next run, and close() or the process closes them.
        if not getattr(loop, "_asyncgens_shutdown_called", False):
            here.watch = self._watch(here)
            await anext(here.watch)  # runs to its yield: the loop holds it till it ends
        with self._guard:
            self._loops[loop] = here
        return here

    async def _watch(self, here: _Loop) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if here.live:  # the loop ends: release what the keep holds on it
                here.live = False
                with self._guard:
                    self._loops.pop(asyncio.get_running_loop(), None)
                try:
                    await self._release()
                except Exception:
                    log.exception("releasing an ended event loop's connections failed")

    async def close(self) -> None:
        """Refuse further calls; release every loop the keep was used on, each on itself:
        this one and every other that runs now. A loop that is idle is released when it
        ends; one that is closed can run nothing, so it is only forgotten."""
        self.closed = True
        with self._guard:
            loops = list(self._loops.items())
        current = asyncio.get_running_loop()
        for loop, here in loops:
            if here.watch is None:  # unwatched: AsyncChatkeep.close disposes what it can
                continue
            if loop is current:
                await here.watch.aclose()
            elif loop.is_running():
                await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(here.watch.aclose(), loop))
            elif loop.is_closed():
                here.live = False
                closing = here.watch.aclose()  # its finally now awaits nothing
                with contextlib.suppress(StopIteration, RuntimeError):
                    closing.send(None)
                with self._guard:
                    self._loops.pop(loop, None)


class _Loop:
    """What a keep holds per event loop: its start lock and the generator that watches
    for the loop's end."""

    def __init__(self) -> None:
        self.starting = asyncio.Lock()
        self.watch: AsyncGenerator[None, None] | None = None
        self.live = True


class BridgedChatModel:
    """The core's ``ChatModel`` over an ``AsyncChatModel``: each call is awaited on the
    loop from inside the bridge (only usable there)."""

    def __init__(self, model: AsyncChatModel) -> None:
        self.model = model

    def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                 max_tokens: int | None = None, temperature: float | None = None,
                 json_mode: bool = False) -> Completion:
        """Await the async model's completion from inside the bridge."""
        result: Completion = await_only(self.model.complete(
            messages, model=model, max_tokens=max_tokens, temperature=temperature,
            json_mode=json_mode))
        return result


class BridgedEmbedder:
    """The core's ``Embedder`` over an ``AsyncEmbedder`` (only usable inside the bridge)."""

    def __init__(self, embedder: AsyncEmbedder) -> None:
        self.embedder = embedder

    @property
    def model(self) -> str:
        """The embedding model's name."""
        return self.embedder.model

    @property
    def offline(self) -> bool:
        """Whether the async embedder runs on this machine (then it reserves nothing)."""
        return is_offline(self.embedder)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Await the async embedder from inside the bridge."""
        vectors: list[list[float]] = await_only(self.embedder.embed(texts))
        return vectors

    def embed_counted(self, texts: Sequence[str]) -> tuple[list[list[float]], int | None]:
        """The vectors and the input tokens the endpoint counted (``None`` when the async
        embedder does not report them), awaited from inside the bridge."""
        counting = getattr(self.embedder, "embed_counted", None)
        if counting is None:
            return self.embed(texts), None
        counted: tuple[list[list[float]], int | None] = await_only(counting(texts))
        return counted
