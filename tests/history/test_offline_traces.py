"""The offline (extractive) summarizer never folds a turn into nothing (issue 35, item 14).

A fold advances the watermark only past turns the summary still carries: each folded turn
keeps at least its most telling sentence, typed by its own words, or the fold is refused and
the history goes out over budget, flagged, with the watermark where it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from chatkeep import Chatkeep, Message, ModelError, Ref, Role
from chatkeep.cli.demo import DEMO_SYSTEM_PROMPT, demo_messages
from chatkeep.history.summarizers import ExtractiveSummarizer
from chatkeep.history.summarizers.extractive import _PLEASANTRY, _SENTENCES
from chatkeep.history.summary import ItemType, StructuredSummary
from chatkeep.importing import ImportedMessage, append_all
from chatkeep.sessions import ChatSession

ORG = Ref("organization", "traces")
SYSTEM = "You are a helpful support assistant."
EMAIL = "maria.lopez@example.com"
CONTACT = [
    ("user", f"Hi, I'm Maria Lopez. You can reach me at {EMAIL} or on +44 20 7946 0958 if "
             "anything goes wrong with the delivery. Please don't call before 9am."),
    ("assistant", "Thanks Maria, I have your contact details. I will only use the e-mail "
                  "address for updates about the delivery."),
    ("user", "My order number is 88213 and it was due on Monday but has not arrived yet; "
             "the tracking page shows nothing at all since last week."),
    ("assistant", "I have looked up order 88213: it left the warehouse on Friday and is with "
                  "the courier, I will chase them and come back to you."),
    ("user", "Can you also check whether the invoice went to the right address, the one on "
             "Baker Street, because the last one went to my old flat in Camden."),
    ("assistant", "The invoice for 88213 went to 221B Baker Street, which is the address on "
                  "file now, and the Camden address has been removed."),
    ("user", "Great. And could you tell me when the parcel will finally arrive?"),
]
#: A budget a few turns exceed, with a summary limit far smaller than one turn.
TIGHT: dict[str, dict[str, Any]] = {"chat": {"max_history_tokens": 200, "recent_messages_min": 2,
                  "summary_max_tokens": 50},
         "memory": {"distil_on_compress": False}}


def sentences(text: str) -> list[str]:
    return [s for s in _SENTENCES.split(" ".join(text.split()))
            if s and not _PLEASANTRY.match(s)]


def carried(summary: str, text: str) -> bool:
    """Whether ``summary`` holds a trace of ``text``: the head of one of its sentences
    (a trace is a sentence, clipped at its end)."""
    return any(s[:20] in summary for s in sentences(text))


def user_turns(messages: Sequence[Message], after: int, through: int) -> list[str]:
    return [m.content or "" for m in messages
            if m.role is Role.USER and after < m.seq <= through and sentences(m.content or "")]


def msg(seq: int, role: str, text: str) -> Message:
    return Message("s", seq, Role(role), text)


# -- the summarizer alone ------------------------------------------------------------------


def test_a_turn_that_leads_with_contact_details_keeps_them_as_a_fact() -> None:
    messages = [msg(n, role, text) for n, (role, text) in enumerate(CONTACT[:2], start=1)]
    result = ExtractiveSummarizer(200).fold(None, messages, "English")
    assert result.summary is not None
    types = {i.text: i.type for i in result.summary.items}
    contact = next(text for text in types if EMAIL in text)
    assert types[contact] is ItemType.FACT  # not a rule: the "don't" is another sentence's
    assert types["Please don't call before 9am."] is ItemType.RULE


@pytest.mark.parametrize("limit", [40, 50, 80])
def test_a_tight_limit_keeps_a_line_for_every_folded_turn(limit: int) -> None:
    messages = [msg(n, role, text) for n, (role, text) in enumerate(CONTACT[:6], start=1)]
    summarizer = ExtractiveSummarizer(limit)
    result = summarizer.fold(None, messages, "English")
    assert result.text and summarizer.counter.count(result.text) <= limit
    for _, text in CONTACT[:6:2]:
        assert carried(result.text, text), (text, result.text)
    # The next fold keeps its own turns too, the previous summary shrinking around them.
    later = [msg(7, "user", "Please send the replacement to 14 Elm Road, Leeds LS2 7EY."),
             msg(8, "assistant", "Done: the replacement goes to 14 Elm Road.")]
    again = summarizer.fold(result.summary, later, "English")
    assert carried(again.text, later[0].content or "")
    assert summarizer.counter.count(again.text) <= limit


def test_a_limit_that_cannot_hold_a_trace_per_turn_refuses_the_fold() -> None:
    messages = [msg(n, role, text) for n, (role, text) in enumerate(CONTACT[:6], start=1)]
    with pytest.raises(ModelError, match="cannot carry 3 folded turns within 10 tokens"):
        ExtractiveSummarizer(10).fold(None, messages, "English")


def test_pleasantries_alone_need_no_trace() -> None:
    previous = StructuredSummary(narrative="- User: the order is 88213")
    result = ExtractiveSummarizer(30).fold(
        previous, [msg(9, "user", "Thanks!"), msg(10, "assistant", "You're welcome!")],
        "English")
    assert result.text == "- User: the order is 88213"


# -- through the compressor, offline -------------------------------------------------------


def _converse(session: ChatSession, keep: Chatkeep,
              turns: Sequence[tuple[str, str]]) -> list[tuple[int, int, str]]:
    """Record ``turns``, building the history before each user turn is answered; the
    folds made (old watermark, new watermark, summary)."""
    folds: list[tuple[int, int, str]] = []
    for role, text in turns:
        if role == "user":
            session.add_user(text)
            before = session.summary_watermark
            keep.compressor.build_history(session, SYSTEM)
            if session.summary_watermark != before:
                folds.append((before, session.summary_watermark, session.summary or ""))
        else:
            session.add_assistant(text)
    return folds


def test_a_conversation_that_leads_with_contact_details_keeps_them(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config=TIGHT)
    assert keep.model is None  # the offline summarizer
    session = keep.sessions.create(ORG, Ref("user", "maria"))
    folds = _converse(session, keep, CONTACT)
    assert folds, "the conversation is meant to fold"
    first_before, _, first_summary = folds[0]
    assert first_before == 0 and first_summary
    assert EMAIL in first_summary  # the contact detail is still in the model's context
    messages = session.messages_after(0)
    for before, through, summary in folds:
        for text in user_turns(messages, before, through):
            assert carried(summary, text), (text, summary)


def test_a_fold_that_cannot_carry_its_turns_goes_out_over_budget(
        make_keep: Callable[..., Chatkeep]) -> None:
    keep = make_keep(config={**TIGHT, "chat": {**TIGHT["chat"], "summary_max_tokens": 10,
                                               "recent_messages_min": 1}})
    session = keep.sessions.create(ORG)
    for role, text in CONTACT[:6]:
        (session.add_user if role == "user" else session.add_assistant)(text)
    session.add_user(CONTACT[6][1])
    history = keep.compressor.build_history(session, SYSTEM)
    assert session.summary_watermark == 0 and session.summary is None
    assert history.over_budget and history.info.summary_failed
    reason = history.over_budget_reason or ""
    assert "the summarizer failed" in reason
    # The total and the excess are told apart ("233 tokens over the budget of 200" read
    # as 433 in all).
    found = re.match(r"(\d+) tokens, (\d+) over the budget of 200\b", reason)
    assert found is not None, reason
    assert int(found[1]) - 200 == int(found[2]) == history.tokens - 200
    assert len(history) == 1 + len(CONTACT)  # everything after the old watermark replays


def test_the_demo_conversation_folds_no_turn_into_nothing(tmp_path: Path) -> None:
    keep = Chatkeep(f"sqlite:///{tmp_path / 'demo.db'}", dispatcher="inline", config={
        "chat": {"max_history_tokens": 300, "recent_messages_min": 4,
                 "summary_max_tokens": 50}, "memory": {"distil_on_compress": False}})
    session = keep.sessions.create(ORG, title="demo")
    folds: list[tuple[int, int, str]] = []

    def after_append(message: ImportedMessage) -> None:
        if message.role is Role.USER:
            before = session.summary_watermark
            keep.compressor.build_history(session, DEMO_SYSTEM_PROMPT)
            if session.summary_watermark != before:
                folds.append((before, session.summary_watermark, session.summary or ""))

    append_all(session, demo_messages(), after_append)
    messages = session.messages_after(0)
    assert len(folds) >= 5
    for before, through, summary in folds:
        assert summary, f"the fold of seq {before + 1}-{through} stored no summary"
        for text in user_turns(messages, before, through):
            assert carried(summary, text), (before, through, text, summary)
    keep.close()
