"""History: fit a conversation into a token budget by folding old turns into a summary.

The names load on first use (:mod:`chatkeep._exports`): ``chatkeep.history.summary``
alone (what a session's ``summary`` reads) does not import the compressor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chatkeep._exports import lazy_exports

if TYPE_CHECKING:
    from chatkeep.history.compressor import HistoryCompressor as HistoryCompressor
    from chatkeep.history.manifest import Manifest as Manifest
    from chatkeep.history.replay import Replay as Replay
    from chatkeep.history.summarizers import ExtractiveSummarizer as ExtractiveSummarizer
    from chatkeep.history.summarizers import LLMSummarizer as LLMSummarizer
    from chatkeep.history.summarizers import Summarizer as Summarizer
    from chatkeep.history.summarizers import SummaryResult as SummaryResult
    from chatkeep.history.summary import StructuredSummary as StructuredSummary
    from chatkeep.history.summary import SummaryItem as SummaryItem
    from chatkeep.privacy.filters import OutboundFilter as OutboundFilter

#: Each public name, under the module that defines it.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "chatkeep.history.compressor": ("HistoryCompressor",),
    "chatkeep.history.manifest": ("Manifest",),
    "chatkeep.history.replay": ("Replay",),
    "chatkeep.history.summarizers": (
        "ExtractiveSummarizer", "LLMSummarizer", "Summarizer", "SummaryResult",
    ),
    "chatkeep.history.summary": ("StructuredSummary", "SummaryItem"),
    "chatkeep.privacy.filters": ("OutboundFilter",),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
