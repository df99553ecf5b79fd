"""The reservation ``build_history(max_output_tokens=N)`` holds is written in the
transaction that records the request's replay manifest (issue 33's cost target): never
on its own, and a refused one leaves no manifest behind (nothing was let leave)."""

from __future__ import annotations

from typing import Any

import pytest

from chatkeep import Chatkeep, QuotaExceeded, Ref

ORG = Ref("organization", 1)
pytestmark = pytest.mark.sync_api  # the quota store's own reserve is replaced below


def no_separate_reserve(*_: Any, **__: Any) -> Any:
    raise AssertionError("reserved in a transaction of its own")


def test_the_reservation_rides_in_the_manifests_transaction(
        keep: Chatkeep, monkeypatch: pytest.MonkeyPatch) -> None:
    keep.quotas.set(ORG, tokens=10_000)
    session = keep.sessions.create(ORG, Ref("user", 2))
    session.add_user("When does my parcel arrive?")
    monkeypatch.setattr(keep.quotas.store, "reserve", no_separate_reserve)
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=200)
    assert history.info.reservation is not None
    quota = keep.quotas.get(ORG)
    assert quota is not None and quota.reserved == history.info.tokens + 200
    held = keep.quotas.store.reservations(ORG)
    assert [(r[0], r[1], r[2], r[3]) for r in held] == [
        (history.info.reservation, history.info.tokens + 200, "chat", session.id)]
    assert keep.replay(session, turn=-1).match  # the manifest of this very request


def test_a_refused_reservation_records_no_manifest(keep: Chatkeep) -> None:
    session = keep.sessions.create(ORG)
    session.add_user("Hello")
    keep.compressor.build_history(session, "Be brief.")  # turn 1, no quota yet
    keep.quotas.set(ORG, tokens=10)
    session.add_user("And again")
    with pytest.raises(QuotaExceeded):
        keep.compressor.build_history(session, "Be brief.", max_output_tokens=50)
    assert keep.quotas.get(ORG).reserved == 0  # type: ignore[union-attr]
    assert keep.replay(session, turn=-1).turn == 1  # the refused request left no turn
    keep.quotas.set(ORG, tokens=10_000)
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=50)
    assert keep.replay(session, turn=-1).turn == 2 and history.info.reservation is not None


def test_an_actor_quota_is_held_with_the_tenants(keep: Chatkeep) -> None:
    actor = Ref("user", 7)
    keep.quotas.set(ORG, tokens=10_000)
    keep.quotas.set(ORG, tokens=1_000, actor=actor)
    session = keep.sessions.create(ORG, actor)
    session.add_user("Hello")
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=100)
    tokens = history.info.tokens + 100
    assert keep.quotas.get(ORG).reserved == tokens  # type: ignore[union-attr]
    assert keep.quotas.get(ORG, actor=actor).reserved == tokens  # type: ignore[union-attr]
    with pytest.raises(QuotaExceeded):
        keep.compressor.build_history(session, "Be brief.", max_output_tokens=990)
    assert keep.quotas.get(ORG, actor=actor).reserved == tokens  # type: ignore[union-attr]
