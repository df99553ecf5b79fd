"""The erasure plan and the receipt are values: tested with literals, no database."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chatkeep import Ref
from chatkeep.errors import InvalidArgument, ScopeOnHold
from chatkeep.lifecycle.erase import erase_scope
from chatkeep.lifecycle.plan import plan_erasure
from chatkeep.lifecycle.receipt import ErasureReceipt, canonical_json, check_receipt
from chatkeep.store.lifecycle import (
    EraseScope,
    HoldRow,
    Inventory,
    MemoryFact,
    holds_in_the_way,
    refuse_held,
)

T = Ref("org", 1)
ANN, BOB = Ref("user", "ann"), Ref("user", "bob")
CASE = Ref("case", 9)
NOW = datetime(2026, 12, 4, tzinfo=UTC)


def hold(id_: int, *, actor: Ref | None = None, subject: Ref | None = None,
         session_id: str | None = None, released: bool = False) -> HoldRow:
    return HoldRow(id_, T, actor, subject, session_id, f"reason {id_}", None, NOW,
                   NOW if released else None)


def inventory(scope: EraseScope, memories: list[MemoryFact], holds: list[HoldRow] = ()
              ) -> Inventory:  # type: ignore[assignment]
    sessions = [("s1", ANN, None), ("s2", ANN, CASE)]
    return Inventory(scope, sessions, {"s1": 3, "s2": 4}, memories, list(holds),
                     frozenset({10, 12}), 2)


def test_an_actor_plan_erases_their_memories_and_those_carrying_their_values() -> None:
    scope = EraseScope("actor", T, ref=ANN)
    plan = plan_erasure(inventory(scope, [
        MemoryFact(10, "personal", True, False, False),    # theirs
        MemoryFact(11, "tenant", False, True, True),       # from their talk, their values
        MemoryFact(12, "tenant", False, True, False),      # from their talk, no values
        MemoryFact(13, "subject", False, True, True),
    ]))
    assert plan.erase_memories == [10, 11, 13]
    assert [i for i, _ in plan.keep_memories] == [12]
    assert "none of their personal values" in plan.keep_memories[0][1]
    assert plan.counts() == {"sessions": 2, "messages": 7, "memories": 3, "vectors": 1,
                             "usage_unlinked": 2, "memories_unlinked": 1}
    assert plan.session_ids == ["s1", "s2"] and not plan.blocked and not plan.empty
    assert plan.describe()[0] == "erase actor user:ann of tenant org:1"


def test_a_tenant_plan_erases_every_memory() -> None:
    scope = EraseScope("tenant", T)
    plan = plan_erasure(inventory(scope, [MemoryFact(12, "tenant", False, False, False)]))
    assert plan.erase_memories == [12] and plan.keep_memories == []


def test_holds_in_the_way() -> None:
    actor = EraseScope("actor", T, ref=ANN)
    sessions = [("s1", ANN, None), ("s2", ANN, CASE)]
    on_case, on_bob = hold(1, subject=CASE), hold(2, actor=BOB)
    assert holds_in_the_way(actor, [on_case, on_bob], sessions) == [on_case]
    assert holds_in_the_way(actor, [hold(3, session_id="s1")], sessions)[0].id == 3
    assert holds_in_the_way(actor, [hold(4, actor=ANN)], [])[0].id == 4  # no sessions
    assert holds_in_the_way(actor, [hold(5)], [])[0].id == 5  # tenant-wide
    assert holds_in_the_way(actor, [hold(6, actor=ANN, released=True)], sessions) == []
    tenant = EraseScope("tenant", T)
    assert [h.id for h in holds_in_the_way(tenant, [on_bob], [])] == [2]
    with pytest.raises(ScopeOnHold, match="reason 2") as raised:
        refuse_held(tenant, [on_bob])
    assert raised.value.reason == "reason 2" and raised.value.hold_id == 2
    plan = plan_erasure(inventory(actor, [], [on_case]))
    assert plan.blocked and "REFUSED" in plan.describe()[-1]


def test_erase_takes_exactly_one_scope() -> None:
    assert erase_scope(T, ANN, None, False).kind == "actor"
    assert erase_scope(T, None, CASE, False).kind == "subject"
    assert erase_scope(T, None, None, True).kind == "tenant"
    for args in ((None, None, False), (ANN, CASE, False), (ANN, None, True)):
        with pytest.raises(InvalidArgument, match="exactly one"):
            erase_scope(T, *args)


def receipt() -> ErasureReceipt:
    return ErasureReceipt(erasure_id="e1", tenant="org:1",
                          scope={"kind": "actor", "type": "user", "id": "ann"},
                          started_at="2026-12-04T00:00:00+00:00",
                          finished_at="2026-12-04T00:00:01+00:00",
                          counts={"messages": 7, "sessions": 2}, session_ids=["s1", "s2"],
                          memory_ids=["10"], kept=[]).sealed()


def test_a_receipt_is_canonical_json_with_a_digest_over_it() -> None:
    sealed = receipt()
    assert canonical_json({"b": 1, "a": [2]}) == '{"a":[2],"b":1}'
    with pytest.raises(InvalidArgument, match="floats"):
        canonical_json({"a": 1.5})
    again = ErasureReceipt.from_json(sealed.to_json())
    assert again == sealed and again.computed_digest() == sealed.digest
    assert sealed.total == 9
    record = {"digest": sealed.digest, "counts": sealed.counts,
              "session_ids": sealed.session_ids, "memory_ids": sealed.memory_ids}
    assert check_receipt(sealed, record, [], {}).ok


def test_a_tampered_or_unrecorded_receipt_does_not_verify() -> None:
    sealed = receipt()
    record = {"digest": sealed.digest, "counts": sealed.counts,
              "session_ids": sealed.session_ids, "memory_ids": sealed.memory_ids}
    edited = ErasureReceipt.from_dict({**sealed.to_dict(), "counts": {"messages": 1}})
    check = check_receipt(edited, record, [], {})
    assert not check and any("changed" in p for p in check.problems)
    assert any("counts" in p for p in check.problems)
    resealed = edited.sealed()  # a forger recomputing the digest still disagrees with the store
    assert not check_receipt(resealed, record, [], {})
    assert not check_receipt(sealed, None, [], {})
    left = check_receipt(sealed, record, ["session s1"], {"messages": 2})
    assert left.problems == ["still stored: session s1", "left in the scope: 2 messages"]
    with pytest.raises(InvalidArgument):
        ErasureReceipt.from_json("[1]")
