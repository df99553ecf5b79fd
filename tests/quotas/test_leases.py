"""A reservation that is never settled (a worker killed mid-call with SIGKILL) keeps
counting at its reserved amount, so the tenant is never over-spent; when its lease ends
the sweep counts it as spent (``quotas.count_expired``, the default) or releases it, once,
however often it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import timedelta

import pytest

from chatkeep import Chatkeep, QuotaExceeded, Ref
from chatkeep.store.rows import utcnow

ORG = Ref("organization", 1)
LEASE = 60

WORKER = f"LEASE = {LEASE}\n" + textwrap.dedent("""
    import sys, time
    from chatkeep import Chatkeep, Ref
    keep = Chatkeep(sys.argv[1], config={"quotas": {"lease": LEASE}})
    session = keep.sessions.get(sys.argv[2], Ref("organization", 1))
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=400)
    print(history.info.tokens + 400, flush=True)
    time.sleep(600)  # "mid-call": killed here
""")


def _killed_worker(db_url: str, session_id: str) -> int:
    """Run a worker that reserves a turn and is killed with SIGKILL before the answer;
    returns what it reserved."""
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = {**os.environ, "PYTHONPATH": os.path.abspath(src)}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, db_url, session_id],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert worker.stdout is not None
        reserved = int(worker.stdout.readline())
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    assert worker.returncode == -signal.SIGKILL
    return reserved


@pytest.mark.parametrize("count_expired", [True, False])
def test_a_killed_workers_reservation_counts_until_its_lease_ends(
        db_url: str, count_expired: bool) -> None:
    keep = Chatkeep(db_url, config={"quotas": {"lease": LEASE,
                                               "count_expired": count_expired}})
    try:
        keep.quotas.set(ORG, tokens=1000, window="30d")
        session = keep.sessions.create(ORG)
        session.add_user("Where is my parcel?")
        reserved = _killed_worker(db_url, session.id)
        quota = keep.quotas.get(ORG)
        assert quota is not None and (quota.spent, quota.reserved) == (0, reserved)
        with pytest.raises(QuotaExceeded):  # the held tokens still count
            keep.quotas.reserve(ORG, 1000 - reserved + 1)
        assert keep.quotas.sweep() == 0  # the lease has not ended yet

        later = utcnow() + timedelta(seconds=LEASE + 5)
        assert keep.quotas.sweep(later) == 1
        assert keep.quotas.sweep(later) == 0  # once
        quota = keep.quotas.get(ORG)
        assert quota is not None and quota.reserved == 0
        assert quota.spent == (reserved if count_expired else 0)
    finally:
        keep.close()


def test_a_settle_after_the_sweep_counts_nothing_twice(db_url: str) -> None:
    keep = Chatkeep(db_url, config={"quotas": {"lease": LEASE}})
    try:
        keep.quotas.set(ORG, tokens=1000, window="30d")
        held = keep.quotas.reserve(ORG, 300)
        assert keep.quotas.sweep(utcnow() + timedelta(seconds=LEASE + 1)) == 1
        assert held.settle(120) is False  # the sweep counted it at 300 already
        quota = keep.quotas.get(ORG)
        assert quota is not None and (quota.spent, quota.reserved) == (300, 0)
    finally:
        keep.close()
