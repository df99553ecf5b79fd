"""Background work: the ``Dispatcher`` protocol and the in-process dispatchers.

A job is a name (``"distil"``) and a session id, nothing else: the worker reads
the tenant and everything it needs from the database, so a job can cross a
process boundary (Celery: ``chatkeep.jobs_celery``) unchanged.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from chatkeep.errors import ConfigError, UnknownJob

log = logging.getLogger("chatkeep.jobs")

JobHandler = Callable[[str], Any]


@runtime_checkable
class Dispatcher(Protocol):
    """Runs ``job`` for ``session_id`` now or later; must not raise for the job's failure."""

    def bind(self, handlers: Mapping[str, JobHandler]) -> None:
        """Receive the handlers of the ``Chatkeep`` instance that owns this dispatcher."""
        ...

    def dispatch(self, job: str, session_id: str) -> None:
        """Run or enqueue one job."""
        ...


class _Bound:
    def __init__(self) -> None:
        self.handlers: dict[str, JobHandler] = {}

    def bind(self, handlers: Mapping[str, JobHandler]) -> None:
        self.handlers = dict(handlers)

    def _handler(self, job: str) -> JobHandler:
        try:
            return self.handlers[job]
        except KeyError:
            raise UnknownJob(f"no handler for job {job!r} (known: {sorted(self.handlers)})") \
                from None

    def _run(self, job: str, session_id: str) -> Any:
        try:
            return self._handler(job)(session_id)
        except Exception:
            log.exception("job %s for session %s failed", job, session_id)
            return None


class InlineDispatcher(_Bound):
    """Runs the job in the caller's thread, right away (tests, scripts, the CLI)."""

    def dispatch(self, job: str, session_id: str) -> None:
        """Run the job now; its failure is logged, an unknown job name raises."""
        self._handler(job)  # an unknown job is a programming error: raise it
        self._run(job, session_id)


class ThreadPoolDispatcher(_Bound):
    """Runs jobs on a small thread pool so the request that triggered them returns first.

    Jobs are lost if the process dies before they finish; the memory sweep picks up
    whatever was not distilled, and Celery is the durable choice.
    """

    def __init__(self, max_workers: int = 2) -> None:
        super().__init__()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="chatkeep")
        self._pending: set[Future[Any]] = set()
        self._lock = threading.Lock()

    def dispatch(self, job: str, session_id: str) -> None:
        """Queue the job on the pool; an unknown job name raises here, in the caller."""
        self._handler(job)
        future = self._pool.submit(self._run, job, session_id)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._forget)

    def _forget(self, future: Future[Any]) -> None:
        with self._lock:
            self._pending.discard(future)

    def wait(self, timeout: float | None = None) -> None:
        """Block until every job dispatched so far has finished."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.result(timeout=timeout)

    def shutdown(self, wait: bool = True) -> None:
        """Stop the pool (after running what is queued, with ``wait``)."""
        self._pool.shutdown(wait=wait)


def make_dispatcher(kind: str | Dispatcher | None) -> Dispatcher:
    """``"thread"`` (the default: the caller's turn never waits for memory work),
    ``"inline"`` (tests and scripts), or a ready ``Dispatcher`` (Celery)."""
    if kind is None or kind == "thread":
        return ThreadPoolDispatcher()
    if kind == "inline":
        return InlineDispatcher()
    if isinstance(kind, Dispatcher):
        return kind
    raise ConfigError(f"unknown dispatcher {kind!r} (use 'thread', 'inline' or a Dispatcher)")
