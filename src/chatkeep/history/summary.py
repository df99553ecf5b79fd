"""The structured running summary: typed items merged by id in code, plus a short narrative.

A fold never rewrites the summary from scratch. The summarizer proposes an edit (items
to add, items to update or retire by id, a new narrative) and :func:`merge` applies it in
code, so an item the model forgot to repeat is kept, and a contradicting update replaces
the item it names. :meth:`StructuredSummary.fit` keeps the rendered summary within its
limit by dropping the narrative first, then whole items by type priority (rules and
constraints last), the least telling ones first within a type.

Stored form: a JSON object marked ``"format": "chatkeep.summary/1"`` when there are items;
a summary that is a narrative alone is stored as its plain text, which is also how every
summary written before items existed reads back (:meth:`StructuredSummary.load`).
No I/O here: plain code over values, shared by every shell.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from chatkeep.errors import InvalidArgument, SummaryReplyError
from chatkeep.history.clip import clip
from chatkeep.tokens import TokenCounter

#: Marks the stored JSON form (anything else stored is a narrative in plain text).
FORMAT = "chatkeep.summary/1"
#: Longest item the summarizer may propose, in characters.
MAX_ITEM_CHARS = 600
#: Most operations one reply may carry.
MAX_OPERATIONS = 100
#: Smallest room worth keeping a clipped narrative for, in tokens.
MIN_NARRATIVE_TOKENS = 12


class ItemType(StrEnum):
    """What kind of thing an item records; decides its section and how long it is kept."""

    RULE = "rule"
    """An instruction or rule the user set ("never share the vault code")."""
    CONSTRAINT = "constraint"
    """A budget, deadline or limit ("budget cap is $500")."""
    TASK = "task"
    """The task's state, next steps and open questions."""
    FACT = "fact"
    """A fact or decision."""
    PREFERENCE = "preference"
    """How the user likes things done."""


#: Section titles, in the order the sections are rendered.
SECTIONS: dict[ItemType, str] = {
    ItemType.RULE: "Rules",
    ItemType.CONSTRAINT: "Constraints",
    ItemType.TASK: "Task and next steps",
    ItemType.FACT: "Facts and decisions",
    ItemType.PREFERENCE: "Preferences",
}
#: When the summary must shrink (after the narrative): the first type here goes first.
SHRINK_ORDER: tuple[ItemType, ...] = (
    ItemType.PREFERENCE, ItemType.FACT, ItemType.TASK, ItemType.CONSTRAINT, ItemType.RULE)
NARRATIVE_TITLE = "Narrative"
_PREFIX = {ItemType.RULE: "r", ItemType.CONSTRAINT: "c", ItemType.TASK: "t",
           ItemType.FACT: "f", ItemType.PREFERENCE: "p"}
#: Joins texts so one filter call (restore, redact) serves all of a summary's texts.
_JOIN = "\n\u241e\n"


@dataclass(frozen=True, slots=True)
class SummaryItem:
    """One typed item of the summary; ``id`` is how later folds update or retire it."""

    id: str
    type: ItemType
    text: str
    touched: int = 0
    """The fold that last added or updated it (newer items outlive older ones of a type)."""


@dataclass(frozen=True, slots=True)
class NewItem:
    """An item the summarizer proposes to add."""

    type: ItemType
    text: str


@dataclass(frozen=True, slots=True)
class ItemUpdate:
    """A new text (and optionally type) for the item ``id``."""

    id: str
    text: str
    type: ItemType | None = None


@dataclass(frozen=True, slots=True)
class SummaryEdit:
    """What one fold changes: the summarizer's proposal, applied by :func:`merge`."""

    add: tuple[NewItem, ...] = ()
    update: tuple[ItemUpdate, ...] = ()
    retire: tuple[str, ...] = ()
    narrative: str | None = None
    """The new narrative; ``None`` (or blank) keeps the previous one."""


@dataclass(frozen=True, slots=True)
class StructuredSummary:
    """The running summary of a session: items by type, and a narrative."""

    items: tuple[SummaryItem, ...] = ()
    narrative: str = ""
    folds: int = 0
    """How many folds have written it."""
    next_id: int = 1
    """Number of the next item id (ids are never reused, retired ones included)."""

    # -- reading and storing ---------------------------------------------------------------

    @classmethod
    def load(cls, stored: str | None) -> StructuredSummary | None:
        """The summary stored as ``stored``: the JSON form, or any other text (a summary
        written before items existed, or a narrative alone) as the narrative.

        Parsed once per stored text (every turn reads the summary; it changes only when
        a fold writes a new one); summaries are immutable, so sharing one is safe."""
        if not stored or not stored.strip():
            return None
        return _parsed(stored) if cls is StructuredSummary else cls._parse(stored)

    @classmethod
    def _parse(cls, stored: str) -> StructuredSummary:
        if stored.lstrip().startswith("{"):
            try:
                data = json.loads(stored)
            except ValueError:
                data = None
            if isinstance(data, Mapping) and data.get("format") == FORMAT:
                return cls._from_json(data)
        return cls(narrative=stored)

    @classmethod
    def _from_json(cls, data: Mapping[str, Any]) -> StructuredSummary:
        items = []
        for raw in data.get("items") or ():
            try:
                kind = ItemType(raw["type"])
            except (KeyError, TypeError, ValueError):
                kind = ItemType.FACT  # a type from a later version: keep the item
            items.append(SummaryItem(str(raw["id"]), kind, str(raw["text"]),
                                     int(raw.get("touched") or 0)))
        return cls(tuple(items), str(data.get("narrative") or ""),
                   int(data.get("folds") or 0), int(data.get("next") or len(items) + 1))

    def dump(self) -> str:
        """The stored form: the narrative's plain text when there are no items (readable by
        any earlier version), else the JSON form."""
        if not self.items and not self.narrative.lstrip().startswith("{"):
            return self.narrative
        return json.dumps({
            "format": FORMAT, "folds": self.folds, "next": self.next_id,
            "items": [{"id": i.id, "type": i.type.value, "text": i.text, "touched": i.touched}
                      for i in self.items],
            "narrative": self.narrative}, ensure_ascii=False)

    # -- rendering -------------------------------------------------------------------------

    def render(self) -> str:
        """The compact replay: one section per type in use, then the narrative. A summary
        without items renders as its narrative alone."""
        if not self.items:
            return self.narrative.strip()
        lines: list[str] = []
        for kind, title in SECTIONS.items():
            texts = [i.text for i in self.items if i.type is kind]
            if texts:
                lines.append(f"{title}:")
                lines.extend(f"- {text}" for text in texts)
        if self.narrative.strip():
            lines.append(f"{NARRATIVE_TITLE}:")
            lines.append(self.narrative.strip())
        return "\n".join(lines)

    def ledger(self) -> str:
        """The items as the summarizer reads them: under their type, one per line with its
        id (``rule:`` then ``[r1] Never share the vault code.``)."""
        lines: list[str] = []
        for kind in SECTIONS:
            items = [i for i in self.items if i.type is kind]
            if items:
                lines.append(f"{kind.value}:")
                lines.extend(f"[{i.id}] {i.text}" for i in items)
        return "\n".join(lines)

    # -- transforming ----------------------------------------------------------------------

    def get(self, item_id: str) -> SummaryItem | None:
        """The item called ``item_id``, if any."""
        return next((i for i in self.items if i.id == item_id), None)

    def texts(self) -> list[str]:
        """Every text it holds (the narrative first, then each item's)."""
        return [self.narrative, *(i.text for i in self.items)]

    def map_texts(self, change: Callable[[list[str]], list[str]]) -> StructuredSummary:
        """The same summary with every text passed through ``change`` (all at once, in the
        order of :meth:`texts`): how the compressor restores, redacts and stores them."""
        texts = self.texts()
        changed = change(texts)
        if len(changed) != len(texts):
            raise InvalidArgument("a text filter must return one text per text")
        if changed == texts:  # nothing to restore or redact: the usual case, every turn
            return self
        items = tuple(replace(i, text=t) for i, t in zip(self.items, changed[1:], strict=True))
        return replace(self, items=items, narrative=changed[0])

    def fit(self, limit: int, counter: TokenCounter) -> StructuredSummary:
        """This summary shrunk until its rendering costs at most ``limit`` tokens: the
        narrative first (its oldest lines, then clipped, then dropped), then whole items in
        :data:`SHRINK_ORDER`, within a type the least telling and least recent first."""
        if counter.count(self.render()) <= limit:
            return self
        shrunk = _fit_narrative(self, limit, counter)
        if counter.count(shrunk.render()) <= limit:
            return shrunk
        shrunk = replace(shrunk, narrative="")
        victims = [i.id for i in sorted(shrunk.items, key=_drop_key)]

        def without(count: int) -> StructuredSummary:  # the first ``count`` victims gone
            dropped = set(victims[:count])
            return replace(shrunk, items=tuple(i for i in shrunk.items if i.id not in dropped))

        count = _least(1, len(victims), lambda n: counter.count(without(n).render()) <= limit)
        return without(count) if count is not None else replace(shrunk, items=())


def _least(low: int, high: int, fits: Callable[[int], bool]) -> int | None:
    """The least ``n`` in ``low..high`` for which ``fits(n)``, or ``None``; by bisection,
    as dropping more (a larger ``n``) never makes a summary cost more."""
    found = None
    while low <= high:
        middle = (low + high) // 2
        if fits(middle):
            found, high = middle, middle - 1
        else:
            low = middle + 1
    return found


@functools.lru_cache(maxsize=256)
def _parsed(stored: str) -> StructuredSummary:
    return StructuredSummary._parse(stored)


def _fit_narrative(summary: StructuredSummary, limit: int,
                   counter: TokenCounter) -> StructuredSummary:
    lines = [ln for ln in summary.narrative.strip().splitlines() if ln.strip()]

    def newest(count: int) -> StructuredSummary:  # an outline: its oldest lines go first
        return replace(summary, narrative="\n".join(lines[count:]))

    popped = _least(1, len(lines) - 1,
                    lambda n: counter.count(newest(n).render()) <= limit)
    if popped is not None:
        return newest(popped)
    text = lines[-1] if lines else ""
    bare = replace(summary, narrative="")
    room = limit - counter.count(bare.render()) - (
        counter.count(f"\n{NARRATIVE_TITLE}:\n") if summary.items else 0)
    for _ in range(8):  # shrink until the pluggable counter agrees
        if room < MIN_NARRATIVE_TOKENS or not text:
            break
        clipped = clip(text, room, counter)[0]
        candidate = replace(summary, narrative=clipped)
        if clipped and counter.count(candidate.render()) <= limit:
            return candidate
        room -= max(1, room // 10)
    return bare


def _drop_key(item: SummaryItem) -> tuple[int, int, int, int]:
    number = int(item.id[1:]) if item.id[1:].isdigit() else 0
    return (SHRINK_ORDER.index(item.type), salience(item.text), item.touched, number)


# -- merging -------------------------------------------------------------------------------


def merge(previous: StructuredSummary | None, edit: SummaryEdit) -> StructuredSummary:
    """Apply ``edit`` to ``previous``: retire, update and add by id. Items the edit does not
    name are kept as they were; an added item equal to a kept one only refreshes it."""
    base = previous or StructuredSummary()
    fold = base.folds + 1
    retired = set(edit.retire)
    updates = {u.id: u for u in edit.update}
    items: list[SummaryItem] = []
    for item in base.items:
        if item.id in retired:
            continue
        update = updates.get(item.id)
        if update is not None:
            item = SummaryItem(item.id, update.type or item.type, _one_line(update.text), fold)
        items.append(item)
    next_id = base.next_id
    index: dict[str, int] = {}  # each text's first item, as the items grow
    for n, item in enumerate(items):
        index.setdefault(_key(item.text), n)
    for new in edit.add:
        text = _one_line(new.text)
        same = index.get(_key(text))
        if same is not None:
            items[same] = replace(items[same], touched=fold)
            continue
        index[_key(text)] = len(items)
        items.append(SummaryItem(f"{_PREFIX[new.type]}{next_id}", new.type, text, fold))
        next_id += 1
    narrative = base.narrative
    if edit.narrative is not None and edit.narrative.strip():
        narrative = edit.narrative.strip()
    return StructuredSummary(tuple(items), narrative, fold, next_id)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _key(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".")


# -- reading the summarizer's reply --------------------------------------------------------

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


def read_reply(text: str, previous: StructuredSummary | None) -> SummaryEdit:
    """The edit a reply proposes. A JSON object is checked strictly
    (:func:`parse_edit`); any other non-empty text is the new narrative, the items left as
    they were (small models often ignore JSON instructions: the reply is still used)."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise SummaryReplyError("the summarizer's reply is empty")
    if body.startswith("{") or (body.startswith("[") and _is_json(body)):
        return parse_edit(body, previous)
    return SummaryEdit(narrative=text.strip())


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def parse_edit(text: str, previous: StructuredSummary | None) -> SummaryEdit:
    """``{"add": [...], "update": [...], "retire": [...], "narrative": "..."}`` checked
    strictly: unknown keys or types, ids the summary does not hold, an id named twice,
    empty or overlong texts all raise ``SummaryReplyError``."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SummaryReplyError(f"the summarizer's reply is not JSON: {exc}") from None
    if not isinstance(data, Mapping):
        raise SummaryReplyError("the summarizer's reply is not a JSON object")
    unknown = sorted(set(data) - {"add", "update", "retire", "narrative"})
    if unknown:
        raise SummaryReplyError(f"the summarizer's reply has unknown keys {unknown}")
    known = {i.id for i in previous.items} if previous else set()
    add = tuple(NewItem(_type(raw.get("type"), f"add[{n}]"), _text(raw.get("text"),
                                                                   f"add[{n}] text"))
                for n, raw in enumerate(_objects(data, "add")))
    updates: list[ItemUpdate] = []
    named: set[str] = set()
    for n, raw in enumerate(_objects(data, "update")):
        item_id = _id(raw.get("id"), f"update[{n}]", known, named)
        kind = None if raw.get("type") is None else _type(raw.get("type"), f"update[{n}]")
        updates.append(ItemUpdate(item_id, _text(raw.get("text"), f"update[{n}] text"), kind))
    retire = tuple(_id(raw, f"retire[{n}]", known, named)
                   for n, raw in enumerate(_list(data, "retire")))
    if len(add) + len(updates) + len(retire) > MAX_OPERATIONS:
        raise SummaryReplyError(f"the summarizer's reply holds more than {MAX_OPERATIONS} "
                                "operations")
    narrative = data.get("narrative")
    if narrative is not None and not isinstance(narrative, str):
        raise SummaryReplyError("narrative must be a string")
    return SummaryEdit(add, tuple(updates), retire, narrative)


def _list(data: Mapping[str, Any], key: str) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise SummaryReplyError(f'"{key}" must be a list')
    return value


def _objects(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    values = _list(data, key)
    for n, value in enumerate(values):
        if not isinstance(value, Mapping):
            raise SummaryReplyError(f"{key}[{n}] is not an object")
    return values


def _type(value: Any, what: str) -> ItemType:
    try:
        return ItemType(str(value).strip().lower())
    except ValueError:
        raise SummaryReplyError(f"{what} has an unknown type {value!r} (expected one of "
                                f"{[t.value for t in ItemType]})") from None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SummaryReplyError(f"{what} must be a non-empty string, got {value!r}")
    text = _one_line(value)
    if len(text) > MAX_ITEM_CHARS:
        raise SummaryReplyError(f"{what} is longer than {MAX_ITEM_CHARS} characters")
    return text


def _id(value: Any, what: str, known: set[str], named: set[str]) -> str:
    if not isinstance(value, str) or value not in known:
        raise SummaryReplyError(f"{what} names {value!r}, which the summary does not hold")
    if value in named:
        raise SummaryReplyError(f"{what}: item {value} is named twice")
    named.add(value)
    return value


# -- how telling a sentence is -------------------------------------------------------------

class WordSearch:
    """``pattern.search(text) is not None`` for a case-insensitive pattern written in
    lowercase, faster, for the sentence scoring that runs over every folded message.

    On ASCII text: first the ``hints``, substrings of which any match must contain one
    (each alternative of the pattern holds one of them, or a digit where ``digits``),
    looked for with ``in``; only text holding one is searched, lowercased, with the
    pattern's case-sensitive twin (case-insensitive matching defeats the engine's literal
    scans). Other text goes to the pattern itself, whose Unicode case folding a plain
    ``lower()`` does not reproduce. A property test holds each search to its pattern."""

    __slots__ = ("digits", "hints", "pattern", "twin")

    def __init__(self, pattern: re.Pattern[str], hints: Sequence[str] = (), *,
                 digits: bool = False) -> None:
        if re.search(r"[A-Z]", re.sub(r"\\.", "", pattern.pattern)) or \
                any(h != h.lower() for h in hints):
            raise InvalidArgument(f"{pattern.pattern!r} or its hints have uppercase letters: "
                             "the lowercased text would miss them")
        self.pattern = pattern
        self.hints = tuple(hints)
        self.digits = digits
        self.twin = re.compile(pattern.pattern, pattern.flags & ~re.IGNORECASE)

    def __call__(self, text: str, lowered: str | None = None) -> bool:
        """Whether ``text`` matches; ``lowered`` is ``text.lower()`` when the caller has it."""
        if not text.isascii():
            return self.pattern.search(text) is not None
        low = text.lower() if lowered is None else lowered
        if self.hints and not self._hinted(low):
            return False
        return self.twin.search(low) is not None

    def _hinted(self, low: str) -> bool:
        for hint in self.hints:
            if hint in low:
                return True
        return self.digits and _DIGIT.search(low) is not None


_DIGIT = re.compile(r"\d")
_DATE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b|\b(?:jan|feb|mar|apr|may|jun|jul"
    r"|aug|sep|sept|oct|nov|dec)[a-z]*\.?\s+\d{1,2}\b|\b(?:monday|tuesday|wednesday|thursday"
    r"|friday|saturday|sunday|today|tomorrow|tonight|yesterday)\b", re.IGNORECASE)
_NEGATION = re.compile(
    r"\b(?:never|not|no|none|nothing|nobody|without|cannot|can't|don't|doesn't|didn't|won't"
    r"|mustn't|shouldn't|isn't|aren't)\b", re.IGNORECASE)
_HAS_DATE = WordSearch(_DATE)  # salience asks it of text with a digit or a day word only
_HAS_NEGATION = WordSearch(_NEGATION, ("no", "n't", "never", "without"))
_IMPERATIVE = frozenset((
    "always", "never", "only", "use", "keep", "make", "do", "don't", "avoid", "stop", "send",
    "write", "report", "reply", "answer", "ask", "tell", "call", "run", "check", "include",
    "exclude", "remember", "note", "add", "remove", "delete", "follow", "ensure", "be", "treat",
    "put", "show", "list", "give", "mention", "cite", "quote", "respond", "format", "prefer",
    "please", "must", "should", "set", "book", "buy", "schedule", "cancel", "limit", "cap"))
_IDENTIFIER = re.compile(r"\w*[a-z][A-Z]\w*|\w+[_/@.]\w+|<[A-Z_]+_\d+>|[A-Z]{2,}\w*")
_PRONOUNS = frozenset({"I", "I'm", "I'd", "I'll", "I've"})
_JOINED = re.compile(r"\w[_/@.]\w")


def joins_words(text: str) -> bool:
    """``_JOINED.search(text)`` (a word character, one of ``_ / @ .``, a word character),
    searched only when one of those four comes before the last character: a sentence's
    closing full stop joins nothing."""
    body = text[:-1]
    if "_" in body or "/" in body or "@" in body or "." in body:
        return _JOINED.search(text) is not None
    return False


@functools.lru_cache(maxsize=4096)
def salience(text: str) -> int:
    """How much a sentence carries that a summary must keep: numbers, dates, names and
    identifiers, negations, an imperative opening. 0 for small talk.

    Cached (summary items are scored again on every fold that shrinks the summary)."""
    words = text.split()
    if not words:
        return 0
    digit = _DIGIT.search(text) is not None
    low = text.lower()
    score = 2 if digit else 0
    # Every date the pattern knows has a digit or one of these words: no regex otherwise.
    if (digit or "day" in low or "tomorrow" in low or "tonight" in low) \
            and _HAS_DATE(text, low):
        score += 2
    score += 2 if _HAS_NEGATION(text, low) else 0
    score += 2 if words[0].lower().strip(",.:;!") in _IMPERATIVE else 0
    rest = text.split(None, 1)[1] if len(words) > 1 else ""
    # A name or identifier has an uppercase letter or joins words with _ / @ or a dot: a
    # sentence with neither after its first word has none (no loop over its words).
    if rest.islower() and not joins_words(rest):
        return score
    names = 0
    for before, word in itertools.pairwise(words):
        bare = word.strip("\"'(),.:;!?")
        if before.endswith((".", "!", "?", ":")) or bare in _PRONOUNS or not bare:
            continue
        # A lowercase word of letters alone is never an identifier: no regex for it.
        if bare[0].isupper() or (not (bare.isalpha() and bare.islower())
                                 and _IDENTIFIER.fullmatch(bare)):
            names += 1
            if names == 3:  # the most names count for
                break
    return score + names


def through_filter(texts: Sequence[str], change: Callable[[str], str]) -> list[str]:
    """``[change(t) for t in texts]`` in one call of ``change`` where it can: the texts are
    joined by a separator no recogniser matches, and split back (one call per text when
    the separator did not survive)."""
    if len(texts) <= 1:
        return [change(t) for t in texts]
    parts = change(_JOIN.join(texts)).split(_JOIN)
    if len(parts) == len(texts):
        return parts
    return [change(t) for t in texts]
