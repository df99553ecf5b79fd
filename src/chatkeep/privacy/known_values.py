"""Find values a session already knows are personal, literally, wherever they reappear.

Recognizers decide by context ("phone number: ..."), and a summariser or a distiller
rewords the context away: ``Customer's mobile no. <PHONE_1>`` restored and re-detected
would let the number out raw. So every value in a session's vault is also matched
literally in outgoing text, in the forms people and models rewrite it to: other
spacing and separators, digits only (with or without the country code or trunk 0),
other case. Patterns are plain sequences with bounded separator runs: linear time.
"""

from __future__ import annotations

import re

import phonenumbers

from chatkeep.privacy.base import Span

__all__ = ["KNOWN_VALUE_SCORE", "find_literal", "literal_pattern"]

#: Score of a literal match: above any recognizer's, so on a tie with a detection of the
#: same value the vault's own entry (and so its placeholder) wins.
KNOWN_VALUE_SCORE = 2.0
#: Shorter values are too likely to occur by chance to be matched everywhere.
MIN_LITERAL_CHARS = 4

_ID_TYPES = frozenset({"CREDIT_CARD", "IBAN", "US_SSN", "ES_NIF", "UK_NINO"})
_NAME_TYPES = frozenset({"PERSON", "LOCATION"})
_SEPARATOR = r"[ \t\-.\u00a0\u202f]{0,3}"
_PHONE_SEPARATOR = r"[ \t\-.()\u00a0\u202f]{0,3}"


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
        return re.compile(rf"(?<![\w.+%-])(?:{body})(?![\w-])", re.IGNORECASE)
    if entity_type == "IP_ADDRESS":
        return re.compile(rf"(?<![\w.:])(?:{body})(?![\w:]|\.\d)", re.IGNORECASE)
    return re.compile(body, re.IGNORECASE)


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
