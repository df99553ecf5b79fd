"""Find values a session already knows are personal, literally, wherever they reappear.

Recognizers decide by context ("phone number: ..."), and a summarizer or a distiller
rewords the context away: ``Customer's mobile no. <PHONE_1>`` restored and re-detected
would let the number out raw. So every value in a session's vault is also matched
literally in outgoing text, in the forms people and models rewrite it to: other
spacing and separators, digits only (with or without the country code or trunk 0),
other case. Patterns are plain sequences with bounded separator runs: linear time.

Values also come back in other *surface forms*: JSON-escaped in tool results, percent-encoded
in URLs, as HTML references or with markup inside, without accents, in any case, surname
first, in fullwidth characters or look-alike letters, base64 or hex encoded. So each entry
has, besides its literal pattern (run on the text as written), surface patterns run on the
text's normalised view (:mod:`chatkeep.privacy.surface`) and mapped back to its offsets, and
run again on each encoded segment's view (a match there redacts the whole encoded run).
Some forms are written by people hiding a value from a scraper, and the surface patterns
read them too: an e-mail with ``[at]``, ``(dot)`` or `` at `` and `` dot `` for its ``@``
and dots, a name's words joined by ``_`` (``ana_garcia``), and any value of four letters
or more with its letters spaced out (``a n a . g a r c i a``).
One-word names stay case-sensitive there (a name can be a word): a match counts only when
written as the value, title or upper case, accents aside. On an ASCII text with nothing
to decode the view is the text lower-cased, where the surface patterns find everything the
literal ones would, so only they run: the common case costs one pass per entry, and every
surface pattern starts with a literal text (the boundary check placed after it) so the
regular expression engine searches for that text instead of trying every position.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import phonenumbers

from chatkeep.privacy.base import Span
from chatkeep.privacy.surface import (
    SEGMENT_DEPTH,
    SurfaceView,
    cased_form,
    normalize,
    surface_view,
)

__all__ = ["KNOWN_VALUE_SCORE", "KnownValue", "find_known_values", "find_literal",
           "known_value", "literal_pattern", "reads_as_written", "surface_patterns"]

#: Score of a literal match: above any recognizer's, so on a tie with a detection of the
#: same value the vault's own entry (and so its placeholder) wins.
KNOWN_VALUE_SCORE = 2.0
#: Shorter values are too likely to occur by chance to be matched everywhere.
MIN_LITERAL_CHARS = 4

_ID_TYPES = frozenset({"CREDIT_CARD", "IBAN", "US_SSN", "ES_NIF", "UK_NINO"})
_NAME_TYPES = frozenset({"PERSON", "LOCATION"})
_SEPARATOR = r"[ \t\-.\u00a0\u202f]{0,3}"
_PHONE_SEPARATOR = r"[ \t\-.()\u00a0\u202f]{0,4}"  # "( 2 1 2 )  5 5 5"
#: Between the words of a name in the view: whitespace, "+" (a space in a URL query), or
#: "_" (a user name: ``ana_garcia``). Not "-" nor "." nor nothing: ``Ana-García``,
#: ``Ana. García`` and ``Anagarcía`` may well be someone else, or two sentences.
_NAME_GAP = r"[\s+_]+"
#: Between the surname and the rest when written first: a comma, or just a gap.
_SURNAME_GAP = r"(?:[\s+]*,[\s+]*|[\s+_]+)"
#: What may stand beside a name: not a letter or digit (``_`` joins user names).
_NAME_EDGE = r"[^\W_]"
#: Where a known e-mail address ends: not in a longer word or a longer domain
#: (``ana@x.co`` is not inside ``ana@x.com``, nor ``ana@x.com`` inside
#: ``ana@x.com-mail.org``), but a ``-`` or ``_`` that joins it to a plain word does end
#: it (``ana@x.com-notes``, ``ana@x.com_2026.txt``: no domain goes on that way).
_EMAIL_END = r"(?![^\W_]|-[\w-]*\.[^\W\d_])"
#: Between the letters of a value spelt out (``a n a``), and between its words.
_SPACED = r"[\s._*\-]{1,3}"
_SPACED_WORDS = r"[\s._*\-]{1,6}"
#: An e-mail's "@" and "." as people write them to hide the address from a scraper.
_AT = (r"(?:\s{0,3}(?:@|[\[({]\s{0,3}(?:at|@)\s{0,3}[\])}])\s{0,3}"
       r"|\s{1,3}at\s{1,3})")
_DOT = (r"(?:\s{0,3}(?:\.|[\[({]\s{0,3}(?:dot|\.)\s{0,3}[\])}])\s{0,3}"
        r"|\s{1,3}dot\s{1,3})")


@dataclass(frozen=True, slots=True)
class KnownValue:
    """One vault entry's patterns: ``literal`` for the text as written, ``surface`` for its
    normalised view; ``cased`` (one-word names) the forms a view match must have once
    decoded, accents aside, to count."""

    entity_type: str
    canonical: str
    literal: re.Pattern[str] | None
    surface: tuple[re.Pattern[str], ...]
    cased: frozenset[str] | None = None

    def find(self, text: str, view: SurfaceView) -> Iterator[Span]:
        """Spans of ``text`` (whose view is ``view``) holding this value in any form."""
        # On a plain text the surface patterns find all the literal one would.
        if self.literal is not None and not (view.plain and self.surface):
            yield from find_literal(self.literal, text, self.entity_type, self.canonical)
        for pattern in self.surface:
            for match in pattern.finditer(view.text):
                start, end = view.span(match.start(), match.end())
                raw = text[start:end]
                if self.cased is not None and cased_form(raw) not in self.cased and \
                        cased_form(_unspaced(raw)) not in self.cased:
                    continue
                yield Span(start, end, self.entity_type, raw, KNOWN_VALUE_SCORE,
                           self.canonical)
        for segment in view.segments:  # an encoded run holding the value: all of it
            if next(self.find(segment.text, segment.view), None) is not None:
                yield Span(segment.start, segment.end, self.entity_type,
                           text[segment.start:segment.end], KNOWN_VALUE_SCORE, self.canonical)


@functools.lru_cache(maxsize=8192)
def known_value(entity_type: str, canonical: str, value: str) -> KnownValue | None:
    """The patterns of a vault entry, or ``None`` when it is too short to match safely.
    Cached: a vault is rebuilt from storage on every request, its patterns need not be
    (compiling them is most of a new value's cost)."""
    literal = literal_pattern(entity_type, canonical, value)
    surface, cased = surface_patterns(entity_type, canonical, value)
    if literal is None and not surface:
        return None
    return KnownValue(entity_type, canonical, literal, surface, cased)


def find_known_values(known: Sequence[KnownValue], text: str) -> list[Span]:
    """Spans of ``text`` holding any of ``known`` in any form (the view is read once, and
    only when there is something to look for). Spans may overlap."""
    if not known or not text:
        return []
    view = surface_view(text)
    spans: list[Span] = []
    for entry in known:
        spans.extend(entry.find(text, view))
    return list(dict.fromkeys(spans))  # literal and surface patterns often agree


def reads_as_written(entity_type: str, canonical: str, text: str) -> bool:
    """Whether the value whose canonical form is ``canonical`` is read in ``text`` itself,
    not only inside an encoded run of it (a base64 run holding a value is no value to
    match on: its own patterns would find that run only)."""
    entry = known_value(entity_type, canonical, canonical)
    view = surface_view(text, _depth=SEGMENT_DEPTH)
    return entry is not None and next(entry.find(text, view), None) is not None


def literal_pattern(entity_type: str, canonical: str, value: str) -> re.Pattern[str] | None:
    """The pattern matching ``value`` and its rewritten forms, or ``None`` when the value is
    too short to match safely."""
    if entity_type == "PHONE":
        variants = _phone_variants(canonical, value)
        if not variants:
            return None
        body = "|".join(_PHONE_SEPARATOR.join(v) for v in sorted(variants, key=len,
                                                                  reverse=True))
        # Any international prefix may stand before the number ("+44 ", "0044-", "011 44").
        prefix = rf"(?:(?:\+|00|011){_PHONE_SEPARATOR}\d{{1,3}}{_PHONE_SEPARATOR})?"
        return re.compile(rf"(?<![\d+])\+?{prefix}(?:{body})(?!\d)")
    if entity_type in _ID_TYPES:
        skeleton = "".join(c for c in canonical if c.isalnum())
        if len(skeleton) < MIN_LITERAL_CHARS:
            return None
        body = _SEPARATOR.join(re.escape(c) for c in skeleton)
        return re.compile(rf"(?<![0-9A-Za-z])(?:{body})(?![0-9A-Za-z])", re.IGNORECASE)
    text = value.strip()
    if len(text) < MIN_LITERAL_CHARS:
        return None
    words = [re.escape(w) for w in text.split()]
    if entity_type in _NAME_TYPES:
        # Names keep their capitalisation (a name can be a word: "May", "Rose"); other case
        # forms people write are the title and upper case.
        forms = {text, text.title(), text.upper()}
        body = "|".join(r"\s+".join(re.escape(w) for w in f.split()) for f in forms)
        return re.compile(rf"(?<!\w)(?:{body})(?!\w)")
    body = r"\s+".join(words)
    if entity_type == "EMAIL":
        return re.compile(rf"(?<![\w.+%-])(?:{body}){_EMAIL_END}", re.IGNORECASE)
    if entity_type == "IP_ADDRESS":
        return re.compile(rf"(?<![\w.:])(?:{body})(?![\w:]|\.\d)", re.IGNORECASE)
    return re.compile(body, re.IGNORECASE)


def surface_patterns(entity_type: str, canonical: str, value: str
                     ) -> tuple[tuple[re.Pattern[str], ...], frozenset[str] | None]:
    """The patterns matching ``value`` in a normalised view (with the literal patterns'
    separator tolerance), and for a one-word name the case forms a match must have."""
    if entity_type == "PHONE":
        variants = _phone_variants(canonical, value)
        return ((_phone_surface(variants),) if variants else ()), None
    if entity_type in _ID_TYPES:
        skeleton = [c for c in normalize(canonical) if c.isalnum()]
        if len(skeleton) < MIN_LITERAL_CHARS:
            return (), None
        body = _SEPARATOR.join(re.escape(c) for c in skeleton[1:])
        head = _opening(skeleton[0], "[0-9A-Za-z]")
        return (re.compile(rf"{head}{_SEPARATOR}{body}(?![0-9A-Za-z])"),), None
    text = value.strip()
    words = normalize(text).split()
    if len(" ".join(words)) < MIN_LITERAL_CHARS:
        return (), None
    spaced = _spaced(words)
    if entity_type in _NAME_TYPES:
        end = rf"(?!{_NAME_EDGE})"
        if len(words) == 1:
            cased = frozenset(cased_form(f) for f in (text, text.title(), text.upper()))
            one = re.compile(_opening(words[0], _NAME_EDGE) + end)
            return ((one, spaced) if spaced else (one,)), cased
        forward = _opening(words[0], _NAME_EDGE) + "".join(
            _NAME_GAP + re.escape(w) for w in words[1:])
        surname_first = _opening(words[-1], _NAME_EDGE) + _SURNAME_GAP + _NAME_GAP.join(
            re.escape(w) for w in words[:-1])
        patterns = [re.compile(forward + end), re.compile(surname_first + end)]
        return (*patterns, *([spaced] if spaced else [])), None
    rest = "".join(r"\s+" + re.escape(w) for w in words[1:])
    if entity_type == "EMAIL" and len(words) == 1:
        return (_email_surface(words[0]), *([spaced] if spaced else [])), None
    if entity_type == "IP_ADDRESS":
        return (re.compile(_opening(words[0], r"[\w.:]") + rest + r"(?![\w:]|\.\d)"),), None
    return (re.compile(re.escape(words[0]) + rest), *([spaced] if spaced else [])), None


def _email_surface(address: str) -> re.Pattern[str]:
    """An e-mail address in the view, its ``@`` and dots also written as words
    (``ana.garcia [at] example [dot] com``, ``ana dot garcia at example dot com``)."""
    tokens = re.split(r"([@.])", address)
    body = "".join(_AT if t == "@" else _DOT if t == "." else re.escape(t) for t in tokens[1:])
    if not tokens[0]:  # an address starting with a dot: no literal to start from
        return re.compile(re.escape(address) + _EMAIL_END)
    return re.compile(_opening(tokens[0], r"[\w.+%-]") + body + _EMAIL_END)


def _spaced(words: list[str]) -> re.Pattern[str] | None:
    """The value with its letters spaced out (``a n a  g a r c i a``), or ``None`` when it
    has fewer than :data:`MIN_LITERAL_CHARS` letters and digits. Starts with its first
    letter (a literal the engine searches for)."""
    if sum(c.isalnum() for w in words for c in w) < MIN_LITERAL_CHARS:
        return None
    body = _SPACED_WORDS.join(_SPACED.join(re.escape(c) for c in w) for w in words)
    first = re.escape(words[0][0])
    rest = body[len(first):]
    return re.compile(rf"{first}(?<!{_NAME_EDGE}[\s\S]){rest}(?!{_NAME_EDGE})")


def _unspaced(raw: str) -> str:
    """``raw`` (one word, spelt out) without the separators between its letters."""
    return _SEPARATORS.sub("", raw)


_SEPARATORS = re.compile(r"[\s._*\-]+")


def _opening(word: str, before: str) -> str:
    """``word``, not preceded by a character of class ``before``. The check comes after the
    word (a lookbehind over it), so the pattern starts with literal text the regular
    expression engine searches for quickly, instead of trying the check everywhere."""
    return rf"{re.escape(word)}(?<!{before}[\s\S]{{{len(word)}}})"


def _phone_surface(variants: set[str]) -> re.Pattern[str]:
    """:func:`literal_pattern`'s phone pattern, rewritten (same matches, in the same order
    of preference) so that every branch starts with a literal character: the engine then
    skips to the next digit or ``+`` instead of trying the pattern at every position."""
    gap = _PHONE_SEPARATOR
    ordered = sorted(variants, key=len, reverse=True)
    body = "|".join(gap.join(v) for v in ordered)
    country = rf"{gap}\d{{1,3}}{gap}"
    guard = r"(?<![\d+][\s\S])"
    branches = [rf"\+{guard}(?:(?:\+|00|011){country})?(?:{body})",
                rf"\+{guard}{country}(?:{body})",
                rf"0{guard}(?:0|11){country}(?:{body})"]
    branches += [v[0] + guard + gap + gap.join(v[1:]) for v in ordered]
    return re.compile("(?:" + "|".join(branches) + r")(?!\d)")


def find_literal(pattern: re.Pattern[str], text: str, entity_type: str,
                 canonical: str) -> list[Span]:
    """Spans of ``text`` where ``pattern`` matches, carrying the vault's canonical value."""
    return [Span(m.start(), m.end(), entity_type, m.group(), KNOWN_VALUE_SCORE, canonical)
            for m in pattern.finditer(text)]


def _phone_variants(canonical: str, value: str) -> set[str]:
    """Digit strings a phone number is written as: international with its country code
    (after ``+``, ``00`` or ``011``), national with its trunk 0, and the bare national
    significant number."""
    digits = "".join(c for c in canonical if c.isdigit()) or "".join(
        c for c in value if c.isdigit())
    variants = {digits}
    if canonical.startswith("+"):
        try:
            number = phonenumbers.parse(canonical, None)
        except phonenumbers.NumberParseException:
            number = None
        if number is not None:
            national = phonenumbers.national_significant_number(number)
            code = str(number.country_code)
            variants |= {national, "0" + national, code + national, "00" + code + national,
                         "011" + code + national}
    elif digits.startswith("0") and len(digits) > 7:
        variants.add(digits[1:])
    return {v for v in variants if len(v) >= 7}
