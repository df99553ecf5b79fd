"""Background jobs on the event loop: the async API's default dispatcher."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from chatkeep.aio.bridge import bridge
from chatkeep.jobs import _Bound

log = logging.getLogger("chatkeep.jobs")


class TaskDispatcher(_Bound):
    """Runs each job as an ``asyncio`` task on the running loop (through the bridge), so
    the turn that triggered it returns first; ``await keep.close()`` waits for them, and
    so does the end of the loop (``asyncio.run`` cancels its tasks first).

    Like the thread pool, jobs die with the process; the memory sweep picks up whatever
    was not distilled, and Celery is the durable choice.
    """

    def __init__(self) -> None:
        super().__init__()
        self._tasks: set[asyncio.Task[Any]] = set()

    def dispatch(self, job: str, session_id: str) -> None:
        """Start the job as a task; an unknown job name raises here, in the caller."""
        self._handler(job)
        task = asyncio.get_running_loop().create_task(bridge(self._run, job, session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, *, here_only: bool = False) -> None:
        """Wait for every job dispatched so far (and any they dispatch): on this loop, and
        unless ``here_only`` on every other loop still running (each waited for on its
        own). Jobs on a loop that is not running cannot finish now."""
        here = asyncio.get_running_loop()
        while True:
            waits: list[asyncio.Future[Any]] = []
            for loop, tasks in _by_loop(list(self._tasks)).items():
                if loop is here:
                    waits.append(asyncio.gather(*tasks, return_exceptions=True))
                elif not here_only and loop.is_running():
                    waits.append(asyncio.wrap_future(
                        asyncio.run_coroutine_threadsafe(_gather(tasks), loop)))
            if not waits:
                return
            await asyncio.gather(*waits)


def _by_loop(tasks: Iterable[asyncio.Task[Any]],
             ) -> dict[asyncio.AbstractEventLoop, list[asyncio.Task[Any]]]:
    grouped: dict[asyncio.AbstractEventLoop, list[asyncio.Task[Any]]] = {}
    for task in tasks:
        if not task.done():
            grouped.setdefault(task.get_loop(), []).append(task)
    return grouped


async def _gather(tasks: list[asyncio.Task[Any]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)
