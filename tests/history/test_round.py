"""The history round's outcomes and what follows each: values, no database (issue 31).

``RoundState.after`` is the round's whole retry policy; the driver only performs the
effects. These tests step it as h11's tests step its state machine.
"""

from __future__ import annotations

import pytest

from chatkeep.formats.base import Outgoing
from chatkeep.history.plan import HistoryPlan
from chatkeep.history.round import (
    Deferred,
    Folded,
    LostRace,
    Ready,
    RetryPolicy,
    RoundState,
    SummaryFailed,
    over_budget_reason,
)

POLICY = RetryPolicy()


def test_a_fresh_round_may_fold_and_ready_changes_nothing() -> None:
    state = RoundState()
    assert state.may_fold(POLICY)
    assert state.after(Ready()) == state
    assert not state.exhausted(POLICY)


def test_a_round_folds_once() -> None:
    state = RoundState().after(Folded(through=40, messages=12))
    assert state.compressed
    assert not state.may_fold(POLICY)


@pytest.mark.parametrize("outcome", [SummaryFailed(), Deferred("another caller is folding")])
def test_after_a_failed_or_deferred_fold_the_round_replays_unfolded(outcome: object) -> None:
    state = RoundState().after(outcome)  # type: ignore[arg-type]
    assert not state.may_fold(POLICY)
    assert not state.compressed


def test_losing_folds_to_other_writers_stops_folding_at_the_policy() -> None:
    state = RoundState()
    for _ in range(POLICY.summary_races - 1):
        state = state.after(LostRace("summary"))
        assert state.may_fold(POLICY)
    state = state.after(LostRace("summary"))
    assert not state.may_fold(POLICY)
    assert not state.exhausted(POLICY)  # losing folds never fails the request


def test_losing_the_vault_too_often_exhausts_the_round() -> None:
    state = RoundState()
    for _ in range(POLICY.vault_races - 1):
        state = state.after(LostRace("vault"))
        assert not state.exhausted(POLICY)
        assert state.may_fold(POLICY)  # a vault race is no reason to stop folding
    assert state.after(LostRace("vault")).exhausted(POLICY)
    assert RoundState().after(LostRace("vault")).exhausted(RetryPolicy(vault_races=1))


def test_over_budget_says_what_the_round_went_through() -> None:
    fits = HistoryPlan(Outgoing(system=""), tokens=10)
    over = HistoryPlan(Outgoing(system=""), tokens=900,
                       over_budget_reason="900 tokens, 400 over the budget of 500")
    assert over_budget_reason(fits, RoundState(summary_failed=True)) is None
    assert over_budget_reason(over, RoundState()) == over.over_budget_reason
    assert over_budget_reason(over, RoundState(summary_failed=True)) == (
        f"{over.over_budget_reason} (the summarizer failed; the previous summary was kept)")
    assert over_budget_reason(over, RoundState(deferred="backing off")) == (
        f"{over.over_budget_reason} (not folded now: backing off)")
