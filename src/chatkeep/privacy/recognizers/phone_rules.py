"""Fast validity checks equal to libphonenumber's ``is_valid_number_for_region``.

libphonenumber tests a national number against each number type of a region in
turn (premium rate, toll free, ..., fixed line, mobile: up to eleven regular
expressions, each behind several Python calls). A number is valid when it fits
the region's general pattern and some type, so here the type patterns are
joined once per region and number length into one expression: one length look-up
and two matches per check, with the same answer.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import phonenumbers
from phonenumbers.phonemetadata import PhoneMetadata, PhoneNumberDesc

__all__ = ["NumberRules", "number_rules", "shares_calling_code", "valid_anywhere"]

_TYPES = (
    "premium_rate",
    "toll_free",
    "shared_cost",
    "voip",
    "personal_number",
    "pager",
    "uan",
    "voicemail",
    "fixed_line",
)
_MAX_NSN_LENGTH = 17


@dataclass(frozen=True, slots=True)
class NumberRules:
    """The general pattern of a region, and per length the union of its type patterns."""

    country_code: int
    lengths: frozenset[int]  # empty: any length
    pattern: re.Pattern[str] | None
    by_length: dict[int, re.Pattern[str]]
    leading_digits: re.Pattern[str] | None  # claims numbers of a shared calling code

    def valid(self, nsn: str) -> bool:
        """True when the national significant number ``nsn`` is valid in the region."""
        size = len(nsn)
        if self.pattern is None or (self.lengths and size not in self.lengths):
            return False
        typed = self.by_length.get(size)
        return typed is not None and bool(self.pattern.fullmatch(nsn) and typed.fullmatch(nsn))


@functools.cache
def number_rules(region: str) -> NumberRules:
    """The rules of an ISO region code (for one libphonenumber lacks, no number is valid)."""
    metadata = PhoneMetadata.metadata_for_region(region, None)
    if metadata is None:
        return NumberRules(0, frozenset(), None, {}, None)
    return _rules(metadata)


def valid_anywhere(country_code: int, nsn: str) -> bool:
    """``phonenumbers.is_valid_number`` of the number with national significant number ``nsn``."""
    regions = _regions_of(country_code)
    if len(regions) == 1 and regions[0][0] == phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY:
        number = phonenumbers.PhoneNumber(country_code=country_code, national_number=int(nsn))
        return bool(phonenumbers.is_valid_number(number))  # +800 and the like: the library
    if len(regions) == 1:
        return regions[0][1].valid(nsn)
    # A code several regions share (+1, +44, ...): the number belongs to the first one
    # whose leading digits start it or, for a region without leading digits, where it
    # is valid; it is valid if valid there.
    for _, rules in regions:
        if rules.leading_digits is not None:
            if rules.leading_digits.match(nsn):
                return rules.valid(nsn)
        elif rules.valid(nsn):
            return True
    return False


def shares_calling_code(region: str) -> bool:
    """True when other regions dial the same country calling code (US and CA: +1)."""
    return len(_regions_of(number_rules(region).country_code)) > 1


@functools.cache
def _regions_of(country_code: int) -> tuple[tuple[str, NumberRules], ...]:
    regions = phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(country_code, ())
    return tuple((region, number_rules(region)) for region in regions)


def _rules(metadata: PhoneMetadata) -> NumberRules:
    general = metadata.general_desc
    country_code = int(metadata.country_code or 0)
    leading = re.compile(metadata.leading_digits) if metadata.leading_digits is not None else None
    if general is None or not general.national_number_pattern:
        return NumberRules(country_code, frozenset(), None, {}, leading)
    descs = [getattr(metadata, name) for name in _TYPES]
    # Mobile is only tried when its pattern differs from the fixed-line one.
    if not metadata.same_mobile_and_fixed_line_pattern:
        descs.append(metadata.mobile)
    usable = [d for d in descs if d is not None and d.national_number_pattern]
    lengths = frozenset(general.possible_length or ())
    by_length = {}
    for size in lengths or range(1, _MAX_NSN_LENGTH + 1):
        fitting = [f"(?:{d.national_number_pattern})" for d in usable if _fits(d, size)]
        if fitting:
            by_length[size] = re.compile("|".join(fitting))
    pattern = re.compile(general.national_number_pattern)
    return NumberRules(country_code, lengths, pattern, by_length, leading)


def _fits(desc: PhoneNumberDesc, size: int) -> bool:
    return not desc.possible_length or size in desc.possible_length
