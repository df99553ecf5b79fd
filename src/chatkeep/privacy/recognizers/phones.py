"""Phone numbers, validated by Google's libphonenumber (``phonenumbers``) for given regions.

``phonenumbers.PhoneNumberMatcher`` is exact but costs about 5 ms per region
per kilobyte, far over the redaction budget, so candidates are found here with
one regular expression and only plausible ones are parsed and validated with
``phonenumbers.parse`` / ``is_valid_number`` (the checks ``Leniency.VALID``
applies). Two extra rules, both about how people write numbers, keep order and
invoice numbers out:

* a number written without ``+``/``00`` in a country that dials a trunk prefix
  (``0`` in GB, DE, FR, ...) must start with it, as it always does on paper;
* a number without ``+``/``00`` right after a label such as "order", "invoice",
  "ref", "#" or "n°" is that thing, not a phone number.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import phonenumbers

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import Span
from chatkeep.privacy.recognizers.context import continues_iban
from chatkeep.privacy.recognizers.phone_rules import (
    number_rules,
    shares_calling_code,
    valid_anywhere,
)

__all__ = ["DEFAULT_PHONE_REGIONS", "PhoneRecognizer"]

#: Regions whose national formats are recognised when no region is configured.
DEFAULT_PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "ES", "DE", "FR")

# One "+"/"(" or digit, then 6+ more digits with single separators. The lookbehinds
# (not glued to a word, a longer number or a code like "ORD-") sit after the first
# character so the regex engine can skip quickly to digits.
_CANDIDATE = re.compile(
    r"[+(\d](?<![\w+].)(?<!\d[.\-/,].)(?<!\w[\-#].)"
    r"(?:(?<=\+)[ ]?\d|(?<=\()\+?\d|(?<=\d))"
    r"(?:(?:[ .\-/\u00a0]|\)[ \u00a0]?|[ \u00a0]?\()?\d){6,}"
    r"(?:[ ]?(?:x|ext\.?|extn\.?)[ ]?\d{1,6})?"
    r"(?!\w|[.\-/,]\d)"
)
_DIGIT_RUN = re.compile(r"\d[\d ()./\-\u00a0]{5,}\d")
_EXTENSION = re.compile(r"[ ]?(?:x|ext\.?|extn\.?)[ ]?\d{1,6}$")
_NON_DIGITS = re.compile(r"\D")
_DATE = re.compile(r"\d{1,4}([./\-])\d{1,2}\1\d{1,4}")
# A date with a four-digit year, then a time or nothing: "2024-03-15 14:30", "15/03/2024 9h".
_DATE_PREFIX = re.compile(
    r"(?:(?:19|20)\d{2}-[01]?\d-[0-3]?\d|[0-3]?\d([./])[0-3]?\d\1(?:19|20)\d{2})(?:[ T]|$)"
)
# Four or more dotted groups not starting with a trunk 0: a version ("8.7.139.5127").
_VERSION = re.compile(r"[1-9]\d*(?:\.\d+){3,}")
_ZIP4 = re.compile(r"\d{5}-\d{4}")  # US ZIP+4, e.g. "94110-1234"
_IPV4_SHAPE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_LABEL_WORDS = (
    "order", "invoice", "inv", "ref", "reference", "ticket", "case", "tracking", "account",
    "acct", "po", "sku", "serial", "item", "id", "no", "nr", "num", "number", "pedido",
    "factura", "referencia", "bestellung", "bestellnummer", "rechnung", "rechnungsnummer",
    "kundennummer", "auftrag", "vorgang", "commande", "facture", "dossier",
)  # fmt: skip
# A label ending the text before a number: "order no.", "invoice #:", "ref", "#", "n°".
# Searching a pattern anchored at the end of the text tries a match at every position,
# so the reversed text is matched from its start instead (one attempt); the pattern
# is reversed too and equals (?i)(?:\b(?:words)\b\.?|#|n[°º]|№)\s*[:#.]?\s*$.
_LABEL_REVERSED = re.compile(
    r"(?i)\s*[:#.]?\s*(?:\.?\b(?:" + "|".join(w[::-1] for w in _LABEL_WORDS) + r")\b|#|[°º]n|№)"
)
_CURRENCY = re.compile(r"(?:[$€£¥]|\b(?:EUR|USD|GBP))\s?$")
_CURRENCY_AFTER = re.compile(r"\s?(?:[$€£¥]|(?:EUR|USD|GBP)\b)")
# The last character of a currency sign or code; one of them ends any _CURRENCY match
# within the last three characters (a space and a final newline may follow it).
_CURRENCY_LAST = frozenset("$€£¥RDP")
_DATE_SEPARATORS = frozenset("./-")
_MIN_DIGITS, _MAX_DIGITS = 7, 17


@dataclass(frozen=True, slots=True)
class _Region:
    """What is needed to pre-filter a national-format candidate for one region."""

    code: str
    country_code: int
    trunk_prefix: str | None
    lengths: frozenset[int]
    pattern: re.Pattern[str]
    simple: bool  # national number = digits after the trunk prefix, no rewriting


class PhoneRecognizer:
    """Finds phone numbers valid in one of ``regions`` (or anywhere, when written with ``+``).

    ``regions`` are ISO 3166 codes whose national formats are understood, in
    priority order: a compact national number valid in two regions belongs to
    the one whose usual grouping it follows, else to the first listed. The
    canonical form is E.164 (plus ``;ext=N``), so ``+34 612 345 678`` and
    ``612345678`` (region ES) share a placeholder.
    """

    entity_types: tuple[str, ...] = ("PHONE",)

    def __init__(self, regions: Sequence[str] = DEFAULT_PHONE_REGIONS) -> None:
        self._regions = tuple(_region(code) for code in regions)

    @property
    def regions(self) -> tuple[str, ...]:
        """The configured regions, in priority order."""
        return tuple(region.code for region in self._regions)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every valid phone number in ``text``."""
        if _DIGIT_RUN.search(text) is None:
            return
        for match in _CANDIDATE.finditer(text):
            canonical = self._validate(text, match)
            if canonical is not None:
                yield Span(match.start(), match.end(), "PHONE", match.group(), canonical=canonical)

    def _validate(self, text: str, match: re.Match[str]) -> str | None:
        """E.164 form of the candidate, or None when it is not a phone number."""
        raw = match.group()
        ext_match = _EXTENSION.search(raw) if "x" in raw else None
        body = raw[: ext_match.start()] if ext_match else raw
        extension = _NON_DIGITS.sub("", ext_match.group()) if ext_match else ""
        digits = _NON_DIGITS.sub("", body)
        if not _MIN_DIGITS <= len(digits) <= _MAX_DIGITS or body.count("(") != body.count(")"):
            return None
        if not _DATE_SEPARATORS.isdisjoint(body) and (
            _DATE.fullmatch(body) or _DATE_PREFIX.match(body) or _IPV4_SHAPE.fullmatch(body)
        ):
            return None
        if body.lstrip("(").startswith("+"):
            return _international(_NON_DIGITS.sub("", body.replace("(0)", "")), raw, extension)
        if digits.startswith("00"):
            # After the second "0" digit, whatever separates it from the first ("0 0...").
            rest = raw[raw.index("0", raw.index("0") + 1) + 1 :]
            return _international(digits[2:], "+" + rest, extension)
        if _VERSION.fullmatch(body) or _ZIP4.fullmatch(body):
            return None
        # Cheap metadata checks before the context checks and validation (tens of µs).
        plausible = self._plausible(digits)
        if not plausible or continues_iban(text, match.start()):
            return None
        if _labelled(text, match.start(), match.end()):
            return None
        return _national(plausible, raw, body, extension)

    def _plausible(self, digits: str) -> list[tuple[_Region, str]]:
        """Each region whose trunk prefix, lengths and pattern fit, with the national number."""
        plausible: list[tuple[_Region, str]] = []
        for region in self._regions:
            nsn = digits
            if region.trunk_prefix is not None:
                if not digits.startswith(region.trunk_prefix):
                    continue
                nsn = digits[len(region.trunk_prefix) :]
            elif region.country_code == 1 and len(digits) == 11 and digits[0] == "1":
                nsn = digits[1:]
            if len(nsn) in region.lengths and region.pattern.fullmatch(nsn):
                plausible.append((region, nsn))
        return plausible


def _labelled(text: str, start: int, end: int) -> bool:
    """True when a label ("order", "#", ...) or a currency says the number is something else."""
    before = text[max(0, start - 24) : start]
    if _LABEL_REVERSED.match(before[::-1]):
        return True
    if not _CURRENCY_LAST.isdisjoint(before[-3:]) and _CURRENCY.search(before):
        return True
    return _CURRENCY_AFTER.match(text[end : end + 5]) is not None


def _national(
    plausible: list[tuple[_Region, str]], raw: str, body: str, extension: str
) -> str | None:
    """Validate a number written without international prefix for each plausible region."""
    valid: list[phonenumbers.PhoneNumber] = []
    for region, nsn in plausible:
        if region.simple and nsn[0] != "0":
            number = _valid(region.country_code, nsn, extension, region.code)
        else:  # leading zeros or prefix rewriting: let libphonenumber parse it
            number = _parse(raw, region.code)
        if number is not None and number.country_code == region.country_code:
            valid.append(number)
    if len(valid) > 1:
        groups = _groups(body)
        for number in valid:
            national = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
            if _groups(national) == groups:
                return _format(number)
    return _format(valid[0]) if valid else None


def _region(code: str) -> _Region:
    """Metadata for ``code``, or PrivacyError when libphonenumber does not know it."""
    region = code.upper()
    metadata = phonenumbers.PhoneMetadata.metadata_for_region(region, None)
    if metadata is None or metadata.general_desc is None:
        raise PrivacyError(f"unknown phone region {code!r}; use an ISO 3166 code such as 'ES'")
    trunk = metadata.national_prefix
    # NANP numbers are written without their "1" trunk prefix, so it cannot be required.
    country_code = int(metadata.country_code or 0)
    if country_code == 1:
        trunk = None
    lengths = frozenset(metadata.general_desc.possible_length or ())
    pattern = re.compile(metadata.general_desc.national_number_pattern or r"\d+")
    simple = metadata.national_prefix_transform_rule is None
    return _Region(region, country_code, trunk or None, lengths, pattern, simple)


def _parse(raw: str, region: str | None) -> phonenumbers.PhoneNumber | None:
    try:
        number = phonenumbers.parse(raw, region)
    except phonenumbers.NumberParseException:
        return None
    return number if phonenumbers.is_valid_number(number) else None


def _international(digits: str, raw: str, extension: str) -> str | None:
    """E.164 of a number given as country code + national number digits, if valid."""
    # Country calling codes are prefix-free: at most one of 1-3 leading digits is one.
    if digits[:1] in ("", "0"):
        return None
    for size in (1, 2, 3):
        country_code = int(digits[:size] or 0)
        if country_code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE:
            nsn = digits[size:]
            if not nsn:
                return None
            if nsn[0] == "0":  # Italian-style leading zero or a stray trunk prefix
                number = _parse(raw, None)
            else:
                number = _valid(country_code, nsn, extension, None)
            return None if number is None else _format(number)
    return None


def _valid(
    country_code: int, nsn: str, extension: str, region: str | None
) -> phonenumbers.PhoneNumber | None:
    """The number if libphonenumber deems it valid (as ``Leniency.VALID`` does), else None.

    ``nsn`` has no leading zero, so it is the number's national significant number.
    """
    if region is None or not number_rules(region).valid(nsn):
        # Not valid in the region asked for; maybe in another with the same code (US, CA).
        if region is not None and not shares_calling_code(region):
            return None
        if not valid_anywhere(country_code, nsn):
            return None
    return phonenumbers.PhoneNumber(
        country_code=country_code, national_number=int(nsn), extension=extension or None
    )


def _format(number: phonenumbers.PhoneNumber) -> str:
    # What format_number(number, E164) returns for a valid (so non-zero) number.
    e164 = f"+{number.country_code}{phonenumbers.national_significant_number(number)}"
    return f"{e164};ext={number.extension}" if number.extension else e164


def _groups(value: str) -> list[int]:
    """Lengths of the digit groups, e.g. ``06 12 34 56 78`` -> [2, 2, 2, 2, 2]."""
    return [len(group) for group in re.findall(r"\d+", value)]
