"""One connection pool per event loop, under one async engine.

An async driver's connection belongs to the loop that opened it (asyncpg's protocol, the
pool's own ``asyncio`` queue), so a keep used from several loops (threads each running
its own, ``asyncio.run`` called again, the Agents SDK's ``run_sync``) must never hand one
loop's connection to another. The engine (its dialect, listeners, statement cache, and
the sync core built over it) stays one; its pool, :class:`LoopPools`, keeps an
``AsyncAdaptedQueuePool`` per running loop, made on the loop's first checkout with the
same settings and listeners (as ``Engine.dispose`` remakes a pool).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import AsyncAdaptedQueuePool, ConnectionPoolEntry, Pool
from sqlalchemy.util import greenlet_spawn

__all__ = ["LoopPools", "dispose_all", "dispose_loop"]


class LoopPools(AsyncAdaptedQueuePool):
    """The async engine's pool: each checkout is served by the running loop's own pool.
    This pool's own queue stays empty; its settings and listeners are the template."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                               AsyncAdaptedQueuePool] = \
            weakref.WeakKeyDictionary()
        self._guard = threading.Lock()

    def current(self) -> AsyncAdaptedQueuePool:
        """The running loop's pool (made on its first checkout)."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            with self._guard:
                pool = self._pools.get(loop)
                if pool is None:
                    pool = self._pools[loop] = AsyncAdaptedQueuePool(
                        self._creator, pool_size=self._pool.maxsize,
                        max_overflow=self._max_overflow, timeout=self._timeout,
                        use_lifo=self._pool.use_lifo, pre_ping=self._pre_ping,
                        recycle=self._recycle, echo=self.echo,
                        logging_name=self._orig_logging_name,
                        reset_on_return=self._reset_on_return, _dispatch=self.dispatch,
                        dialect=self._dialect)
        return pool

    def pools(self) -> dict[asyncio.AbstractEventLoop, AsyncAdaptedQueuePool]:
        """Each loop's pool, as of now."""
        with self._guard:
            return dict(self._pools)

    def forget(self, loop: asyncio.AbstractEventLoop) -> AsyncAdaptedQueuePool | None:
        """Stop serving ``loop``; returns its pool (for the caller to dispose on it)."""
        with self._guard:
            return self._pools.pop(loop, None)

    def _do_get(self) -> ConnectionPoolEntry:
        return self.current()._do_get()

    def _do_return_conn(self, record: ConnectionPoolEntry) -> None:
        # Connections go back to the loop's pool that made them; only a detached one comes
        # back through here.
        _owner(record, self)._do_return_conn(record)

    def _invalidate(self, connection: Any, exception: BaseException | None = None,
                    _checkin: bool = True) -> None:
        owner = _owner(getattr(connection, "_connection_record", None), self)
        owner._invalidate(connection, exception, _checkin)

    def dispose(self) -> None:
        """Close this loop's idle connections here and a running loop's on it (what
        ``Engine.dispose`` runs, in the bridge, before it replaces this pool); the pools
        of loops not running are dropped."""
        current = _running_loop()
        with self._guard:
            pools = list(self._pools.items())
            self._pools.clear()
        for loop, pool in pools:
            if loop is current:
                pool.dispose()
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(greenlet_spawn(pool.dispose), loop)

    def status(self) -> str:
        """Each loop's pool's status."""
        return "; ".join(pool.status() for pool in self.pools().values()) or "no loop yet"

    def checkedin(self) -> int:
        """Idle connections, over every loop's pool."""
        return sum(pool.checkedin() for pool in self.pools().values())

    def checkedout(self) -> int:
        """Connections in use, over every loop's pool."""
        return sum(pool.checkedout() for pool in self.pools().values())

    def overflow(self) -> int:
        """Connections past ``pool_size``, over every loop's pool."""
        return sum(pool.overflow() for pool in self.pools().values())


def _owner(record: Any, pools: LoopPools) -> Pool:
    owner = getattr(record, "_ConnectionRecord__pool", None)
    return owner if isinstance(owner, Pool) and owner is not pools else pools.current()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


async def dispose_loop(engine: AsyncEngine) -> None:
    """Close ``engine``'s idle connections of the running loop, and forget its pool."""
    pools = engine.sync_engine.pool
    if isinstance(pools, LoopPools):
        pool = pools.forget(asyncio.get_running_loop())
        if pool is not None:
            await greenlet_spawn(pool.dispose)


async def dispose_all(engine: AsyncEngine) -> None:
    """Close every loop's idle connections of ``engine``, each on its own loop: this one
    here, a running one on it (awaited). An idle loop's pool is left for that loop (the
    keep releases it when the loop ends); a closed loop can close nothing, so its pool is
    only dropped. (An engine with another pool: ``engine.dispose()``.)"""
    pools = engine.sync_engine.pool
    if not isinstance(pools, LoopPools):
        await engine.dispose()
        return
    current = asyncio.get_running_loop()
    for loop in pools.pools():
        if loop is current:
            pool = pools.forget(loop)
            if pool is not None:
                await greenlet_spawn(pool.dispose)
        elif loop.is_running():
            pool = pools.forget(loop)
            if pool is not None:
                await asyncio.wrap_future(
                    asyncio.run_coroutine_threadsafe(greenlet_spawn(pool.dispose), loop))
        elif loop.is_closed():
            pools.forget(loop)
