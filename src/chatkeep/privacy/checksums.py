"""Check digits and issuing rules used to tell real identifiers from look-alikes.

Pure functions over already-normalised strings (no spaces or dashes), so each
recognizer stays a thin "find a candidate, then validate it" loop and the rules
can be unit-tested on their own.
"""

from __future__ import annotations

import string

__all__ = [
    "IBAN_LENGTHS",
    "es_nif_valid",
    "iban_valid",
    "luhn_valid",
    "uk_nino_valid",
    "us_ssn_valid",
]

#: IBAN length per country (SWIFT IBAN registry); a country not listed is not an IBAN.
IBAN_LENGTHS: dict[str, int] = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22,
    "BH": 22, "BR": 29, "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22,
    "DK": 18, "DO": 28, "EE": 20, "EG": 29, "ES": 24, "FI": 18, "FO": 18, "FR": 27,
    "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28, "HR": 21, "HU": 28,
    "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24,
    "ME": 22, "MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24,
    "PL": 28, "PS": 29, "PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SC": 31,
    "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28, "TL": 23, "TN": 24,
    "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}  # fmt: skip

# IBAN check: letters count as two-digit numbers, A (and a) = 10 ... Z = 35.
_IBAN_LETTER_VALUES = {ord(char): str(int(char, 36)) for char in string.ascii_letters}
_NIF_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"
_NIE_PREFIX = {"X": "0", "Y": "1", "Z": "2"}
# UK NINO: first letter never D F I Q U V; second never D F I O Q U V; some pairs unused.
_NINO_FIRST = set("ABCEGHJKLMNOPRSTWXYZ")
_NINO_SECOND = set("ABCEGHJKLMNPRSTWXYZ")
_NINO_BAD_PREFIXES = {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}


def luhn_valid(digits: str) -> bool:
    """True when ``digits`` (only 0-9) passes the Luhn mod-10 check used by payment cards."""
    if not digits.isdigit():
        return False
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def iban_valid(iban: str) -> bool:
    """True when ``iban`` (upper case, no separators) has its country's length and mod-97 == 1."""
    if len(iban) < 5 or IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    if not (iban[2:4].isdigit() and iban.isalnum() and iban.isascii()):
        return False
    rearranged = iban[4:] + iban[:4]
    return int(rearranged.translate(_IBAN_LETTER_VALUES)) % 97 == 1


def es_nif_valid(nif: str) -> bool:
    """True for a Spanish DNI (8 digits + letter) or NIE (X/Y/Z + 7 digits + letter).

    Both end in the letter ``TRWAGMYFPDXBNJZSQVHLCKE[number % 23]``; an NIE's
    leading X/Y/Z stands for 0/1/2 in that number.
    """
    if len(nif) != 9 or not nif.isascii():
        return False
    body, letter = nif[:8], nif[8]
    if body[0] in _NIE_PREFIX:
        body = _NIE_PREFIX[body[0]] + body[1:]
    if not body.isdigit():
        return False
    return _NIF_LETTERS[int(body) % 23] == letter


def us_ssn_valid(area: str, group: str, serial: str) -> bool:
    """True unless the SSA never issues the number.

    Area 000, 666 and 900-999, group 00 and serial 0000 are never issued, and a
    few numbers are famous public examples (078-05-1120 from a wallet insert,
    219-09-9999 from an SSA leaflet, 123-45-6789).
    """
    if not (len(area) == 3 and len(group) == 2 and len(serial) == 4):
        return False
    if not (area + group + serial).isdigit():
        return False
    if area in {"000", "666"} or area[0] == "9" or group == "00" or serial == "0000":
        return False
    return f"{area}{group}{serial}" not in {"078051120", "219099999", "123456789"}


def uk_nino_valid(nino: str) -> bool:
    """True for a UK National Insurance number shaped ``AB123456C`` with an allocatable prefix.

    HMRC never uses D, F, I, Q, U or V as the first letter, nor those or O as
    the second, nor the prefixes BG, GB, KN, NK, NT, TN and ZZ; the suffix is A-D.
    """
    if len(nino) != 9 or not nino.isascii():
        return False
    first, second, digits, suffix = nino[0], nino[1], nino[2:8], nino[8]
    return (
        first in _NINO_FIRST
        and second in _NINO_SECOND
        and nino[:2] not in _NINO_BAD_PREFIXES
        and digits.isdigit()
        and suffix in "ABCD"
    )
