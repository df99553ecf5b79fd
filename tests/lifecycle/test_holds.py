"""Legal holds refuse delete and erase with their reason, before anything is removed; a
hold on anything inside a tenant holds a whole-tenant erasure; released, they let go."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from lifecycle_helpers import ANN, BOB, CASE, T1, T2, label, on_disk, plant

from chatkeep import Chatkeep, HoldNotFound, InvalidArgument, ScopeOnHold


def test_a_held_actor_refuses_erase_and_delete_naming_the_reason(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    world = plant(db_url)
    keep = make_keep()
    hold = keep.holds.place(T1, actor=ANN, reason="litigation 2026-114", by="legal")
    assert hold.kind == "actor" and hold.active
    theirs = world.of(T1, ANN)
    with pytest.raises(ScopeOnHold, match="litigation 2026-114") as raised:
        keep.erase(T1, actor=ANN)
    assert raised.value.reason == "litigation 2026-114" and raised.value.hold_id == hold.id
    with pytest.raises(ScopeOnHold, match="litigation"):
        keep.sessions.delete(world.sessions[label(T1, ANN, None)], T1)
    with pytest.raises(ScopeOnHold, match="litigation"):  # inside the tenant: holds it all
        keep.erase(T1, whole_tenant=True)
    assert keep.plan_erasure(T1, actor=ANN).blocked
    assert on_disk(db_url, theirs) == theirs  # nothing was removed
    assert keep.erase(T2, actor=ANN).counts["sessions"] == 2  # another tenant's person
    assert keep.sessions.delete(world.sessions[label(T1, BOB, None)], T1)["sessions"] == 1
    assert [h.id for h in keep.holds.list(T1)] == [hold.id]
    assert keep.holds.list(T2) == []

    released = keep.holds.release(T1, hold.id, by="legal")
    assert not released.active
    with pytest.raises(HoldNotFound):
        keep.holds.release(T1, hold.id)
    assert keep.holds.list(T1) == [] and len(keep.holds.list(T1, include_released=True)) == 1
    assert keep.erase(T1, actor=ANN).counts["sessions"] == 2
    actions = [e["action"] for e in keep.lifecycle.log(T1)]
    assert "hold_placed" in actions and "hold_released" in actions


def test_holds_on_a_session_or_a_subject_hold_the_people_in_them(
        db_url: str, make_keep: Callable[..., Chatkeep]) -> None:
    world = plant(db_url)
    keep = make_keep()
    on_case = keep.holds.place(T1, subject=CASE, reason="matter 9 open")
    with pytest.raises(ScopeOnHold, match="matter 9 open"):
        keep.erase(T1, actor=BOB)  # one of Bob's sessions is about the held matter
    with pytest.raises(ScopeOnHold):
        keep.sessions.delete(world.sessions[label(T1, ANN, CASE)], T1)
    keep.holds.release(T1, on_case.id)
    target = world.sessions[label(T1, BOB, None)]
    on_session = keep.holds.place(T1, session_id=target, reason="preserve chat")
    assert [h.id for h in keep.holds.list(T1, session_id=target)] == [on_session.id]
    assert keep.holds.list(T1, session_id=world.sessions[label(T1, ANN, None)]) == []
    with pytest.raises(ScopeOnHold, match="preserve chat"):
        keep.erase(T1, actor=BOB)
    assert keep.erase(T1, subject=CASE).counts["sessions"] == 2  # the held one is not in it


def test_a_hold_checks_what_it_is_given(keep: Chatkeep) -> None:
    from chatkeep import SessionNotFound

    with pytest.raises(InvalidArgument, match="one scope"):
        keep.holds.place(T1, actor=ANN, subject=CASE, reason="x")
    with pytest.raises(InvalidArgument, match="reason"):
        keep.holds.place(T1, actor=ANN, reason="  ")
    with pytest.raises(SessionNotFound):
        keep.holds.place(T1, session_id="no-such-session", reason="x")
    tenant_wide = keep.holds.place(T1, reason="contract dispute")
    assert tenant_wide.kind == "tenant"
