"""The sweep: idle sessions with undistilled messages, bounded, leased, cron-safe."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta

import openai
from memory_helpers import ALICE, ORG, Player, contents, talk

from chatkeep import Chatkeep


def later(keep: Chatkeep, delta: timedelta) -> None:
    """Move the memory store's clock (the sweep's notion of now) forward."""
    base = keep.memory.store.clock
    keep.memory.store.clock = lambda: base() + delta


def test_sweep_distils_idle_sessions_that_never_compressed(mkeep: Chatkeep,
                                                          player: Player) -> None:
    quiet = mkeep.sessions.create(ORG, ALICE)
    talk(quiet, "We always quote in EUR.", "Noted.")
    done = mkeep.sessions.create(ORG, ALICE)
    talk(done, "hello", "hi")
    mkeep.memory.distil(done.id)
    empty = mkeep.sessions.create(ORG, ALICE)
    assert mkeep.memory.sweep() == []  # nobody idle for 30 minutes yet
    player.will_extract(("tenant", "Quotes are in EUR."))
    later(mkeep, timedelta(minutes=31))
    assert mkeep.memory.sweep() == [quiet.id]
    assert contents(mkeep.memory.list(ORG)) == ["Quotes are in EUR."]
    assert quiet.refresh().row.distilled_through == 2
    assert mkeep.memory.store.leases.lease_of(quiet.id) is None  # released after success
    assert mkeep.memory.sweep() == []  # nothing left: safe to run every minute
    assert empty.id not in mkeep.memory.sweep(idle_after=timedelta(0))


def test_sweep_is_bounded_and_oldest_first(mkeep: Chatkeep, player: Player) -> None:
    sessions = []
    for i in range(5):
        s = mkeep.sessions.create(ORG, ALICE)
        talk(s, f"fact {i}", "ok")
        sessions.append(s)
    first = mkeep.memory.sweep(idle_after=timedelta(0), batch_size=2)
    assert first == [sessions[0].id, sessions[1].id]
    assert mkeep.memory.sweep(idle_after=timedelta(0), batch_size=10) == [
        s.id for s in sessions[2:]]


def test_a_claimed_session_is_not_dispatched_again_until_its_lease_expires(
        mkeep: Chatkeep, player: Player) -> None:
    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "Quotes are in EUR.", "ok")
    assert mkeep.memory.claim_idle(idle_after=timedelta(0)) == [s.id]  # job lost in transit
    assert mkeep.memory.claim_idle(idle_after=timedelta(0)) == []
    assert mkeep.memory.sweep(idle_after=timedelta(0)) == []
    later(mkeep, timedelta(minutes=11))
    assert mkeep.memory.sweep(idle_after=timedelta(0)) == [s.id]
    assert s.refresh().row.distilled_through == 2


def test_a_failing_session_backs_off_for_a_lease(mkeep: Chatkeep, player: Player) -> None:
    from chatkeep.testing import Reply

    s = mkeep.sessions.create(ORG, ALICE)
    talk(s, "Quotes are in EUR.", "ok")
    player.raw_extraction.append(Reply.ok("garbage"))
    assert mkeep.memory.sweep(idle_after=timedelta(0)) == [s.id]  # runs inline, fails
    assert s.refresh().row.distilled_through == 0
    assert mkeep.memory.sweep(idle_after=timedelta(0)) == []  # not retried every minute
    later(mkeep, timedelta(minutes=11))
    assert mkeep.memory.sweep(idle_after=timedelta(0)) == [s.id]
    assert s.refresh().row.distilled_through == 2


def test_concurrent_sweeps_claim_each_session_once(
        make_keep: Callable[..., Chatkeep], openai_client: openai.OpenAI,
        player: Player) -> None:
    keeps = [make_keep(model=openai_client) for _ in range(4)]
    ids = []
    for i in range(12):
        s = keeps[0].sessions.create(ORG, ALICE)
        talk(s, f"fact {i}", "ok")
        ids.append(s.id)
    claimed: list[list[str]] = []
    start = threading.Barrier(len(keeps))

    def run(keep: Chatkeep) -> None:
        start.wait()
        claimed.append(keep.memory.claim_idle(idle_after=timedelta(0)))

    threads = [threading.Thread(target=run, args=(k,)) for k in keeps]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    flat = [sid for batch in claimed for sid in batch]
    assert sorted(flat) == sorted(ids)  # every session once, none twice


def test_sweep_uses_the_configured_defaults(make_keep: Callable[..., Chatkeep],
                                            openai_client: openai.OpenAI,
                                            player: Player) -> None:
    keep = make_keep(model=openai_client,
                     config={"memory": {"sweep_idle_after": "0", "sweep_batch_size": 1}})
    for _ in range(2):
        talk(keep.sessions.create(ORG, ALICE), "x", "y")
    assert len(keep.memory.sweep()) == 1
