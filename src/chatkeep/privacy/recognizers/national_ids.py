"""National identifiers that carry their own validity rules: US SSN, Spanish DNI/NIE, UK NINO."""

from __future__ import annotations

import re
from collections.abc import Iterator

from chatkeep.privacy.base import Span
from chatkeep.privacy.checksums import es_nif_valid, uk_nino_valid, us_ssn_valid

__all__ = ["EsNifRecognizer", "UkNinoRecognizer", "UsSsnRecognizer"]

# "123-45-6789" or "123 45 6789", else nine bare digits (kept only after an SSN label).
# The lookbehind sits after the first digit so the regex engine can skip to digits.
_SSN = re.compile(
    r"(?P<area>\d(?<![\w\-]\d)\d{2})"
    r"(?:(?P<sep>[- ])(?P<group>\d{2})(?P=sep)(?P<serial>\d{4})(?![\w\-]|[ ]\d)"
    r"|(?P<bare_group>\d{2})(?P<bare_serial>\d{4})(?![\w\-]))"
)
# "SSN", "social security (number|no.)", "SS#" shortly before a compact number.
_SSN_CONTEXT = re.compile(
    r"(?i)\b(?:ssn|social\s+security(?:\s+(?:number|no\.?|#))?|ss#)(?:\s+(?:is|was))?\W{0,8}$"
)
# A country calling code right before means a phone number: "+1 773-57-8045".
_CALLING_CODE = re.compile(r"\+\d{1,3}[ \-]?$")
# Lookbehinds sit after the first character so the engine can skip to candidates fast.
_NIF = re.compile(
    r"[0-9XYZxyz](?<![\w\-].)(?:(?<=\d)\d{7}|(?<=[XYZxyz])[ \-]?\d{7})[ \-]?[A-Za-z](?![\w\-])"
)
_NINO = re.compile(
    r"[A-Z](?<![\w\-][A-Z])[A-Z](?P<sep>[ ]?)\d{2}(?P=sep)\d{2}(?P=sep)\d{2}(?P=sep)[A-D](?![\w\-])"
)


class UsSsnRecognizer:
    """Finds US Social Security numbers the SSA could have issued.

    ``123-45-6789`` / ``123 45 6789`` are accepted anywhere; nine bare digits
    only right after a label such as "SSN" or "social security number", since
    otherwise they are usually order or account numbers.
    """

    entity_types: tuple[str, ...] = ("US_SSN",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every valid SSN in ``text``."""
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
            if us_ssn_valid(area, group, serial) and _SSN_CONTEXT.search(
                text, max(0, start - 40), start
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
    """Finds UK National Insurance numbers (``AB 12 34 56 C`` or ``AB123456C``).

    Only upper case, since lower-case two-letter words followed by digits are
    common English; the prefix must be one HMRC allocates (see
    :func:`~chatkeep.privacy.checksums.uk_nino_valid`).
    """

    entity_types: tuple[str, ...] = ("UK_NINO",)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every valid NINO in ``text``."""
        for match in _NINO.finditer(text):
            compact = match.group().replace(" ", "")
            if uk_nino_valid(compact):
                yield _span(match, "UK_NINO", compact)


def _span(match: re.Match[str], entity_type: str, canonical: str) -> Span:
    return Span(match.start(), match.end(), entity_type, match.group(), canonical=canonical)
