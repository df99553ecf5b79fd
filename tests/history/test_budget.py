"""An honest budget: estimates and over_budget, clipping of oversized messages, chunked
folding of an oversized backlog, summaries kept within their limit."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from chatkeep import Chatkeep, HistoryCompressor, Ref, ToolCall
from chatkeep.config import ChatConfig, Config, ConfigError
from chatkeep.formats.base import fence
from chatkeep.history import SummaryResult
from chatkeep.history.clip import clip
from chatkeep.history.plan import MESSAGE_OVERHEAD
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


# -- how often folds happen ----------------------------------------------------------------


class CountingSummarizer:
    """Answers every fold with the same summary; records what each call was shown."""

    def __init__(self, summary: str = "S " * 200) -> None:
        self.summary = summary.strip()
        self.folds: list[list[int]] = []

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        self.folds.append([m.seq for m in messages])
        return SummaryResult(self.summary)


def conversation(messages: int, seed: int = 3) -> list[str]:
    """Deterministic user/assistant texts of 20 to 120 words."""
    rng = random.Random(seed)
    return [f"{'U' if n % 2 == 0 else 'A'}{n} " + "word " * rng.randint(20, 120)
            for n in range(messages)]


def fewest_folds(texts: list[str], budget: int, fixed: int, summary: int, tail: int) -> int:
    """The fewest folds that keep every history (one before every answer) within the
    budget while showing the summarizer every message it folds: fold only when the
    history would be over the budget, and then everything but the last ``tail`` messages.
    Folding earlier or less never leaves less to fold later, so nothing needs fewer."""
    counter = HeuristicCounter()
    costs = [counter.count(t) + MESSAGE_OVERHEAD for t in texts]
    watermark = folds = 0
    for n in range(0, len(texts), 2):
        if fixed + (summary if folds else 0) + sum(costs[watermark:n + 1]) > budget:
            watermark, folds = n + 1 - tail, folds + 1
    return folds


def run_conversation(keep: Chatkeep, hc: HistoryCompressor, texts: list[str]) -> list[int]:
    """Every text in turn, a history before every answer; the histories' estimates."""
    s = keep.sessions.create(tenant=ORG)
    sizes = []
    for n, text in enumerate(texts):
        if n % 2:
            s.add_assistant(text)
            continue
        s.add_user(text)
        history = hc.build_history(s, SYSTEM)
        assert not history.over_budget, history.over_budget_reason
        assert history[-1]["content"] == text  # the question always goes verbatim
        sizes.append(history.tokens)
    return sizes


def test_by_default_a_long_conversation_folds_as_rarely_as_the_budget_allows(
        keep: Chatkeep) -> None:
    counter = HeuristicCounter()
    texts = conversation(160)
    budget = 2000
    summarizer = CountingSummarizer()
    hc = HistoryCompressor(summarizer, max_history_tokens=budget)
    assert hc.config.compress_target == 0 and hc.config.recent_messages_min == 4
    sizes = run_conversation(keep, hc, texts)
    assert max(sizes) <= budget
    fixed = counter.count(SYSTEM) + MESSAGE_OVERHEAD
    summary = counter.count(fence(summarizer.summary)) + MESSAGE_OVERHEAD
    floor = fewest_folds(texts, budget, fixed, summary, tail=4)
    assert floor >= 5  # the conversation is several budgets long
    assert len(summarizer.folds) == floor
    # Each message was shown once, in order, and each fold left only the protected tail.
    shown = [seq for fold in summarizer.folds for seq in fold]
    assert shown == list(range(1, len(shown) + 1))
    # The previous default (fold down to 60% of the budget) calls the summarizer far more.
    often = CountingSummarizer()
    run_conversation(keep, HistoryCompressor(often, max_history_tokens=budget,
                                             compress_target=0.6), texts)
    assert len(often.folds) > floor + 3


@pytest.mark.parametrize("target", [0.1, 0.2, 0.3])
def test_a_low_compress_target_never_leaves_the_history_over_budget(
        keep: Chatkeep, target: float) -> None:
    """Formerly, when the fixed parts and the tail alone cost more than the target,
    folding waited for a batch of (1 - target) of the budget and the history went over."""
    summarizer = CountingSummarizer()
    hc = HistoryCompressor(summarizer, max_history_tokens=2000, compress_target=target)
    sizes = run_conversation(keep, hc, conversation(100, seed=5))
    assert max(sizes) <= 2000 and summarizer.folds


def test_folding_waits_for_a_batch_only_when_folding_cannot_fit_the_budget(
        keep: Chatkeep) -> None:
    """The protected tail alone is over the budget: each small turn would otherwise cost a
    summarizer call; they are folded in batches, the history flagged over budget."""
    summarizer = CountingSummarizer("S")
    hc = HistoryCompressor(summarizer, max_history_tokens=1000)
    s = keep.sessions.create(tenant=ORG)
    reasons = []
    for i in range(40):
        s.add_user(f"U{i} " + ("big " * 300 if i >= 38 else "small " * 30))
        history = hc.build_history(s, SYSTEM)
        s.add_assistant(f"A{i} " + ("big " * 300 if i >= 37 else "small " * 30))
        reasons.append(history.over_budget_reason or "")
    assert summarizer.folds  # folded while folding could fit the budget
    assert not any("waits" in r for r in reasons[:37])
    calls = len(summarizer.folds)
    for i in range(40, 60):  # the last four messages are now ~1200 tokens
        s.add_user(f"U{i} " + "big " * 300)
        history = hc.build_history(s, SYSTEM)
        s.add_assistant(f"A{i} " + "big " * 300)
        assert history.over_budget
        reasons.append(history.over_budget_reason or "")
    assert any("folding waits until" in r for r in reasons[40:])
    # Far fewer calls than turns: about one per budget's worth of foldable messages.
    assert 0 < len(summarizer.folds) - calls <= 12


@pytest.mark.parametrize("value", [-0.1, 1.5, float("nan"), "0.5", True, None])
def test_compress_target_out_of_range_is_a_config_error(value: object) -> None:
    with pytest.raises(ConfigError, match="compress_target"):
        ChatConfig(compress_target=value).validate()  # type: ignore[arg-type]


def test_compress_target_zero_is_the_default_and_settable_by_name() -> None:
    assert ChatConfig().compress_target == 0
    for value in (0, 0.0, 0.6, 1):
        ChatConfig(compress_target=value).validate()
    assert Config.from_dict({"chat": {"compress_target": "0.4"}}).chat.compress_target == 0.4
    assert HistoryCompressor(None, compress_target=0.6).config.compress_target == 0.6
    with pytest.raises(ConfigError, match="summary_max_tokens"):
        ChatConfig(max_history_tokens=500, summary_max_tokens=500).validate()
