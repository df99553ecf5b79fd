"""An honest budget: estimates and over_budget, clipping of oversized messages, chunked
folding of an oversized backlog, summaries kept within their limit."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from chatkeep import Chatkeep, HistoryCompressor, Ref, ToolCall
from chatkeep.history import SummaryResult
from chatkeep.history.clip import clip
from chatkeep.messages import Message, Usage
from chatkeep.tokens import HeuristicCounter

ORG = Ref("organization", 1)
SYSTEM = "You are helpful."


class ContextLimitedSummarizer:
    """Plays a summary model with a fixed context: refuses an input larger than it."""

    def __init__(self, context_tokens: int, reply: str = "S") -> None:
        self.context_tokens = context_tokens
        self.reply = reply
        self.inputs: list[int] = []

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        size = HeuristicCounter().count((previous or "") + "".join(
            m.content or "" for m in messages)) + 400
        if size > self.context_tokens:
            raise RuntimeError(f"context length exceeded: {size} > {self.context_tokens}")
        self.inputs.append(size)
        return SummaryResult(f"{previous or ''}[{messages[0].seq}-{messages[-1].seq}]",
                             Usage(size, 5), "cheap")


def test_clip_keeps_head_and_tail_with_a_marker() -> None:
    counter = HeuristicCounter()
    text = "HEAD " + "filler " * 10_000 + " TAIL"
    clipped, cut = clip(text, 200, counter)
    assert cut and counter.count(clipped) <= 200
    assert clipped.startswith("HEAD") and clipped.endswith("TAIL")
    assert "tokens clipped by chatkeep" in clipped
    assert clip("short", 200, counter) == ("short", False)


def test_a_huge_paste_goes_out_clipped_and_stays_stored_whole(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    paste = "START " + "x" * 4 * 5_000_000 + " END"  # a 5M-token paste
    s.add_user(paste)
    hc = HistoryCompressor(None, max_history_tokens=6000, summary_max_tokens=600)
    history = hc.build_history(s, SYSTEM)
    sent = history[-1]["content"]
    assert sent.startswith("START") and sent.endswith("END") and len(sent) < 70_000
    assert history.info.clipped == 1 and history.over_budget
    assert s.messages[0].content == paste  # the stored message is untouched


def test_a_huge_tool_result_in_the_open_turn_is_clipped_not_dropped(keep: Chatkeep) -> None:
    s = keep.sessions.create(tenant=ORG)
    s.add_user("dump the table")
    s.add_assistant(tool_calls=[ToolCall("c1", "dump")])
    s.add_tool_result("c1", "row " * 200_000)
    history = HistoryCompressor(None, max_message_tokens=2000).build_history(s, SYSTEM)
    result = history[-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "c1"
    assert HeuristicCounter().count(result["content"]) <= 2000


def test_an_oversized_backlog_folds_in_chunks_that_fit_the_summary_model(
        keep: Chatkeep) -> None:
    """42k tokens of backlog, a 32k-context summary model: it compresses anyway."""
    s = keep.sessions.create(tenant=ORG)
    for i in range(42):
        s.add_user(f"U{i} " + "word " * 400)   # ~500 tokens each
        s.add_assistant(f"A{i} " + "word " * 400)
    summarizer = ContextLimitedSummarizer(context_tokens=32_000)
    hc = HistoryCompressor(summarizer, max_history_tokens=6000,
                           summary_input_max_tokens=30_000)
    history = hc.build_history(s, SYSTEM)
    assert history.compressed and not history.over_budget
    assert len(summarizer.inputs) >= 2 and max(summarizer.inputs) <= 32_000
    ranges = [tuple(map(int, r.split("-"))) for r in s.summary.strip("[]").split("][")]
    assert ranges[0][0] == 1 and ranges[-1][1] == s.summary_watermark
    assert all(b[0] > a[1] for a, b in itertools.pairwise(ranges))
    assert s.total_tokens == sum(summarizer.inputs) + 5 * len(summarizer.inputs)


def test_a_failing_later_chunk_keeps_what_the_earlier_ones_folded(keep: Chatkeep) -> None:
    class FailsSecond(ContextLimitedSummarizer):
        def summarize(self, previous, messages, language):  # type: ignore[no-untyped-def]
            if self.inputs:
                raise RuntimeError("boom")
            return super().summarize(previous, messages, language)

    s = keep.sessions.create(tenant=ORG)
    for i in range(40):
        s.add_user(f"U{i} " + "word " * 400)
        s.add_assistant(f"A{i} " + "word " * 400)
    summarizer = FailsSecond(context_tokens=100_000)
    history = HistoryCompressor(summarizer, max_history_tokens=6000,
                                summary_input_max_tokens=8000).build_history(s, SYSTEM)
    assert len(summarizer.inputs) == 1 and s.summary_watermark > 0
    first_seq = next(m.seq for m in s.messages_after(s.summary_watermark))
    assert history[2]["content"].startswith(("U", "A"))
    assert first_seq == s.summary_watermark + 1
    # Nothing lost: everything after the watermark replays.
    assert len(history) - 2 == 80 - s.summary_watermark


@pytest.mark.parametrize("factor", [1.5, 2.9])
def test_a_long_summary_is_shortened_to_its_limit(keep: Chatkeep, factor: float) -> None:
    class Verbose:
        def summarize(self, previous, messages, language):  # type: ignore[no-untyped-def]
            return SummaryResult("fact. " * int(100 * factor * 4 / 6))

    s = keep.sessions.create(tenant=ORG)
    for i in range(20):
        s.add_user(f"U{i} " + "word " * 60)
        s.add_assistant(f"A{i} " + "word " * 60)
    hc = HistoryCompressor(Verbose(), max_history_tokens=1000)  # summary limit 100
    history = hc.build_history(s, SYSTEM)
    assert HeuristicCounter().count(s.summary or "") <= 100
    assert history.compressed and not history.over_budget
