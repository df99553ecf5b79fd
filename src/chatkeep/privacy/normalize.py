"""Canonical forms, so the same value written two ways gets the same placeholder.

Built-in recognizers already put the canonical form on each
:class:`~chatkeep.privacy.base.Span`; this module is the fallback the vault
uses for spans without one (custom recognizers, direct vault calls).
"""

from __future__ import annotations

import ipaddress
import unicodedata

import phonenumbers

__all__ = ["canonical_value"]

_COMPACT_TYPES = frozenset({"CREDIT_CARD", "IBAN", "US_SSN", "ES_NIF", "UK_NINO"})
_CASELESS_TYPES = frozenset({"EMAIL", "PERSON", "LOCATION"})
# What people split card, IBAN and id numbers with: spaces (also no-break), dashes, dots.
_ID_SEPARATORS = frozenset(" -.\u00a0\u202f")


def canonical_value(entity_type: str, value: str) -> str:
    """Return the form of ``value`` two equal values of ``entity_type`` share.

    E-mails, names and places ignore case, repeated whitespace and Unicode
    composition (``é`` typed as one or two code points); card, IBAN and id
    numbers ignore spaces, dashes, dots and case; IPs use their compressed
    form; phone numbers in international format become E.164 (a national
    number without its region keeps only its digits). Other types are
    compared as written, minus surrounding whitespace.
    """
    text = value.strip()
    if entity_type in _CASELESS_TYPES:
        return unicodedata.normalize("NFC", " ".join(text.split())).casefold()
    if entity_type in _COMPACT_TYPES:
        return "".join(c for c in text if c not in _ID_SEPARATORS).upper()
    if entity_type == "IP_ADDRESS":
        try:
            return ipaddress.ip_address(text).compressed
        except ValueError:
            return text
    if entity_type == "PHONE":
        return _phone(text)
    return text


def _phone(text: str) -> str:
    if text.startswith("+"):
        try:
            number = phonenumbers.parse(text, None)
        except phonenumbers.NumberParseException:
            pass
        else:
            return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    return "".join(c for c in text if c.isdigit())
