"""Phone numbers, validated by Google's libphonenumber (``phonenumbers``) for given regions.

``phonenumbers.PhoneNumberMatcher`` is exact but costs about 5 ms per region
per kilobyte, far over the redaction budget, so candidates are found here with
one regular expression and only plausible ones are parsed and validated with
``phonenumbers.parse`` / ``is_valid_number`` (the checks ``Leniency.VALID``
applies). Rules about how people write numbers keep order and invoice numbers
out and let labelled phone numbers in:

* a number written without ``+``/``00`` in a country that dials a trunk prefix
  (``0`` in GB, DE, FR, ...) must start with it, as it always does on paper;
* a number without ``+``/``00`` right after a label such as "order", "invoice",
  "ref", "#" or "n°" is that thing, not a phone number;
* but a phone label ("phone number:", "Tel. no.", "cell #:", "WhatsApp number",
  "Teléfono nº", "Tél. n°", "Handynummer", "my number", "call me at",
  "llámame al", "appelez-moi au", "ruf mich unter") makes it a phone number
  even so, and then the trunk prefix may be missing (``7700 900123``) and a
  national number of a region that is not configured is accepted too;
* in a short reply, the previous message stands for the label ("What's your
  phone number?", "What's your order number?"): see :meth:`PhoneRecognizer.find_in_context`.

Every pattern here does a bounded amount of work per character (the label
checks look at the 40 characters before a candidate only), so the time is
linear in the text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import phonenumbers

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import Span
from chatkeep.privacy.recognizers.context import asked_for, continues_iban, is_short_reply
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
_DIGIT_GROUPS = re.compile(r"\d+")
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
    "kundennummer", "auftrag", "vorgang", "commande", "facture", "dossier", "booking",
    "reservation", "confirmation", "code", "pin", "claim", "policy", "member", "customer",
    "expediente", "localizador", "reserva", "cliente", "suivi", "colis", "client",
    "réservation", "aktenzeichen", "buchung", "sendung", "paket", "vertrag", "contract",
    "routing", "aba", "sort",
)  # fmt: skip
# A label ending the text before a number: "order no.", "invoice #:", "ref", "#", "n°".
# Searching a pattern anchored at the end of the text tries a match at every position,
# so the reversed text is matched from its start instead (one attempt); the pattern
# is reversed too and equals (?i)(?:\b(?:words)\b\.?|#|n[°º]|№)\s*[:#.]?\s*$.
_LABEL_REVERSED = re.compile(
    r"(?i)\s*[:#.]?\s*(?:\.?\b(?:" + "|".join(w[::-1] for w in _LABEL_WORDS) + r")\b|#|[°º]n|№)"
)
# Of those, the ones that only say "number": what precedes them says what number it is.
_NUMBER_WORDS = frozenset({"no", "nr", "num", "number", "#", "n°", "nº", "№"})
# Words that name a phone (English, Spanish, French, German), as labels are written.
_PHONE_WORD = (
    r"(?:(?:tele|cell|mobile\s|home\s|work\s|office\s|contact\s)?phone|tel|mob|mobile|cell"
    r"|landline|fax|whats\s?app|contact|tel[ée]fono|tfno|tlf|tlfno|m[óo]vil|celular|fijo"
    r"|contacto|t[ée]l[ée]phone|t[ée]l|portable|fixe|gsm|telefon|handy|mobil|festnetz"
    r"|(?:telefon|tel|handy|mobil|mobilfunk|festnetz|fax|ruf|rückruf|kontakt|whatsapp)"
    r"-?(?:nummer|nr)"
    # "call me at", "llámame al", "appelez-moi au", "ruf mich unter" (with their fillers)
    r"|(?:call|ring|text|reach|phone|whats\s?app)\s+(?:me|us)|ll[áa]m(?:ame|eme|enos)"
    r"|appel(?:ez|le)-moi|joignable|ruf(?:en)?\s+(?:sie\s+)?(?:mich|uns)|erreichbar)"
)
# A phone label ending the text before a number: a phone word, maybe a word for
# "number" ("no.", "#", "nº", "número"), maybe a "(country)" aside, punctuation,
# then at most two filler words ("is", "es el", "unter"). "Tel.-Nr.:", "cell #:",
# "Phone number (Italy):", "número de teléfono:", "my mobile is".
_PHONE_LABEL = re.compile(
    r"(?i)(?<![^\W\d_])" + _PHONE_WORD + r"(?![^\W\d_])\.?"
    r"(?:[\s\-]*(?:number|no|nr|num|nro|n[úu]m|n[úu]mero|num[ée]ro|nummer|n\.?[°º]|№|\#)"
    r"(?![^\W\d_])\.?)?"
    r"(?:[ \t]*\([^()\n]{1,24}\))?"
    r"[ \t]*[:#.=\-]?[ \t]*"
    r"(?:(?:is|es|est|ist|lautet|was|al|au|el|le|at|on|unter)[ \t]+){0,2}$"
)
# "my number: ..." — a generic "number" label whose owner is a person.
_POSSESSIVE_HEAD = re.compile(r"(?i)(?<![^\W\d_])(?:my|our|his|her)[\s\-]*$")
# German compounds ending in "-nummer"/"-nr." ("Rechnungsnr.", "Buchungsnummer").
_COMPOUND_LABEL = re.compile(r"(?i)[^\W\d_]{2}(?:nummer|nr)\.?[ \t]*[:#.]?[ \t]*$")
# "Factura n.º 963521840": the Spanish abbreviation with a dot.
_DOTTED_NUMBER_SIGN = re.compile(r"(?i)(?<![^\W\d_])n\.[°º][ \t]*[:#.]?[ \t]*$")
# Every phone word contains one of these (searched in lower case, several times faster
# than a case-insensitive pattern): a cheap test before _PHONE_LABEL.
_PHONE_STEM = re.compile(
    r"phone|t[ée]l|mob|cell|fax|whats|conta[ck]t|kontakt|tfno|tlf|m[óo]vil|fijo|celular"
    r"|portable|fixe|gsm|handy|festnetz|ruf|landline|call|ring|text|reach|ll[áa]m|appel"
    r"|joign|erreich"
)
_LABEL_WINDOW = 40
Label = Literal["phone", "other"]
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
        self._others: tuple[_Region, ...] | None = None  # built on first use

    @property
    def regions(self) -> tuple[str, ...]:
        """The configured regions, in priority order."""
        return tuple(region.code for region in self._regions)

    def find(self, text: str) -> Iterator[Span]:
        """Yield every valid phone number in ``text``."""
        return self._find(text, None)

    def find_in_context(self, text: str, context: str) -> Iterator[Span]:
        """Yield the phone numbers of ``text``, a reply to ``context`` (the previous message).

        When ``text`` is a short reply and ``context`` asks for a phone number,
        a number without a label of its own is read as labelled "phone"; when
        it asks for an order, ticket, SSN... number, as labelled that way.
        """
        topic = asked_for(context) if is_short_reply(text) else None
        return self._find(text, None if topic is None else "phone" if topic == "phone" else "other")

    def _find(self, text: str, default_label: Label | None) -> Iterator[Span]:
        if _DIGIT_RUN.search(text) is None:
            return
        for match in _CANDIDATE.finditer(text):
            canonical = self._validate(text, match, default_label)
            if canonical is not None:
                yield Span(match.start(), match.end(), "PHONE", match.group(), canonical=canonical)

    def _validate(self, text: str, match: re.Match[str], default_label: Label | None) -> str | None:
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
        # Cheap metadata checks before the context checks and validation (tens of µs);
        # a number no configured region reads needs a phone label to go on.
        plausible = self._plausible(digits)
        start = match.start()
        phone_label = _phone_labelled(text, start)
        if not plausible and not phone_label and default_label != "phone":
            return None
        if continues_iban(text, start) or _priced(text, start, match.end()):
            return None
        label: Label | None = "phone" if phone_label else _other_label(text, start)
        if (label or default_label) == "other":
            return None
        found = _national(plausible, raw, body, extension) if plausible else None
        if found is None and (label or default_label) == "phone":
            found = self._labelled_phone(digits, raw, body, extension)
        return found

    def _plausible(self, digits: str) -> list[tuple[_Region, str]]:
        """Each region whose trunk prefix, lengths and pattern fit, with the national number."""
        return _plausible_in(self._regions, digits, relaxed=False)

    def _labelled_phone(self, digits: str, raw: str, body: str, extension: str) -> str | None:
        """E.164 of a number a phone label vouches for, read more leniently.

        The trunk prefix may be missing (``mobile: 7700 900123``). When no
        configured region accepts the number, another region may, if the
        number is grouped the way that region writes its numbers
        (``Phone number (Italy): 347 123 4567``): almost any digit string is
        valid somewhere among 245 regions, its usual grouping is the evidence.
        """
        # The strict reading was tried already: only regions whose trunk prefix is missing.
        without_trunk = tuple(
            r for r in self._regions if r.trunk_prefix and not digits.startswith(r.trunk_prefix)
        )
        relaxed = _plausible_in(without_trunk, digits, relaxed=True)
        found = _national(relaxed, raw, body, extension) if relaxed else None
        if found is not None or len(_groups(body)) < 2:
            return found
        tried: set[tuple[int, str]] = set()
        for region, nsn in _plausible_in(self._other_regions(), digits, relaxed=False):
            if region.simple and nsn[0] != "0":
                # Validity is per calling code (shared codes are checked for all their
                # regions at once): one check per code and national number.
                if (region.country_code, nsn) in tried:
                    continue
                tried.add((region.country_code, nsn))
            for number in _valid_numbers([(region, nsn)], raw, extension):
                if _grouped_as_usual(number, body):
                    return _format(number)
        return None

    def _other_regions(self) -> tuple[_Region, ...]:
        """Regions whose calling code no configured region shares (those were tried)."""
        if self._others is None:
            codes = {region.country_code for region in self._regions}
            self._others = tuple(r for r in _all_regions() if r.country_code not in codes)
        return self._others


def _plausible_in(
    regions: Sequence[_Region], digits: str, *, relaxed: bool
) -> list[tuple[_Region, str]]:
    """Each of ``regions`` whose trunk prefix, lengths and pattern fit, with the national number.

    ``relaxed`` lets a number lack the region's trunk prefix (``7911 123456`` in GB).
    """
    plausible: list[tuple[_Region, str]] = []
    for region in regions:
        nsn = digits
        if region.trunk_prefix is not None:
            if digits.startswith(region.trunk_prefix):
                nsn = digits[len(region.trunk_prefix) :]
            elif not relaxed:
                continue
        elif region.country_code == 1 and len(digits) == 11 and digits[0] == "1":
            nsn = digits[1:]
        if nsn and len(nsn) in region.lengths and region.pattern.fullmatch(nsn):
            plausible.append((region, nsn))
    return plausible


@functools.cache
def _all_regions() -> tuple[_Region, ...]:
    """Every region libphonenumber has metadata for, sorted by code (built once, on demand)."""
    return tuple(_region(code) for code in sorted(phonenumbers.SUPPORTED_REGIONS))


def _phone_labelled(text: str, start: int) -> bool:
    """True when a phone label ("phone number:", "Tél. n°", "Handynummer") ends right before."""
    before = text[max(0, start - _LABEL_WINDOW) : start]
    if not before or before[-1].isalnum():
        return False
    lower = before.lower()
    stem = _PHONE_STEM.search(lower)
    if stem is None:
        return False
    # A phone word starts at most 7 characters before its stem ("office phone"), unless
    # lower-casing changed the length ("İ") and the offset cannot be trusted.
    begin = max(0, stem.start() - 7) if len(lower) == len(before) else 0
    return _PHONE_LABEL.search(before, begin) is not None


def _other_label(text: str, start: int) -> Label | None:
    """``"other"`` when a label other than a phone's ends right before ``start``.

    "my number:" is the one generic label read as a phone's (``"phone"``).
    """
    before = text[max(0, start - _LABEL_WINDOW) : start]
    if not before or before[-1].isalnum():
        return None
    label = _LABEL_REVERSED.match(before[::-1])
    if label is not None:
        word = before[len(before) - label.end() :].strip(" \t\n\r:.").lower()
        head = before[: len(before) - label.end()]
        if word in _NUMBER_WORDS and _POSSESSIVE_HEAD.search(head):
            return "phone"
        return "other"
    tail = before.rstrip(" \t:#.").lower()
    if tail.endswith(("nr", "nummer")) and _COMPOUND_LABEL.search(before):
        return "other"
    if tail.endswith(("n.º", "n.°")) and _DOTTED_NUMBER_SIGN.search(before):
        return "other"
    return None


def _priced(text: str, start: int, end: int) -> bool:
    """True when a currency sign or code right before or after makes the number an amount."""
    before = text[max(0, start - 24) : start]
    if not _CURRENCY_LAST.isdisjoint(before[-3:]) and _CURRENCY.search(before):
        return True
    return _CURRENCY_AFTER.match(text[end : end + 5]) is not None


def _national(
    plausible: list[tuple[_Region, str]], raw: str, body: str, extension: str
) -> str | None:
    """Validate a number written without international prefix for each plausible region."""
    valid = _valid_numbers(plausible, raw, extension)
    if len(valid) > 1:
        for number in valid:
            if _grouped_as_usual(number, body):
                return _format(number)
    return _format(valid[0]) if valid else None


def _valid_numbers(
    plausible: list[tuple[_Region, str]], raw: str, extension: str
) -> list[phonenumbers.PhoneNumber]:
    """The number as read in each plausible region where it is valid."""
    valid: list[phonenumbers.PhoneNumber] = []
    for region, nsn in plausible:
        if region.simple and nsn[0] != "0":
            number = _valid(region.country_code, nsn, extension, region.code)
        else:  # leading zeros or prefix rewriting: let libphonenumber parse it
            number = _parse(raw, region.code)
        if number is not None and number.country_code == region.country_code:
            valid.append(number)
    return valid


def _grouped_as_usual(number: phonenumbers.PhoneNumber, body: str) -> bool:
    """True when ``body`` groups its digits as the number's country writes it nationally."""
    national = phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.NATIONAL)
    return _groups(national) == _groups(body)


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
    return [len(group) for group in _DIGIT_GROUPS.findall(value)]
