"""History: fit a conversation into a token budget by folding old turns into a summary."""

from chatkeep.history.compressor import HistoryCompressor, OutboundFilter
from chatkeep.history.summarizer import (
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    SummaryResult,
)
from chatkeep.history.summary import StructuredSummary, SummaryItem

__all__ = [
    "ExtractiveSummarizer",
    "HistoryCompressor",
    "LLMSummarizer",
    "OutboundFilter",
    "StructuredSummary",
    "Summarizer",
    "SummaryItem",
    "SummaryResult",
]
