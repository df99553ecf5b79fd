"""The offline classifier: which item type a sentence is, and how strongly to keep it.

English word lists and the labels writers give their lines ("Rule: ..."); used by the
``ExtractiveSummarizer`` to type the items it keeps and pick the telling sentences.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from chatkeep.history.summary import ItemType, WordSearch, salience

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
    """How strongly the offline summarizer keeps ``text``: its salience, plus a bonus when
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
