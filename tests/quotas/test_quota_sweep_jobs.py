"""The reservation sweep on a schedule (issue 33): Celery beat's ``chatkeep.quota_sweep``
task ends the reservations whose lease ended, once, however often it runs; without Celery
the keep's dispatcher (inline, thread pool) runs it as the ``quota_sweep`` job."""

from __future__ import annotations

from datetime import timedelta

import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.store.rows import utcnow

ORG = Ref("organization", 1)


def test_the_celery_beat_runs_the_reservation_sweep(db_url: str) -> None:
    pytest.importorskip("celery", reason="the celery extra")
    from chatkeep.jobs import celery as jobs

    keep = Chatkeep(db_url, config={"quotas": {"lease": 60}})
    try:
        keep.quotas.set(ORG, tokens=1000, window="30d")
        keep.quotas.reserve(ORG, 300)  # never settled: its worker died mid-call
        app = jobs.make_app("memory://", task_always_eager=True)
        entry = app.conf.beat_schedule["chatkeep-quota-sweep"]
        assert (entry["task"], entry["schedule"]) == (jobs.QUOTA_SWEEP, 60.0)
        assert "chatkeep-quota-sweep" not in jobs.make_app(
            "memory://", quota_sweep_every=None).conf.beat_schedule
        jobs.configure(lambda: keep)
        try:
            assert app.tasks[jobs.QUOTA_SWEEP].apply().get() == 0  # the lease runs
            quota = keep.quotas.get(ORG)
            assert quota is not None and (quota.spent, quota.reserved) == (0, 300)
            later = utcnow() + timedelta(seconds=61)
            keep.quotas.clock = lambda: later
            assert app.tasks[jobs.QUOTA_SWEEP].apply().get() == 1
            quota = keep.quotas.get(ORG)
            assert quota is not None and (quota.spent, quota.reserved) == (300, 0)
            assert app.tasks[jobs.QUOTA_SWEEP].apply().get() == 0  # each ended once
        finally:
            jobs.configure(jobs._default_keep)
    finally:
        keep.close()


@pytest.mark.parametrize("dispatcher", ["inline", "thread"])
def test_the_keeps_dispatcher_runs_the_reservation_sweep(db_url: str,
                                                         dispatcher: str) -> None:
    from chatkeep.jobs import ThreadPoolDispatcher
    from chatkeep.quotas.service import SWEEP_JOB

    keep = Chatkeep(db_url, dispatcher=dispatcher, config={"quotas": {"lease": 60,
                                                                       "count_expired": False}})
    try:
        keep.quotas.set(ORG, tokens=1000, window="30d")
        keep.quotas.reserve(ORG, 300)
        later = utcnow() + timedelta(seconds=61)
        keep.quotas.clock = lambda: later
        assert SWEEP_JOB in keep.job_handlers()
        keep.dispatcher.dispatch(SWEEP_JOB, "")
        if isinstance(keep.dispatcher, ThreadPoolDispatcher):
            keep.dispatcher.wait(timeout=30)
        quota = keep.quotas.get(ORG)
        assert quota is not None and (quota.spent, quota.reserved) == (0, 0)  # released
        assert keep.quotas.store.reservations(ORG) == []
    finally:
        keep.close()
