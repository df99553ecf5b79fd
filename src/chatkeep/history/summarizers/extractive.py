"""``ExtractiveSummarizer``: the offline, deterministic fallback summarizer.

It keeps the sentences of user turns that carry numbers, names, dates, instructions or
negations as items, each typed by its own words
(:mod:`chatkeep.history.summarizers.classifier`), drops pleasantries, and outlines the rest.
A fold never leaves a turn without a trace: when the summary's limit cannot hold what it
keeps, each folded turn keeps the head of what its user said, clipped; when even that cannot fit,
the fold is refused (``ModelError``), so the compressor keeps the previous summary and the
watermark where it was, and the history goes out over budget, flagged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from chatkeep.errors import ModelError
from chatkeep.history.summarizers.base import SummaryResult, as_structured
from chatkeep.history.summarizers.classifier import classify, most_telling, weighs_at_least
from chatkeep.history.summary import NewItem, StructuredSummary, SummaryEdit, merge
from chatkeep.history.transcript import SPEAKER
from chatkeep.messages import Message
from chatkeep.tokens import HeuristicCounter, TokenCounter

_SENTENCES = re.compile(r"(?<=[.!?])\s+")
_PLEASANTRY = re.compile(
    r"^(?:(?:ok(?:ay)?|sure|thanks?(?: you)?(?: so much| a lot| again)?|thx|great|perfect"
    r"|cool|nice|awesome|excellent|got it|understood|acknowledged|noted|recorded|done|yes"
    r"|yep|yeah|no problem|of course|certainly|absolutely|sounds good|you're welcome"
    r"|my pleasure|happy to help|glad to help|hello|hi|hey|good (?:morning|afternoon|evening)"
    r"|bye|goodbye|cheers|will do|right|alright|all right|i see|makes sense|and|continuing"
    r"|with the plan|let me know if you need anything(?: else)?|anything else|fine|there"
    r"|how (?:can|may) i help(?: you)?(?: today)?|what can i do for you(?: today)?"
    r"|good question|great question|you too|no worries"
    r")[\s,.!?:;\u2014-]*)+$", re.IGNORECASE)


@dataclass(slots=True)
class _Turn:
    """What one folded turn (a user message and what answers it) gives the summary."""

    items: list[NewItem] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    user: list[str] = field(default_factory=list)
    """The user's kept sentences (the trace is taken from them first)."""
    assistant: list[str] = field(default_factory=list)

    def trace(self) -> str | None:
        """What the turn keeps when the limit holds no more: what the user said (its kept
        sentences, in order, to be clipped at the end), else the assistant's text; ``None``
        for a turn of pleasantries alone."""
        sentences = self.user or self.assistant
        return " ".join(sentences) if sentences else None


class ExtractiveSummarizer:
    """Offline and deterministic; an outline, not a real summary.

    The sentences of a user turn that carry something to keep (numbers, names, dates, an
    instruction, a negation) become items, each typed by its own words (a contact detail is
    a fact even when the turn goes on to say "don't call before 9"); acknowledgements and
    pleasantries are dropped; the rest is outlined one line per turn, user turns before
    assistant text. Kept within ``max_summary_tokens`` by the summary's shrink order: the
    outline's oldest lines first, then items by type priority, rules and constraints last.

    Every folded turn keeps a trace: when the shrink would drop an item this fold added (or
    every line of a turn without items), the fold keeps, for each turn, what its user said,
    clipped to its share of the room and typed by its first sentence, beside the previous
    summary shrunk to half the limit (or in its place, when the traces need it all). When
    not even that fits, :meth:`fold` raises ``ModelError``, and the compressor keeps the
    previous summary and its watermark.
    """

    #: A one-sentence user turn up to this long is kept whole; longer turns, and turns of
    #: several sentences, are taken sentence by sentence.
    MAX_TURN_CHARS = 400
    #: Weight from which a sentence becomes an item rather than an outline line.
    ITEM_WEIGHT = 2
    #: The least a clipped trace may cost: below it a trace says nothing, and the fold is
    #: refused instead.
    MIN_TRACE_TOKENS = 4

    def __init__(self, max_summary_tokens: int = 600, max_line_chars: int = 200,
                 counter: TokenCounter | None = None) -> None:
        self.max_summary_tokens = max_summary_tokens
        self.max_line_chars = max_line_chars
        self.counter = counter or HeuristicCounter()

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        """``fold`` over a summary given as text; ``language`` is ignored (extractive)."""
        return self.fold(as_structured(previous), messages, language)

    def fold(self, previous: StructuredSummary | None, messages: Sequence[Message],
             language: str) -> SummaryResult:
        """Add the telling user sentences as items and outline the rest, within the limit,
        each folded turn keeping a trace; ``ModelError`` when the limit cannot hold one."""
        turns = self._turns(messages)
        adds = [item for turn in turns for item in turn.items]
        users = [line for turn in turns for line in turn.lines if line.startswith(_USER)]
        assistants = [line for turn in turns for line in turn.lines
                      if not line.startswith(_USER)]
        summary = merge(previous, SummaryEdit(add=tuple(adds)))
        outline = [ln for ln in (previous.narrative.splitlines() if previous else ())
                   if ln.strip()]
        for line in (*users, *assistants):
            if line in outline:
                outline.remove(line)
            outline.append(line)
        summary = replace(summary, narrative="\n".join(outline))
        summary = summary.fit(self.max_summary_tokens, self.counter)
        if all(_carries(summary, turn) for turn in turns):
            return SummaryResult(summary.render(), summary=summary)
        summary = self._traced(previous, [t for t in turns if t.trace() is not None])
        return SummaryResult(summary.render(), summary=summary)

    # -- reading the turns -----------------------------------------------------------------

    def _turns(self, messages: Sequence[Message]) -> list[_Turn]:
        turns: list[_Turn] = []
        for message in messages:
            user = message.role.value == "user"
            if user or not turns:
                turns.append(_Turn())
            text = message.replay_text
            if text is None:
                continue
            sentences = [s for s in _SENTENCES.split(" ".join(text.split()))
                         if s and not _PLEASANTRY.match(s)]
            if not sentences:
                continue
            turn = turns[-1]
            if user:
                turn.user.extend(sentences)
                self._user_turn(sentences, turn)
            else:
                turn.assistant.extend(sentences)
                best = most_telling(sentences)
                turn.lines.append(f"- {SPEAKER['assistant']}: {self._line(best)}")
        return turns

    def _user_turn(self, sentences: list[str], turn: _Turn) -> None:
        whole = " ".join(sentences)
        if len(whole) <= self.MAX_TURN_CHARS and len(sentences) == 1:
            if weighs_at_least(whole, self.ITEM_WEIGHT):
                turn.items.append(NewItem(classify(whole), whole))
                return
            turn.lines.append(f"{_USER}{self._line(whole)}")
            return
        rest = []
        for sentence in sentences:
            if weighs_at_least(sentence, self.ITEM_WEIGHT):
                turn.items.append(NewItem(classify(sentence), self._line(sentence, 2)))
            else:
                rest.append(sentence)
        if rest:
            turn.lines.append(f"{_USER}{self._line(rest[0])}")

    # -- when the limit cannot hold what the fold keeps -------------------------------------

    def _traced(self, previous: StructuredSummary | None,
                turns: Sequence[_Turn]) -> StructuredSummary:
        """Each turn's trace as an item beside the previous summary shrunk to half the
        limit (its rules and constraints kept first), or, when the traces need more, in
        place of it; ``ModelError`` when not even the whole limit holds them."""
        limit, count = self.max_summary_tokens, self.counter.count
        base = StructuredSummary(folds=previous.folds if previous else 0,
                                 next_id=previous.next_id if previous else 1)
        beside = [previous.fit(limit // 2, self.counter)] if previous and previous.render() \
            else []
        for kept in (*beside, base):
            share = (limit - (count(kept.render()) if kept is not base else 0)) \
                // max(1, len(turns))
            while share >= self.MIN_TRACE_TOKENS:
                adds = tuple(self._trace_item(turn, share) for turn in turns)
                candidate = merge(kept, SummaryEdit(add=adds))
                if count(candidate.render()) <= limit:
                    return candidate
                share -= max(1, share // 10)
        raise ModelError(
            f"the offline summary cannot carry {len(turns)} folded turns within {limit} "
            f"tokens (at least {self.MIN_TRACE_TOKENS} each): fold refused, the previous "
            f"summary is kept")

    def _trace_item(self, turn: _Turn, tokens: int) -> NewItem:
        """The turn's trace, typed by its first sentence: what the turn leads with (a
        contact detail, a question) is what it is, whatever a later sentence forbids."""
        text = self._clipped(turn.trace() or "", tokens)
        return NewItem(classify(_SENTENCES.split(text, 1)[0]), text)

    def _clipped(self, text: str, tokens: int) -> str:
        """``text``'s head, cut at a word, costing at most ``tokens`` (with its ellipsis)."""
        if self.counter.count(text) <= tokens:
            return text
        low, high = 1, len(text)
        while low < high:  # the longest head that fits
            middle = (low + high + 1) // 2
            if self.counter.count(text[:middle].rstrip() + "…") <= tokens:
                low = middle
            else:
                high = middle - 1
        head = text[:low]
        cut = head.rfind(" ")
        if cut > len(head) // 2:
            head = head[:cut]
        return head.rstrip(" ,;:") + "…"

    def _line(self, text: str, factor: int = 1) -> str:
        limit = self.max_line_chars * factor
        return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_USER = f"- {SPEAKER['user']}: "


def _carries(summary: StructuredSummary, turn: _Turn) -> bool:
    """Whether ``summary`` still holds what ``turn`` gave: every item it added, and when it
    added none, one of its outline lines (a turn of pleasantries gave nothing)."""
    if turn.trace() is None:
        return True
    texts = {i.text for i in summary.items}
    if turn.items:
        return all(" ".join(i.text.split()) in texts for i in turn.items)
    lines = set(summary.narrative.splitlines())
    return any(line in lines for line in turn.lines)
