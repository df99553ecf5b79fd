"""A test-only runner: the sync ``Chatkeep`` API, driven through ``AsyncChatkeep``.

The behaviour suite is written once, against the sync API. To run all of it on the
async API too (async drivers, ``openai.AsyncOpenAI``, tasks on an event loop), the
suite's ``keep`` fixture hands tests a :class:`SyncOverAsync` on its ``async`` axis:
each call is the async twin's method, run as a coroutine on one event loop in a
background thread (so tests that call from several threads exercise concurrency on
one loop, as a server does). Objects the async API does not expose (the repository,
the core's parts) are reached through the same bridge. Never used by the library.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
from collections.abc import Coroutine, Sequence
from typing import Any

import openai

from chatkeep.aio import AsyncChatkeep, AsyncChatSession
from chatkeep.aio.bridge import bridge
from chatkeep.app import Chatkeep
from chatkeep.errors import InvalidArgument
from chatkeep.llm.adapt import is_async_client
from chatkeep.llm.base import ChatModel, Completion
from chatkeep.sessions import ChatSession
from support.postgres import with_driver

__all__ = ["API_AXIS", "LoopThread", "SyncOverAsync", "async_twin_of", "open_on_axis"]


class LoopThread:
    """One event loop in a daemon thread; ``run`` a coroutine on it from any thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                        name="chatkeep-test-loop")
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the loop and return its result (or raise its error)."""
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise InvalidArgument("a sync call from inside the event loop would deadlock: this "
                               "test reaches below the public API (mark it sync_api)")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=120)

    def close(self) -> None:
        """End the loop as ``asyncio.run`` does (its async generators shut down), then stop
        it and its thread."""
        asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop).result(
            timeout=120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


class _BlockingAsyncModel:
    """A scripted sync ``ChatModel`` a test passed, offered to the async API (tests only:
    it blocks the loop while it answers, which a scripted model does not notice)."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model

    async def complete(self, messages: Sequence[dict[str, Any]], *, model: str,
                       max_tokens: int | None = None, temperature: float | None = None,
                       json_mode: bool = False) -> Completion:
        return self.model.complete(messages, model=model, max_tokens=max_tokens,
                                   temperature=temperature, json_mode=json_mode)


def async_twin_of(model: Any) -> Any:
    """The async counterpart of a model a sync test passes."""
    if model is None or is_async_client(model):
        return model
    if isinstance(model, openai.OpenAI):
        return openai.AsyncOpenAI(base_url=str(model.base_url), api_key=model.api_key,
                                  max_retries=model.max_retries, timeout=model.timeout)
    return _BlockingAsyncModel(model)


class _Bridged:
    """A core object reached through the bridge: its methods run on the loop."""

    def __init__(self, runner: SyncOverAsync, target: Any) -> None:
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if _is_service(value):
            return _Bridged(self._runner, value)
        if not inspect.ismethod(value):  # values, and plain functions such as a clock
            return self._runner.wrap(value)
        runner = self._runner

        def call(*args: Any, **kwargs: Any) -> Any:
            args, kwargs = runner.unwrap(args), runner.unwrap(kwargs)
            return runner.wrap(runner.loop.run(bridge(value, *args, **kwargs)))

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)


def _is_service(value: Any) -> bool:
    """A chatkeep object that does I/O (a repository, a store), not a value."""
    cls = type(value)
    return (cls.__module__.startswith("chatkeep.") and not dataclasses.is_dataclass(value)
            and not isinstance(value, type) and not callable(value)
            and any(callable(getattr(cls, n, None)) for n in vars(cls) if not n.startswith("_")))


class _SyncFacade:
    """An async twin's coroutine methods as plain calls; anything the twin lacks is the
    core object's, through the bridge."""

    def __init__(self, runner: SyncOverAsync, twin: Any, core: Any) -> None:
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_twin", twin)
        object.__setattr__(self, "_core", core)

    def __getattr__(self, name: str) -> Any:
        twin_value = getattr(self._twin, name, None)
        if twin_value is not None and asyncio.iscoroutinefunction(twin_value):
            runner = self._runner

            def call(*args: Any, **kwargs: Any) -> Any:
                args, kwargs = runner.unwrap(args), runner.unwrap(kwargs)
                return runner.wrap(runner.loop.run(twin_value(*args, **kwargs)))

            return call
        return getattr(_Bridged(self._runner, self._core), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._core, name, value)


class _SyncSession(_SyncFacade):
    """A session with the sync API's I/O properties (``messages``, the switch setter)."""

    @property
    def messages(self) -> Any:
        return self.read_messages()

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "anonymize_pii":
            self.set_anonymize_pii(value)
        else:
            super().__setattr__(name, value)

    def __repr__(self) -> str:
        return repr(self._twin)


class SyncOverAsync:
    """``Chatkeep``'s sync API over an ``AsyncChatkeep`` (see the module docstring)."""

    def __init__(self, database_url: str, *, loop: LoopThread | None = None,
                 **kwargs: Any) -> None:
        self.loop = loop or LoopThread()
        self._owns_loop = loop is None
        kwargs["model"] = async_twin_of(kwargs.get("model"))
        self.twin = AsyncChatkeep(database_url, **kwargs)
        self.core = self.loop.run(self.twin.core())
        self.sessions = _SyncFacade(self, self.twin.sessions, self.core.sessions)
        self.compressor = _SyncFacade(self, self.twin.compressor, self.core.compressor)
        self.memory = _SyncFacade(self, self.twin.memory, self.core.memory)
        self.privacy = _SyncFacade(self, self.twin.privacy, self.core.privacy)

    def __getattr__(self, name: str) -> Any:
        twin_value = getattr(self.twin, name, None)
        if twin_value is not None and asyncio.iscoroutinefunction(twin_value):
            return lambda *a, **k: self.wrap(self.loop.run(twin_value(*self.unwrap(a),
                                                                      **self.unwrap(k))))
        return getattr(_Bridged(self, self.core), name)

    def wrap(self, value: Any) -> Any:
        """Async-API results as the sync API's: sessions become sync sessions."""
        if isinstance(value, AsyncChatSession):
            return _SyncSession(self, value, value.core)
        if isinstance(value, ChatSession):
            return self.wrap(AsyncChatSession(value, self.twin._bridge))
        sessions = (AsyncChatSession, ChatSession)
        if type(value) is list and any(isinstance(v, sessions) for v in value):
            return [self.wrap(v) for v in value]
        if type(value) is tuple and any(isinstance(v, sessions) for v in value):
            return tuple(self.wrap(v) for v in value)
        return value

    def unwrap(self, value: Any) -> Any:
        """Sync-API arguments as the async API's: sync sessions become async ones."""
        if isinstance(value, _SyncSession):
            return value._twin
        if isinstance(value, dict):
            return {k: self.unwrap(v) for k, v in value.items()}
        if isinstance(value, tuple):
            return tuple(self.unwrap(v) for v in value)
        if isinstance(value, list):
            return [self.unwrap(v) for v in value]
        return value

    def close(self) -> None:
        """Close the async keep (draining its jobs) and the loop if this runner made it."""
        self.loop.run(self.twin.close())
        if self._owns_loop:
            self.loop.close()

    def __enter__(self) -> SyncOverAsync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


API_AXIS = ("sync", "async", "async_psycopg")
"""The test suite's ``api`` axis: the sync API, the async API on its default drivers
(aiosqlite, asyncpg), and the async API on psycopg's async connection (PostgreSQL only)."""

_AXIS_DRIVERS = {"async": "asyncpg", "async_psycopg": "psycopg"}


def open_on_axis(database_url: str, api: str, **kwargs: Any) -> Any:
    """A ``Chatkeep`` for ``api="sync"``, else a :class:`SyncOverAsync` whose PostgreSQL
    URL names the axis' async driver."""
    if api not in API_AXIS:
        raise InvalidArgument(f"api must be one of {API_AXIS}, got {api!r}")
    if api == "sync":
        return Chatkeep(database_url, **kwargs)
    if database_url.startswith("postgresql"):
        database_url = with_driver(database_url, _AXIS_DRIVERS[api])
    elif api == "async_psycopg":
        raise InvalidArgument("the async_psycopg axis is PostgreSQL's")
    return SyncOverAsync(database_url, **kwargs)
