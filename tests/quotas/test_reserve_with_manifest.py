"""The reservation ``build_history(max_output_tokens=N)`` holds is written in the
transaction that records the request's replay manifest (issue 33's cost target; on
PostgreSQL in its one statement): never on its own, and a refused one leaves no manifest
and no text behind (nothing was let leave)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import func, select

from chatkeep import Chatkeep, QuotaExceeded, Ref
from chatkeep.store.schema import chat_replay_texts
from support.statements import captured

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


@pytest.mark.postgres
def test_on_postgresql_the_manifest_texts_and_reservation_are_one_statement(
        pg_schema_url: str) -> None:
    """(SQLite writes them in one transaction of several statements.)"""
    with Chatkeep(pg_schema_url, dispatcher="inline") as keep:
        keep.quotas.set(ORG, tokens=10_000)
        session = keep.sessions.create(ORG)
        session.add_user("When does my parcel arrive?")
        with captured(keep.engine) as sent:
            history = keep.compressor.build_history(session, "Be brief.",
                                                    max_output_tokens=200)
        writes = [s for s, _ in sent
                  if "chat_replay_manifests" in s or "chat_reservations" in s]
        assert len(writes) == 1 and all(name in writes[0] for name in (
            "chat_replay_texts", "chat_replay_manifests", "chat_reservations",
            "synchronous_commit"))
        assert history.info.reservation is not None and keep.replay(session, turn=-1).match


def texts_of(keep: Chatkeep, session_id: str) -> int:
    with keep.engine.connect() as conn:
        return int(conn.execute(select(func.count()).where(
            chat_replay_texts.c.session_id == session_id)).scalar_one())


def test_a_refused_reservation_records_no_manifest(keep: Chatkeep) -> None:
    session = keep.sessions.create(ORG)
    session.add_user("Hello")
    keep.compressor.build_history(session, "Be brief.")  # turn 1, no quota yet
    keep.quotas.set(ORG, tokens=10)
    session.add_user("And again")
    texts = texts_of(keep, session.id)
    with pytest.raises(QuotaExceeded):
        keep.compressor.build_history(session, "A prompt never sent.", max_output_tokens=50)
    assert keep.quotas.get(ORG).reserved == 0  # type: ignore[union-attr]
    assert keep.replay(session, turn=-1).turn == 1  # the refused request left no turn
    assert texts_of(keep, session.id) == texts  # nor its new system prompt's text
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


def test_the_config_default_quota_is_held_with_the_manifest(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config={"quotas": {"default_tokens": 400, "default_window": "day"}})
    session = keep.sessions.create(ORG)
    session.add_user("Hello")
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=100)
    quota = keep.quotas.get(ORG)
    assert history.info.reservation is not None
    assert quota is not None and not quota.default  # stored for the tenant now
    assert quota.tokens == 400 and quota.reserved == history.info.tokens + 100
    with pytest.raises(QuotaExceeded):
        keep.compressor.build_history(session, "Be brief.", max_output_tokens=390)
    assert keep.replay(session, turn=-1).turn == 1
