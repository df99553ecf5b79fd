"""The summarizer protocols and what a fold returns.

A ``Summarizer`` folds messages into a summary given as text; a ``StructuredSummarizer``
reads and writes the structured summary (:mod:`chatkeep.history.summary`), and the
compressor prefers it. Both receive only user/assistant text, already redacted when the
session redacts, and the previous summary in the same form.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from chatkeep.history.summary import StructuredSummary
from chatkeep.messages import Message, Usage


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A new running summary and the usage it cost (``None`` offline).

    ``text`` is the summary as it replays; ``summary`` its structured form when the
    summarizer keeps one (``None``: ``text`` is the whole new summary, a narrative)."""

    text: str
    usage: Usage | None = None
    model: str | None = None
    summary: StructuredSummary | None = None


@runtime_checkable
class Summarizer(Protocol):
    """Folds ``messages`` into ``previous``; raises on failure (the compressor handles it)."""

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        """Fold ``messages`` into ``previous``, writing in ``language``."""
        ...


@runtime_checkable
class StructuredSummarizer(Protocol):
    """A summarizer that reads and writes the structured summary: the compressor calls
    ``fold`` instead of ``summarize`` and stores the ``SummaryResult.summary`` it returns."""

    def fold(self, previous: StructuredSummary | None, messages: Sequence[Message],
             language: str) -> SummaryResult:
        """Fold ``messages`` into ``previous`` (items kept unless retired by id)."""
        ...


def as_structured(previous: StructuredSummary | str | None) -> StructuredSummary | None:
    """``previous`` as a structured summary (text is read as its stored or replayed form)."""
    if previous is None or isinstance(previous, StructuredSummary):
        return previous
    return StructuredSummary.load(previous)
