"""Background jobs on the event loop: the async API's default dispatcher."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from chatkeep.aio.bridge import bridge
from chatkeep.jobs import _Bound

log = logging.getLogger("chatkeep.jobs")


class TaskDispatcher(_Bound):
    """Runs each job as an ``asyncio`` task on the running loop (through the bridge), so
    the turn that triggered it returns first; ``await keep.close()`` waits for them.

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

    async def drain(self) -> None:
        """Wait for every job dispatched so far (and any they dispatch)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
