"""Summarisers: fold old turns into the running summary.

``LLMSummarizer`` asks a cheap model for an edit of the structured summary (typed items
to add, update or retire by id, and a short narrative) as JSON, and merges it in code
(:mod:`chatkeep.history.summary`); a plain-text reply is kept as the narrative.
``ExtractiveSummarizer`` is the offline, deterministic fallback: it keeps whole user turns
that carry numbers, names, dates, instructions or negations as typed items, and outlines
the rest. Both receive only user/assistant text, already redacted when the session
redacts, and the previous summary in the same form.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from chatkeep.errors import ModelError
from chatkeep.history.summary import (
    ItemType,
    NewItem,
    StructuredSummary,
    SummaryEdit,
    WordSearch,
    merge,
    read_reply,
    salience,
)
from chatkeep.history.transcript import SPEAKER, transcript
from chatkeep.llm.adapt import as_chat_model
from chatkeep.llm.base import ChatModel, Completion
from chatkeep.messages import Message, Usage
from chatkeep.tokens import HeuristicCounter, TokenCounter

log = logging.getLogger("chatkeep.history")


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """A new running summary and the usage it cost (``None`` offline).

    ``text`` is the summary as it replays; ``summary`` its structured form when the
    summariser keeps one (``None``: ``text`` is the whole new summary, a narrative)."""

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
    """A summariser that reads and writes the structured summary: the compressor calls
    ``fold`` instead of ``summarize`` and stores the ``SummaryResult.summary`` it returns."""

    def fold(self, previous: StructuredSummary | None, messages: Sequence[Message],
             language: str) -> SummaryResult:
        """Fold ``messages`` into ``previous`` (items kept unless retired by id)."""
        ...


SYSTEM_PROMPT = """\
Update a conversation's running summary. Reply with one JSON object: {{"add": [{{"type": \
"...", "text": "..."}}], "update": [{{"id": "...", "text": "..."}}], "retire": ["id"], \
"narrative": "..."}}. Types: rule (the user's instructions), constraint (budget, deadline, \
limit), task (state, next steps, open questions), fact (facts, decisions), preference. Add \
each new thing worth keeping as one short item, exact values kept; update items whose value \
changed; retire items no longer true; items not named stay. Narrative: at most {max_words} \
words. Keep placeholders like <EMAIL_1>. Write in {language}."""

USER_PROMPT = """\
Items so far:
{items}

Narrative so far:
{narrative}

New part of the conversation:
{transcript}"""

#: Tokens a reply may run past three times the summary limit before it is refused.
REPLY_SLACK = 200


class LLMSummarizer:
    """Summarise with a (cheap) chat model; the prompt asks for the configured language.

    The model is asked for JSON (``response_format`` when the endpoint supports it: one
    that rejects it is asked again without, and not asked with it again). A JSON reply is
    checked strictly and merged by item id; a plain-text reply becomes the narrative and
    leaves the items as they were; an empty or failed reply raises (``ModelError``).
    """

    def __init__(self, model: ChatModel, model_name: str = "gpt-4o-mini", *,
                 max_summary_tokens: int = 600, counter: TokenCounter | None = None,
                 json_mode: bool = True) -> None:
        # Guarded: it sends only through the egress bound around the call (the compressor
        # binds the session's), whoever built this summariser.
        self.model = as_chat_model(model)
        self.model_name = model_name
        self.max_summary_tokens = max_summary_tokens
        self.counter = counter or HeuristicCounter()
        self.json_mode = json_mode

    def build_messages(self, previous: StructuredSummary | str | None,
                       messages: Sequence[Message], language: str) -> list[dict[str, str]]:
        """The exact request body (exposed so tests and users can see the prompt). The
        previous summary goes in once: its items with their ids, and its narrative."""
        summary = _structured(previous)
        max_words = max(40, int(self.max_summary_tokens * 0.3))
        items = summary.ledger() if summary and summary.items else "(none)"
        narrative = summary.narrative.strip() if summary and summary.narrative.strip() \
            else "(none)"
        return [
            {"role": "system",
             "content": SYSTEM_PROMPT.format(language=language, max_words=max_words)},
            {"role": "user", "content": USER_PROMPT.format(
                items=items, narrative=narrative, transcript=transcript(messages))},
        ]

    def summarize(self, previous: str | None, messages: Sequence[Message],
                  language: str) -> SummaryResult:
        """``fold`` over a summary given as text (its stored or replayed form)."""
        return self.fold(_structured(previous), messages, language)

    def fold(self, previous: StructuredSummary | None, messages: Sequence[Message],
             language: str) -> SummaryResult:
        """Ask the model and merge its edit; a reply far over the length limit is refused
        (``ModelError``), and so is an off-shape JSON reply."""
        completion = self._complete(self.build_messages(previous, messages, language))
        text = completion.text.strip()
        # A reply far past the requested length is not a summary (runaway or echo).
        tokens = self.counter.count(text)
        if tokens > self.max_summary_tokens * 3 + REPLY_SLACK:
            raise ModelError(f"summary reply of {tokens} tokens is far over the "
                             f"{self.max_summary_tokens}-token limit; refusing it")
        summary = merge(previous, read_reply(text, previous))
        summary = summary.fit(self.max_summary_tokens, self.counter)
        return SummaryResult(summary.render(), completion.usage, completion.model, summary)

    def _complete(self, messages: list[dict[str, str]]) -> Completion:
        options: dict[str, Any] = {"model": self.model_name, "temperature": 0.2,
                                   "max_tokens": self.max_summary_tokens * 2 + REPLY_SLACK}
        if self.json_mode:
            try:
                return self.model.complete(messages, json_mode=True, **options)
            except (ModelError, TypeError) as exc:
                if not _refuses_json_mode(exc):
                    raise
                log.info("%s refuses response_format; asking for JSON in the prompt only",
                         self.model_name)
                self.json_mode = False
        return self.model.complete(messages, **options)


def _refuses_json_mode(exc: Exception) -> bool:
    text = str(exc).lower()
    if isinstance(exc, TypeError):
        return "json_mode" in text
    return "response_format" in text or "json_object" in text or "json mode" in text


def _structured(previous: StructuredSummary | str | None) -> StructuredSummary | None:
    if previous is None or isinstance(previous, StructuredSummary):
        return previous
    return StructuredSummary.load(previous)


# -- offline -------------------------------------------------------------------------------

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
_PREFERENCE = re.compile(
    r"\b(?:prefers?|preferred|preference|rather|i (?:like|love|hate|want)|wants|likes"
    r"|dislikes|favou?rite|style|tone)\b", re.IGNORECASE)
_CONSTRAINT = re.compile(
    r"\b(?:budget|deadline|due|limit|cap|at most|at least|no more than|no later than|maximum"
    r"|minimum|until|timezone|time zone|quota)\b|[$€£¥]\s?\d|\d\s?(?:%|percent|usd|eur"
    r"|gbp|hours?|days?|weeks?|months?|kg|km|mb|gb|tb)\b", re.IGNORECASE)
_RULE = re.compile(
    r"^(?:always|never|only|do not|don't|must|avoid|make sure|remember to|please (?:always"
    r"|never|do not|don't))\b|\b(?:never|always|must(?: not)?|do not|don't|not allowed"
    r"|forbidden|prohibited)\b|^if\b[^.]*,\s*(?:then\s+)?(?:stop|ask|escalate|refuse|tell"
    r"|call|do|don't|never|always)\b", re.IGNORECASE)
_TASK = re.compile(
    r"\b(?:next steps?|to ?do|working on|current task|task|we need to|i need to|needs to"
    r"|blocked|failing|open question|awaiting|pending|in progress|the plan is|goal"
    r"|milestone|steps? \d)\b", re.IGNORECASE)


_LABEL = re.compile(
    r"^[\w ]{0,24}?\b(?P<kind>rules?|instructions?|constraints?|requirements?|limits?"
    r"|deadlines?|budgets?|facts?|decisions?|goals?|tasks?|state|todo|next steps?"
    r"|preferences?)\s*:", re.IGNORECASE)
_LABELS = {"rule": ItemType.RULE, "instruction": ItemType.RULE,
           "constraint": ItemType.CONSTRAINT, "requirement": ItemType.CONSTRAINT,
           "limit": ItemType.CONSTRAINT, "deadline": ItemType.CONSTRAINT,
           "budget": ItemType.CONSTRAINT, "fact": ItemType.FACT, "decision": ItemType.FACT,
           "goal": ItemType.TASK, "task": ItemType.TASK, "state": ItemType.TASK,
           "todo": ItemType.TASK, "next step": ItemType.TASK,
           "preference": ItemType.PREFERENCE}


# What each word list's matches must contain (see WordSearch; the constraints' amounts and
# durations need a digit): most sentences hold none.
_HINTS = {
    "preference": ("prefer", "rather", "like", "love", "hate", "want", "fav", "style",
                   "tone"),
    "constraint": ("budget", "deadline", "due", "limit", "cap", "at most", "at least",
                   "no more than", "no later than", "maximum", "minimum", "until",
                   "timezone", "time zone", "quota", "$", "€", "£", "¥"),
    "rule": ("always", "never", "only", "do not", "don't", "must", "avoid", "make sure",
             "remember to", "not allowed", "forbidden", "prohibited", "if"),
    "task": ("next step", "todo", "to do", "working on", "task", "need", "blocked",
             "failing", "open question", "awaiting", "pending", "in progress",
             "the plan is", "goal", "milestone", "step"),
}
_IS_PREFERENCE = WordSearch(_PREFERENCE, _HINTS["preference"])
_IS_CONSTRAINT = WordSearch(_CONSTRAINT, _HINTS["constraint"], digits=True)
_IS_RULE = WordSearch(_RULE, _HINTS["rule"])
_IS_TASK = WordSearch(_TASK, _HINTS["task"])
#: Any of the four word lists at once: whether a sentence reads as more than a fact.
_NOT_FACT = WordSearch(re.compile("|".join(f"(?:{p.pattern})" for p in (
    _PREFERENCE, _CONSTRAINT, _RULE, _TASK)), re.IGNORECASE),
    tuple(dict.fromkeys(h for hints in _HINTS.values() for h in hints)), digits=True)


def _labelled(text: str) -> ItemType | None:
    label = _LABEL.match(text)
    if label is None:
        return None
    kind = label.group("kind").lower()
    return _LABELS[kind[:-1] if kind.endswith("s") and kind[:-1] in _LABELS else kind]


def classify(text: str) -> ItemType:
    """The item type a sentence most likely is (offline heuristics, English): a label the
    writer gave it ("Rule: ...", "Deadline: ..."), else the words it uses."""
    labelled = _labelled(text)
    if labelled is not None:
        return labelled
    low = text.lower()
    if _IS_PREFERENCE(text, low):
        return ItemType.PREFERENCE
    if _IS_CONSTRAINT(text, low):
        return ItemType.CONSTRAINT
    if _IS_RULE(text, low):
        return ItemType.RULE
    if _IS_TASK(text, low):
        return ItemType.TASK
    return ItemType.FACT


#: What reading as a rule, constraint, task or preference adds to a sentence's weight.
BONUS = 2


def _bonus(text: str) -> int:
    labelled = _labelled(text)
    if labelled is None:  # one search instead of classify's four
        return BONUS if _NOT_FACT(text) else 0
    return 0 if labelled is ItemType.FACT else BONUS


def weight(text: str) -> int:
    """How strongly the offline summariser keeps ``text``: its salience, plus a bonus when
    it reads as a rule, constraint, task or preference."""
    return salience(text) + _bonus(text)


def weighs_at_least(text: str, wanted: int) -> bool:
    """``weight(text) >= wanted``, looking for the bonus only when salience falls short."""
    base = salience(text)
    return base >= wanted or base + _bonus(text) >= wanted


def most_telling(sentences: Sequence[str]) -> str:
    """``max(sentences, key=weight)`` (the first of the heaviest), looking for the bonus
    (the costly part) only in sentences whose salience still lets them win."""
    base = [salience(s) for s in sentences]
    best, heaviest = 0, -1
    for n in sorted(range(len(sentences)), key=lambda n: (-base[n], n)):
        if base[n] + BONUS < heaviest or (base[n] + BONUS == heaviest and n > best):
            break  # neither this one nor any after it (lighter, or later) can win
        total = base[n] + _bonus(sentences[n])
        if total > heaviest or (total == heaviest and n < best):
            best, heaviest = n, total
    return sentences[best]


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
        return self.fold(_structured(previous), messages, language)

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
