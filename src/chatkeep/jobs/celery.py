"""Celery integration (``pip install "chatkeep[celery]"``): durable background jobs.

Tasks carry only a job name and a session id. They run late-acknowledged: a
worker killed mid-job leaves the message unacknowledged, the broker hands it to
another worker, and because the distiller moves its watermark in the same
transaction as its writes, the retry starts from where the database says.

Run a worker and the sweep schedule::

    CHATKEEP_DATABASE_URL=postgresql+psycopg://... \\
    CHATKEEP_CELERY_BROKER=redis://127.0.0.1:6379/0 \\
    celery -A chatkeep.jobs.celery worker -Q chatkeep --beat --loglevel=INFO

(``--beat`` embeds the scheduler; in production run ``celery -A chatkeep.jobs.celery
beat`` once, separately.) In the web process, dispatch through the same app::

    from chatkeep.jobs.celery import CeleryDispatcher, app
    keep = Chatkeep(url, dispatcher=CeleryDispatcher(app))
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from celery import Celery, Task

from chatkeep.errors import ConfigError, UnknownJob
from chatkeep.jobs import JobHandler

if TYPE_CHECKING:
    from chatkeep.app import Chatkeep

log = logging.getLogger("chatkeep.jobs.celery")

RUN_JOB = "chatkeep.run_job"
SWEEP = "chatkeep.sweep"
RETENTION = "chatkeep.retention_sweep"
QUOTA_SWEEP = "chatkeep.quota_sweep"
DEFAULT_BROKER = "redis://127.0.0.1:6379/0"

KeepFactory = Callable[[], "Chatkeep"]


def sweep_schedule(every: timedelta = timedelta(minutes=1)) -> dict[str, Any]:
    """A ``beat_schedule`` entry that runs the memory sweep every ``every``."""
    return {"chatkeep-memory-sweep": {"task": SWEEP, "schedule": every.total_seconds()}}


def retention_schedule(every: timedelta = timedelta(hours=1)) -> dict[str, Any]:
    """A ``beat_schedule`` entry that runs the retention sweep (``keep.retention.sweep``)
    every ``every``; concurrent runs do no double work."""
    return {"chatkeep-retention-sweep": {"task": RETENTION,
                                         "schedule": every.total_seconds()}}


def quota_sweep_schedule(every: timedelta = timedelta(minutes=1)) -> dict[str, Any]:
    """A ``beat_schedule`` entry that runs the reservation sweep (``keep.quotas.sweep``:
    the reservations whose lease ended, counted or released) every ``every``; concurrent
    runs end each reservation once."""
    return {"chatkeep-quota-sweep": {"task": QUOTA_SWEEP, "schedule": every.total_seconds()}}


class CeleryDispatcher:
    """A ``Dispatcher`` that enqueues ``chatkeep.run_job`` on a Celery app."""

    def __init__(self, celery_app: Celery) -> None:
        self.app = celery_app
        self.handlers: dict[str, JobHandler] = {}

    def bind(self, handlers: Mapping[str, JobHandler]) -> None:
        """Remember the job names so an unknown one fails in the caller, not the worker."""
        self.handlers = dict(handlers)

    def dispatch(self, job: str, session_id: str) -> None:
        """Send ``chatkeep.run_job(job, session_id)`` to the broker."""
        if self.handlers and job not in self.handlers:
            raise UnknownJob(f"no handler for job {job!r} (known: {sorted(self.handlers)})")
        self.app.send_task(RUN_JOB, args=[job, session_id])


def _default_keep() -> Chatkeep:
    from chatkeep.app import Chatkeep

    url = os.environ.get("CHATKEEP_DATABASE_URL")
    if not url:
        raise ConfigError("set CHATKEEP_DATABASE_URL for the chatkeep Celery worker")
    return Chatkeep(url, dispatcher=CeleryDispatcher(app), create_schema=False)


_keep: Chatkeep | None = None
_factory: KeepFactory = _default_keep


def configure(factory: KeepFactory) -> None:
    """Tell workers how to build their ``Chatkeep`` (model, config) instead of the env."""
    global _factory, _keep
    _factory = factory
    _keep = None


def worker_keep() -> Chatkeep:
    """The worker process's ``Chatkeep`` (built once per process, after fork). Alembic's
    INFO lines (its plugins, the migration context) stay out of the worker's log unless
    the ``alembic`` logger was given a level of its own."""
    global _keep
    if _keep is None:
        alembic_log = logging.getLogger("alembic")
        if alembic_log.level == logging.NOTSET:
            alembic_log.setLevel(logging.WARNING)
        _keep = _factory()
    return _keep


def _run_job(task: Task, job: str, session_id: str) -> Any:
    """Run one job; a failure is retried with exponential backoff (up to 5 minutes)."""
    handlers = worker_keep().job_handlers()
    if job not in handlers:
        raise UnknownJob(f"no handler for job {job!r}")
    try:
        return handlers[job](session_id)
    except Exception as exc:
        delay = min(300, 2 ** task.request.retries)
        log.warning("job %s for %s failed (%s); retry in %ss", job, session_id, exc, delay)
        raise task.retry(exc=exc, countdown=delay) from exc


def _sweep() -> int:
    """Dispatch distil jobs for idle sessions with undistilled messages."""
    memory = getattr(worker_keep(), "memory", None)
    return 0 if memory is None else len(memory.sweep())


def _retention_sweep() -> int:
    """Delete what the tenants' retention policies say is past retention; how many
    sessions went."""
    retention = getattr(worker_keep(), "retention", None)
    return 0 if retention is None else int(retention.sweep().sessions)


def _quota_sweep() -> int:
    """End the quota reservations whose lease ended (a worker killed mid-call); how many
    it ended."""
    quotas = getattr(worker_keep(), "quotas", None)
    return 0 if quotas is None else int(quotas.sweep())


def install_tasks(celery_app: Celery, *, max_retries: int = 8) -> None:
    """Register chatkeep's tasks on ``celery_app`` with late acks and retries."""
    celery_app.task(name=RUN_JOB, bind=True, acks_late=True, reject_on_worker_lost=True,
                    max_retries=max_retries)(_run_job)
    celery_app.task(name=SWEEP, acks_late=True)(_sweep)
    celery_app.task(name=RETENTION, acks_late=True)(_retention_sweep)
    celery_app.task(name=QUOTA_SWEEP, acks_late=True)(_quota_sweep)


def make_app(broker: str | None = None, *, name: str = "chatkeep",
             sweep_every: timedelta | None = timedelta(minutes=1),
             retention_every: timedelta | None = timedelta(hours=1),
             quota_sweep_every: timedelta | None = timedelta(minutes=1),
             **conf: Any) -> Celery:
    """A Celery app with chatkeep's tasks on queue ``CHATKEEP_CELERY_QUEUE`` (default
    ``chatkeep``), late acks, one prefetched job per worker process, and (by default)
    the memory sweep, the retention sweep and the quota reservation sweep on the beat
    schedule (``None`` leaves one out). ``conf`` overrides any Celery setting."""
    celery_app = Celery(name, broker=broker or os.environ.get("CHATKEEP_CELERY_BROKER",
                                                               DEFAULT_BROKER))
    settings: dict[str, Any] = {
        "task_default_queue": os.environ.get("CHATKEEP_CELERY_QUEUE", "chatkeep"),
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "broker_connection_retry_on_startup": True,
        "beat_schedule": {**(sweep_schedule(sweep_every) if sweep_every else {}),
                          **(retention_schedule(retention_every) if retention_every
                             else {}),
                          **(quota_sweep_schedule(quota_sweep_every) if quota_sweep_every
                             else {})},
    }
    visibility = os.environ.get("CHATKEEP_CELERY_VISIBILITY_TIMEOUT")
    if visibility:
        # Redis only: how long a job held by a dead worker waits before another worker
        # gets it (Celery's default is an hour; keep it longer than the longest job), and
        # a restore sweep frequent enough to notice (kombu's default is ~100 s).
        seconds = int(visibility)
        settings["broker_transport_options"] = {
            "visibility_timeout": seconds,
            "unacked_restore_interval": max(1, seconds // 2),
            "unacked_restore_throttle": 1,
        }
    celery_app.conf.update({**settings, **conf})
    install_tasks(celery_app)
    return celery_app


app = make_app()
