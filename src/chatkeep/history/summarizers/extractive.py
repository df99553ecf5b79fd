"""``ExtractiveSummarizer``: the offline, deterministic fallback summarizer.

It keeps whole user turns that carry numbers, names, dates, instructions or negations as
typed items (:mod:`chatkeep.history.summarizers.classifier`), drops pleasantries, and
outlines the rest.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

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


class ExtractiveSummarizer:
    """Offline and deterministic; an outline, not a real summary.

    A user turn that carries something to keep (numbers, names, dates, an instruction, a
    negation) becomes a typed item, whole; acknowledgements and pleasantries are dropped;
    the rest is outlined one line per turn, user turns before assistant text. Kept within
    ``max_summary_tokens`` by the summary's shrink order: the outline's oldest lines first,
    then items by type priority, rules and constraints last.
    """

    #: A user turn longer than this is taken sentence by sentence instead of whole.
    MAX_TURN_CHARS = 400
    #: Weight from which a sentence becomes an item rather than an outline line.
    ITEM_WEIGHT = 2

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
        """Add the telling user turns as items and outline the rest, within the limit."""
        adds: list[NewItem] = []
        users: list[str] = []
        assistants: list[str] = []
        for message in messages:
            text = message.replay_text
            if text is None:
                continue
            sentences = [s for s in _SENTENCES.split(" ".join(text.split()))
                         if s and not _PLEASANTRY.match(s)]
            if not sentences:
                continue
            if message.role.value == "user":
                self._user_turn(sentences, adds, users)
            else:
                best = most_telling(sentences)
                assistants.append(f"- {SPEAKER['assistant']}: {self._line(best)}")
        summary = merge(previous, SummaryEdit(add=tuple(adds)))
        outline = [ln for ln in (previous.narrative.splitlines() if previous else ())
                   if ln.strip()]
        for line in (*users, *assistants):
            if line in outline:
                outline.remove(line)
            outline.append(line)
        summary = replace(summary, narrative="\n".join(outline))
        summary = summary.fit(self.max_summary_tokens, self.counter)
        return SummaryResult(summary.render(), summary=summary)

    def _user_turn(self, sentences: list[str], adds: list[NewItem], lines: list[str]) -> None:
        whole = " ".join(sentences)
        if len(whole) <= self.MAX_TURN_CHARS:
            if any(weighs_at_least(s, self.ITEM_WEIGHT) for s in sentences):
                adds.append(NewItem(classify(whole), whole))
                return
            lines.append(f"- {SPEAKER['user']}: {self._line(sentences[0])}")
            return
        rest = []
        for sentence in sentences:
            if weighs_at_least(sentence, self.ITEM_WEIGHT):
                adds.append(NewItem(classify(sentence), self._line(sentence, 2)))
            else:
                rest.append(sentence)
        if rest:
            lines.append(f"- {SPEAKER['user']}: {self._line(rest[0])}")

    def _line(self, text: str, factor: int = 1) -> str:
        limit = self.max_line_chars * factor
        return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
