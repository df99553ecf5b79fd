"""The reservation a turn holds is settled inside the transaction that stores its answer
(issue 33's cost target): on PostgreSQL in the append's one statement, on SQLite in its
``BEGIN IMMEDIATE``; never on its own when the append succeeds, and still settled at the
answer's usage when the append fails."""

from __future__ import annotations

from typing import Any

import pytest

from chatkeep import Chatkeep, Ref, SessionClosed
from support.completions import chat_answer

ORG = Ref("organization", 1)
pytestmark = pytest.mark.sync_api  # the quota store's own settle is replaced below


def answer(*, calls: bool = False) -> dict[str, Any]:
    """A Chat Completions answer with its usage (48 tokens), as the SDK returns it."""
    return chat_answer(call_id="call_1" if calls else None)


def spent_reserved(keep: Chatkeep) -> tuple[int, int]:
    quota = keep.quotas.get(ORG)
    assert quota is not None
    return quota.spent, quota.reserved


@pytest.mark.parametrize("calls", [False, True], ids=["text", "tool-calls"])
def test_the_answer_settles_its_reservation_in_its_own_append(
        keep: Chatkeep, calls: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    keep.quotas.set(ORG, tokens=10_000)
    session = keep.sessions.create(ORG)
    session.add_user("When does my parcel arrive?")
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=200)
    assert spent_reserved(keep) == (0, history.info.tokens + 200)

    def no_separate_settle(*_: Any) -> bool:
        raise AssertionError("settled in a transaction of its own")

    monkeypatch.setattr(keep.quotas.store, "settle", no_separate_settle)
    message = session.add_assistant_response(answer(calls=calls))
    assert message.seq == 2
    assert spent_reserved(keep) == (48, 0)  # the real usage, in the append's commit
    assert keep.quotas.store.reservations(ORG) == []
    assert keep.usage(ORG)[0].total_tokens == 48  # the ledger, in the same commit


def test_an_answer_whose_append_fails_still_settles_at_its_usage(keep: Chatkeep) -> None:
    keep.quotas.set(ORG, tokens=10_000)
    session = keep.sessions.create(ORG)
    session.add_user("When does my parcel arrive?")
    keep.compressor.build_history(session, "Be brief.", max_output_tokens=200)
    session.close()  # closed while the call was in flight: the answer is refused
    with pytest.raises(SessionClosed):
        session.add_assistant_response(answer())
    assert spent_reserved(keep) == (48, 0)  # the call was made: its usage counts
    assert keep.quotas.store.reservations(ORG) == []


def test_a_reservation_held_without_a_quota_settles_nothing(keep: Chatkeep) -> None:
    session = keep.sessions.create(ORG)
    session.add_user("When does my parcel arrive?")
    history = keep.compressor.build_history(session, "Be brief.", max_output_tokens=200)
    assert history.info.reservation is None
    session.add_assistant_response(answer())
    assert keep.quotas.get(ORG) is None
    assert keep.usage(ORG)[0].total_tokens == 48


def test_a_held_callable_is_called_with_the_answers_usage_after_its_append(
        keep: Chatkeep) -> None:
    """``hold_reservation`` also takes a plain callable (a reservation held elsewhere):
    the answer is stored first, then the callable gets its usage."""
    from chatkeep.sessions import hold_reservation

    session = keep.sessions.create(ORG)
    session.add_user("When does my parcel arrive?")
    got: list[Any] = []
    hold_reservation(session, lambda usage: got.append(
        (usage, [m.role.value for m in session.refresh().messages])))
    session.add_assistant_response(answer())
    assert len(got) == 1
    usage, roles = got[0]
    assert (usage.prompt_tokens, usage.completion_tokens) == (40, 8)
    assert roles == ["user", "assistant"]
    session.add_assistant_response(answer())  # held once: not called again
    assert len(got) == 1
