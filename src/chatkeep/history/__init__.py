"""History: fit a conversation into a token budget by folding old turns into a summary."""

from chatkeep.history.compressor import HistoryCompressor
from chatkeep.history.summarizers import (
    ExtractiveSummarizer,
    LLMSummarizer,
    Summarizer,
    SummaryResult,
)
from chatkeep.history.summary import StructuredSummary, SummaryItem
from chatkeep.privacy.filters import OutboundFilter

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
