"""National identifiers that carry their own validity rules: US SSN, Spanish DNI/NIE, UK NINO."""

from __future__ import annotations

import re
from collections.abc import Iterator

from chatkeep.privacy.base import Span
from chatkeep.privacy.checksums import es_nif_valid, uk_nino_valid, us_ssn_valid
from chatkeep.privacy.recognizers.context import asked_for, is_short_reply

__all__ = ["EsNifRecognizer", "UkNinoRecognizer", "UsSsnRecognizer"]

# "123-45-6789" or "123 45 6789", else nine bare digits (kept only after an SSN label).
# The lookbehind sits after the first digit so the regex engine can skip to digits.
_SSN = re.compile(
    r"(?P<area>[0-9](?<![\w\-][0-9])[0-9]{2})"
    r"(?:(?P<sep>[- ])(?P<group>[0-9]{2})(?P=sep)(?P<serial>[0-9]{4})(?![\w\-]|[ ]\d)"
    r"|(?P<bare_group>[0-9]{2})(?P<bare_serial>[0-9]{4})(?![\w\-]))"
)
# "SSN", "social security (number|no.)", "SS#" shortly before a compact number.
_SSN_CONTEXT = re.compile(
    r"(?i)\b(?:ssn|social\s+security(?:\s+(?:number|no\.?|#))?|ss#)(?:\s+(?:is|was))?\W{0,8}$"
)
# A country calling code right before means a phone number: "+1 773-57-8045".
_CALLING_CODE = re.compile(r"\+\d{1,3}[ \-]?$")
# Lookbehinds sit after the first character so the engine can skip to candidates fast.
_NIF = re.compile(
    r"[0-9XYZxyz](?<![\w\-].)(?:(?<=[0-9])[0-9]{7}|(?<=[XYZxyz])[ \-]?[0-9]{7})[ \-]?[A-Za-z]"
    r"(?![\w\-])"
)
# Two letters, three pairs of digits and a suffix letter, each part maybe split from the
# next by one space or no-break space ("AB 12 34 56 C", "AB 123456 C", "ab123456c").
_NINO = re.compile(
    r"[A-Za-z](?<![\w\-][A-Za-z])[A-Za-z][ \u00a0]?[0-9]{2}[ \u00a0]?[0-9]{2}[ \u00a0]?[0-9]{2}"
    r"[ \u00a0]?[A-Da-d](?![\w\-])"
)
# "NI number", "National Insurance no.", "NINO" shortly before the number.
_NINO_CONTEXT = re.compile(
    r"(?i)(?<![^\W\d_])(?:nino|ni|n\.i\.|national\s+insurance)(?![^\W\d_])"
    r"(?:\s+(?:number|no\.?|nr\.?|\#))?(?:\s+(?:is|was))?\W{0,8}$"
)
_NINO_SPACES = str.maketrans("", "", " \u00a0")
# The first two digits of a NINO: two letters (and maybe a space) before them, the rest
# of the number after them. Searching
# for them lets the regex engine skip to digits instead of trying _NINO at every letter
# ([0-9] rather than \d everywhere here: a character-set test is much faster than the
# Unicode category test, and every identifier here is ASCII).
_NINO_FIRST_DIGITS = re.compile(
    r"[0-9](?:(?<=[A-Za-z]{2}[0-9])|(?<=[A-Za-z]{2}[ \u00a0][0-9]))[0-9]"
    r"(?=[ \u00a0]?[0-9]{2}[ \u00a0]?[0-9]{2}[ \u00a0]?[A-Da-d])"
)


class UsSsnRecognizer:
    """Finds US Social Security numbers the SSA could have issued.

    ``123-45-6789`` / ``123 45 6789`` are accepted anywhere; nine bare digits
    only right after a label such as "SSN" or "social security number", since
    otherwise they are usually order or account numbers, or as the short
    answer to a message asking for an SSN (:meth:`find_in_context`).
    """

    entity_types: tuple[str, ...] = ("US_SSN",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every valid SSN in ``text``."""
        return self._find(text, asked=False)

    def find_in_context(self, text: str, context: str) -> Iterator[Span]:
        """Yield every valid SSN in ``text``, a reply to ``context`` (the previous message).

        When ``context`` asks for an SSN ("What's your SSN?") and ``text`` is a
        short reply, bare nine-digit numbers need no label of their own.
        """
        asked = is_short_reply(text) and asked_for(context) == "ssn"
        return self._find(text, asked=asked)

    def _find(self, text: str, *, asked: bool) -> Iterator[Span]:
        bare: list[Span] = []
        for match in _SSN.finditer(text):
            area, start = match.group("area"), match.start()
            if match.group("sep"):
                group, serial = match.group("group", "serial")
                before = text[max(0, start - 5) : start]
                if us_ssn_valid(area, group, serial) and not _CALLING_CODE.search(before):
                    yield _span(match, "US_SSN", area + group + serial)
                continue
            group, serial = match.group("bare_group", "bare_serial")
            if us_ssn_valid(area, group, serial) and (
                asked or _SSN_CONTEXT.search(text, max(0, start - 40), start)
            ):
                bare.append(_span(match, "US_SSN", area + group + serial))
        yield from bare


class EsNifRecognizer:
    """Finds Spanish DNI (``12345678Z``) and NIE (``X1234567L``) whose control letter matches.

    Separators (``12345678-Z``, ``X-1234567-L``) and lower case are accepted;
    the canonical form is compact upper case.
    """

    entity_types: tuple[str, ...] = ("ES_NIF",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every valid DNI/NIE in ``text``."""
        for match in _NIF.finditer(text):
            compact = match.group().replace(" ", "").replace("-", "").upper()
            if es_nif_valid(compact):
                yield _span(match, "ES_NIF", compact)


class UkNinoRecognizer:
    """Finds UK National Insurance numbers (``AB 12 34 56 C``, ``AB 123456 C``, ``AB123456C``).

    Parts may be split by single spaces (or no-break spaces) in any grouping, and
    the prefix must be one HMRC allocates (see
    :func:`~chatkeep.privacy.checksums.uk_nino_valid`). Upper case and compact
    lower case (``jg103759a``) are accepted anywhere; lower case split by spaces
    only after a label ("NI number", "NINO"), since a two-letter word then
    digits ("me 12 34 56 a") is ordinary text.
    """

    entity_types: tuple[str, ...] = ("UK_NINO",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every valid NINO in ``text``."""
        resume = 0
        for digit in _NINO_FIRST_DIGITS.finditer(text):
            start = digit.start() - (3 if text[digit.start() - 1] in " \u00a0" else 2)
            match = _NINO.match(text, start) if start >= resume else None
            if match is None:
                continue
            resume = match.end()
            value = match.group()
            compact = value.translate(_NINO_SPACES)
            if not uk_nino_valid(compact.upper()):
                continue
            if (
                compact != compact.upper()
                and compact != value
                and not _NINO_CONTEXT.search(text, max(0, match.start() - 40), match.start())
            ):
                continue
            yield _span(match, "UK_NINO", compact.upper())


def _span(match: re.Match[str], entity_type: str, canonical: str) -> Span:
    return Span(match.start(), match.end(), entity_type, match.group(), canonical=canonical)
