"""Payment cards (Luhn + issuer prefix) and IBANs (country length + mod-97)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from chatkeep.privacy.base import Span
from chatkeep.privacy.checksums import IBAN_LENGTHS, iban_valid, luhn_valid
from chatkeep.privacy.recognizers.context import continues_iban

__all__ = ["CreditCardRecognizer", "IbanRecognizer"]

# 13-19 digits, optionally split by single spaces (or no-break spaces), dashes or dots,
# not glued to more digits/letters. The lookbehinds sit after the first digit so the
# regex engine can skip to digits. Every repetition is bounded: linear time.
_CARD = re.compile(
    r"[0-9](?<![\w\-.][0-9])(?<!\d[ \-.\u00a0\u202f][0-9])(?:[ \-.\u00a0\u202f]?[0-9]){12,18}"
    r"(?![ \-.\u00a0\u202f]?\d|\w)"
)
# What a card or IBAN may be split by, removed to get its compact form.
_SEPARATORS = str.maketrans("", "", " \u00a0\u202f-.")
# Issuer prefixes (IIN ranges) of the networks people paste: Visa, Mastercard,
# Amex, Discover, Diners, JCB, UnionPay, Maestro.
_CARD_ISSUER = re.compile(
    r"4|5[0-8]|2(?:22[1-9]|2[3-9]|[3-6]|7[01]|720)|3(?:0[0-5]|[4678]|5(?:2[89]|[3-8]))|6"
)
# Matches the two check digits after a two-letter country code; starting on a digit
# (and looking behind for the letters) lets the regex engine skip most of the text.
_IBAN_START = re.compile(r"[0-9](?<=[A-Za-z]{2}[0-9])(?<![A-Za-z0-9][A-Za-z]{2}[0-9])[0-9]")
# Per IBAN length: that many ASCII letters/digits, one or two spaces (or no-break
# spaces) or a dash between them, then no letter or digit ([^\W_]: what
# str.isalnum accepts). Bounded repetition: at most 34 characters are read.
_IBAN_BODIES = {
    length: re.compile(
        rf"[A-Za-z0-9](?:(?:[ \u00a0\u202f]{{1,2}}|-)?[A-Za-z0-9]){{{length - 1}}}(?![^\W_])"
    )
    for length in set(IBAN_LENGTHS.values())
}


class CreditCardRecognizer:
    """Finds 13-19 digit card numbers that pass Luhn and start with a known issuer prefix.

    Grouping is free (``4111 1111 1111 1111``, ``4111-1111-...``, ``4111.1111...``,
    no-break spaces, compact) but one number uses one kind of separator. The
    issuer check removes the one in ten random digit strings that pass Luhn by
    chance (order ids, tracking numbers).
    """

    entity_types: tuple[str, ...] = ("CREDIT_CARD",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every payment card number in ``text``."""
        for match in _CARD.finditer(text):
            value = match.group()
            if _separator_kinds(value) > 1:
                continue
            digits = value.translate(_SEPARATORS)
            if (
                _CARD_ISSUER.match(digits)
                and luhn_valid(digits)
                and not continues_iban(text, match.start())
            ):
                yield Span(match.start(), match.end(), "CREDIT_CARD", value, canonical=digits)


class IbanRecognizer:
    """Finds IBANs written compact or grouped (``DE89 3704 0044 0532 0130 00``).

    From each ``CCdd`` start it reads exactly the country's IBAN length of
    letters/digits, skipping one or two spaces (no-break spaces too, as banking
    sites paste them) or a dash, so a following word is never swallowed; then it
    checks mod-97. Lower case is accepted (people paste it).
    """

    entity_types: tuple[str, ...] = ("IBAN",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every IBAN in ``text``."""
        for match in _IBAN_START.finditer(text):
            start = match.start() - 2
            length = IBAN_LENGTHS.get(text[start : match.start()].upper())
            if length is None:
                continue
            end = _read_alnum(text, start, length)
            if end is None:
                continue
            value = text[start:end]
            compact = value.translate(_SEPARATORS).upper()
            if iban_valid(compact):
                yield Span(start, end, "IBAN", value, canonical=compact)


def _separator_kinds(value: str) -> int:
    """How many kinds of separator ``value`` uses (spaces of any width count as one)."""
    kinds = {"-" if c == "-" else "." if c == "." else " " for c in value if not c.isdigit()}
    return len(kinds)


def _read_alnum(text: str, start: int, count: int) -> int | None:
    """End offset after ``count`` ASCII letters/digits from ``start``, or None if cut short.

    One or two spaces, or a dash, between characters are allowed; the character
    after the last one must not be a letter or digit (else it is a longer token).
    """
    match = _IBAN_BODIES[count].match(text, start)
    return None if match is None else match.end()
