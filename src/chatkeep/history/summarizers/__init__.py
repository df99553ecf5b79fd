"""Summarizers: fold old turns into the running summary, one module per implementation.

``LLMSummarizer`` (:mod:`.llm`) asks a cheap model for an edit of the structured summary;
``ExtractiveSummarizer`` (:mod:`.extractive`) is the offline, deterministic fallback, typing
what it keeps with :mod:`.classifier`. The protocols are in :mod:`.base`.
"""

from __future__ import annotations

from chatkeep.history.summarizers.base import StructuredSummarizer, Summarizer, SummaryResult
from chatkeep.history.summarizers.extractive import ExtractiveSummarizer
from chatkeep.history.summarizers.llm import LLMSummarizer

__all__ = [
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "StructuredSummarizer",
    "Summarizer",
    "SummaryResult",
]
