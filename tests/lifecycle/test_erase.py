"""Erasing an actor, a subject or a tenant: nothing of the scope left in any surface, in
the SQLite file's bytes (WAL and shm included) or a fresh pg_dump; everyone else's
canaries still on disk and still served; a receipt that verifies, a tampered one that does
not, and a second erasure that reports zero."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lifecycle_helpers import ANN, BOB, CASE, T1, T2, World, label, on_disk, plant, usage_totals

from chatkeep import Chatkeep, SessionNotFound
from chatkeep.lifecycle import ErasureReceipt


def other_canaries(world: World, gone: list[str]) -> list[str]:
    everything = world.of(T1) + world.of(T2) + list(world.memories.values())
    return [c for c in everything if all(c not in g and g not in c for g in gone)]


def memory_tokens(world: World, *names: str) -> list[str]:
    return [world.memories[n].split()[-1] for n in names]


@pytest.mark.pgbouncer
def test_erasing_an_actor_leaves_nothing_of_them_and_everyone_else_served(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    world = plant(db_url)
    keep = make_keep()
    theirs = world.of(T1, ANN) + memory_tokens(world, f"personal {T1} {ANN}", f"valued {T1}")
    assert on_disk(db_url, theirs) == theirs  # planted where the scans look
    others = [c for c in world.of(T1, BOB) + world.of(T2)] + memory_tokens(
        world, f"personal {T1} {BOB}", f"plain {T1}", f"subject {T1}", f"tenant {T1}",
        f"personal {T2} {ANN}", f"valued {T2}")
    bill = usage_totals(db_url)
    plan = keep.plan_erasure(T1, actor=ANN)
    assert plan.counts()["sessions"] == 2 and plan.counts()["messages"] == 10

    receipt = keep.erase(T1, actor=ANN, by="dpo@example.org")

    assert receipt.counts["sessions"] == 2 and receipt.counts["messages"] == 10
    assert receipt.counts["memories"] == 2 and receipt.counts["memories_unlinked"] == 1
    assert receipt.counts["summaries"] == receipt.counts["vaults"] == 2
    assert receipt.counts["folds"] == receipt.counts["tool_calls"] == 2
    assert receipt.counts["usage_unlinked"] == 2
    assert receipt.counts["vectors"] in (0, 2) and (
        receipt.counts["vectors"] == 2 or not db_url.startswith("sqlite"))
    assert sorted(receipt.session_ids) == sorted(
        [world.sessions[label(T1, ANN, None)], world.sessions[label(T1, ANN, CASE)]])
    assert receipt.memory_ids == sorted(
        [str(world.memory_ids[f"personal {T1} {ANN}"]), str(world.memory_ids[f"valued {T1}"])])
    assert [k["memory_id"] for k in receipt.kept] == [str(world.memory_ids[f"plain {T1}"])]
    assert "zq" not in receipt.to_json() and "example" not in receipt.to_json()
    assert any("backups" in line for line in receipt.not_erasable)

    assert on_disk(db_url, theirs) == []
    assert on_disk(db_url, others) == others
    assert usage_totals(db_url) == bill  # the ledger keeps its numbers
    with pytest.raises(SessionNotFound):
        keep.sessions.get(world.sessions[label(T1, ANN, None)], T1)
    served = keep.sessions.get(world.sessions[label(T1, BOB, CASE)], T1)
    assert any("zquser" in (m.content or "") for m in served.messages)
    same_id_elsewhere = keep.sessions.get(world.sessions[label(T2, ANN, None)], T2)
    assert len(same_id_elsewhere.messages) == 5
    left = {m.content for m in keep.memory.list(T1)}
    assert world.memories[f"plain {T1}"] in left and world.memories[f"personal {T1} {BOB}"] in left
    assert world.memories[f"personal {T1} {ANN}"] not in left

    check = keep.verify_erasure(receipt)
    assert check.ok, check.problems
    assert keep.verify_erasure(receipt.to_json()).ok
    tampered = ErasureReceipt.from_dict({**receipt.to_dict(),
                                         "counts": {**receipt.counts, "messages": 9}})
    assert not keep.verify_erasure(tampered)
    assert not keep.verify_erasure(tampered.sealed())  # the store's record disagrees
    again = keep.erase(T1, actor=ANN)
    assert again.total == 0 and again.session_ids == [] and keep.verify_erasure(again).ok
    log = keep.lifecycle.log(T1)
    assert [e["action"] for e in log[:2]] == ["erase", "erase"]
    assert log[1]["digest"] == receipt.digest and log[1]["actor_by"] == "dpo@example.org"


def test_erasing_a_subject_takes_its_sessions_and_memories_only(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    world = plant(db_url)
    keep = make_keep()
    receipt = keep.erase(T1, subject=CASE)
    gone = world.of(T1, subject=CASE) + memory_tokens(world, f"subject {T1}")
    assert receipt.counts["sessions"] == 2 and receipt.counts["memories"] == 1
    assert on_disk(db_url, gone) == []
    kept = world.canaries[label(T1, ANN, None)] + world.canaries[label(T1, BOB, None)] \
        + world.of(T2) + memory_tokens(world, f"subject {T2}", f"personal {T1} {ANN}",
                                       f"valued {T1}", f"tenant {T1}")
    assert on_disk(db_url, kept) == kept
    assert keep.verify_erasure(receipt).ok


def test_erasing_a_whole_tenant_leaves_the_other_tenant_whole(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    world = plant(db_url)
    keep = make_keep()
    bill = usage_totals(db_url)
    receipt = keep.erase(T1, whole_tenant=True)
    assert receipt.counts["sessions"] == 4 and receipt.counts["memories"] == 6
    gone = world.of(T1) + [v.split()[-1] for k, v in world.memories.items() if str(T1) in k]
    assert on_disk(db_url, gone) == []
    kept = world.of(T2) + [v.split()[-1] for k, v in world.memories.items() if str(T2) in k]
    assert on_disk(db_url, kept) == kept
    assert keep.sessions.list(T1) == [] and keep.memory.list(T1) == []
    assert len(keep.sessions.list(T2)) == 4
    assert usage_totals(db_url) == bill
    assert keep.verify_erasure(receipt).ok
