"""Folding a backlog is bounded per turn (issue 32 item 6): a 30,000-message session made
one turn pay for 133 serial summarizer calls. Now a turn makes at most
``chat.max_fold_calls_per_turn`` calls and says it is over budget meanwhile; later turns,
or the ``"fold"`` job, fold the rest, each seq exactly once; the fold's lease is renewed
between calls. On both stores."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import pytest

from chatkeep import Chatkeep, Ref
from chatkeep.history.compressor import FOLD_JOB
from chatkeep.history.summarizers.base import SummaryResult
from chatkeep.messages import Message, MessageDraft
from chatkeep.sessions import ChatSession

ORG = Ref("organization", 1)
BACKLOG = 30_000
CALLS = 3
CONFIG = {"chat": {"max_history_tokens": 2000, "recent_messages_min": 4,
                   "summary_max_tokens": 150, "summary_input_max_tokens": 4000,
                   "max_fold_calls_per_turn": CALLS},
          "memory": {"distil_on_compress": False}}


class RecordingSummarizer:
    """A plain-text summarizer that records the seqs of every chunk it is handed."""

    def __init__(self) -> None:
        self.chunks: list[list[int]] = []

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        self.chunks.append([m.seq for m in messages])
        return SummaryResult(f"Folded through seq {messages[-1].seq}.")

    @property
    def folded(self) -> list[int]:
        return [seq for chunk in self.chunks for seq in chunk]


def backlog_session(keep: Chatkeep, count: int) -> ChatSession:
    """A session recorded before chatkeep folded it: ``count`` messages in one batch."""
    session = keep.sessions.create(ORG)
    drafts = [MessageDraft("user" if i % 2 == 0 else "assistant",
                           f"message {i}: the parcel with order number {i} is late")
              for i in range(count)]
    session.add_drafts(drafts)
    return session


@pytest.mark.slow
def test_a_backlog_folds_a_bounded_step_per_turn_and_each_seq_once(db_url: str) -> None:
    # The summarizer's default context (16,000 tokens): about 28 calls for this backlog.
    config = {**CONFIG, "chat": {**CONFIG["chat"], "summary_input_max_tokens": 16000}}
    with Chatkeep(db_url, config=config, dispatcher="inline") as keep:
        summarizer = RecordingSummarizer()
        keep.compressor.summarizer = summarizer
        session = backlog_session(keep, BACKLOG)
        turns = 0
        while True:
            before = len(summarizer.chunks)
            history = keep.compressor.build_history(session, "Be brief.")
            turns += 1
            assert len(summarizer.chunks) - before <= CALLS
            if not history.over_budget:
                break
            assert history.info.compressed
            assert "folding a backlog" in (history.info.over_budget_reason or "")
            assert turns < 200, "the backlog never finished folding"
        assert turns > 2  # it really was spread over turns
        folded = summarizer.folded
        assert folded == sorted(set(folded)), "a seq was folded twice or out of order"
        assert folded == list(range(1, session.row.summary_watermark + 1))
        assert session.row.summary_watermark >= BACKLOG - 20
        # every later turn fits without folding again
        assert not keep.compressor.build_history(session, "Be brief.").over_budget


class Dispatched:
    """A dispatcher that keeps what it was asked to run, to run it when the test says."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, str]] = []
        self.handlers: dict[str, object] = {}

    def bind(self, handlers: dict[str, object]) -> None:
        self.handlers = dict(handlers)

    def dispatch(self, job: str, session_id: str) -> None:
        self.jobs.append((job, session_id))

    def close(self) -> None:
        pass


def test_a_turn_that_leaves_a_backlog_dispatches_the_fold_job_which_folds_it_all(
        db_url: str) -> None:
    dispatcher = Dispatched()
    with Chatkeep(db_url, config=CONFIG, dispatcher=dispatcher) as keep:
        summarizer = RecordingSummarizer()
        keep.compressor.summarizer = summarizer
        session = backlog_session(keep, 3000)
        first = keep.compressor.build_history(session, "Be brief.")
        assert first.over_budget and len(summarizer.chunks) == CALLS
        assert dispatcher.jobs == [(FOLD_JOB, session.id)]
        dispatcher.handlers[FOLD_JOB](session.id)  # type: ignore[operator]
        session.refresh()
        assert not keep.compressor.build_history(session, "Be brief.").over_budget
        folded = summarizer.folded
        assert folded == list(range(1, session.row.summary_watermark + 1))


def test_the_fold_lease_is_renewed_between_calls_and_a_lost_one_stops_the_fold(
        db_url: str) -> None:
    """Renewal extends our own claim only; once another caller holds the session, the
    fold stores what it has and stops."""
    with Chatkeep(db_url, config=CONFIG, dispatcher="inline") as keep:
        session = keep.sessions.create(ORG)
        repository = keep.repository
        version = session.row.summary_version
        until = repository.claim_fold(session.id, version, timedelta(seconds=30))
        assert until is not None
        renewed = repository.renew_fold(session.id, until, timedelta(seconds=300))
        assert renewed is not None and renewed > until
        assert repository.renew_fold(session.id, until, timedelta(seconds=300)) is None
        repository.release_fold(session.id, renewed)
        assert repository.renew_fold(session.id, renewed, timedelta(seconds=300)) is None

        summarizer = RecordingSummarizer()
        keep.compressor.summarizer = summarizer
        backlog = backlog_session(keep, 3000)
        calls = [0]
        real = summarizer.summarize

        def steal_after_first(previous: str | None, messages: Sequence[Message],
                              language: str) -> SummaryResult:
            calls[0] += 1
            if calls[0] == 1:  # another claimant takes the session mid-fold
                keep.repository.release_fold(backlog.id, _lease(keep, backlog.id))
                keep.repository.claim_fold(backlog.id, backlog.row.summary_version,
                                           timedelta(seconds=600))
            return real(previous, messages, language)

        summarizer.summarize = steal_after_first  # type: ignore[method-assign]
        keep.compressor.build_history(backlog, "Be brief.")
        assert calls[0] == 1  # the lost claim stopped the fold after its first call
        backlog.refresh()
        assert backlog.row.summary_watermark == summarizer.chunks[0][-1]


def _lease(keep: Chatkeep, session_id: str) -> object:
    return keep.repository.get_session(session_id).fold_lease_until
