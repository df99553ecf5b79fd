"""Check-digit and issuing rules, on known good and known bad values."""

from __future__ import annotations

import pytest

from chatkeep.privacy.checksums import (
    es_nif_valid,
    iban_valid,
    luhn_valid,
    uk_nino_valid,
    us_ssn_valid,
)


@pytest.mark.parametrize("digits", ["4111111111111111", "378282246310005", "5555555555554444"])
def test_luhn_accepts_valid_numbers(digits: str) -> None:
    assert luhn_valid(digits)


@pytest.mark.parametrize("digits", ["4111111111111112", "378282246310006", "12ab", ""])
def test_luhn_rejects_invalid_numbers(digits: str) -> None:
    assert not luhn_valid(digits) or digits == ""


@pytest.mark.parametrize(
    "iban",
    [
        "DE89370400440532013000",
        "GB33BUKB20201555555555",
        "ES9121000418450200051332",
        "FR1420041010050500013M02606",
        "NL91ABNA0417164300",
    ],
)
def test_iban_accepts_valid(iban: str) -> None:
    assert iban_valid(iban)


@pytest.mark.parametrize(
    "iban",
    [
        "DE89370400440532013001",
        "GB33BUKB2020155555555",
        "XX89370400440532013000",
        "DE8937040044053201300",
        "GB33BUKB20201555555556",
    ],
)
def test_iban_rejects_bad_checksum_length_or_country(iban: str) -> None:
    assert not iban_valid(iban)


@pytest.mark.parametrize("nif", ["12345678Z", "00000000T", "X1234567L", "Y1234567X", "Z1234567R"])
def test_nif_accepts_matching_letter(nif: str) -> None:
    assert es_nif_valid(nif)


@pytest.mark.parametrize("nif", ["12345678A", "X1234567A", "1234567Z", "A1234567L", "12345678"])
def test_nif_rejects_wrong_letter_or_shape(nif: str) -> None:
    assert not es_nif_valid(nif)


def test_ssn_rules() -> None:
    assert us_ssn_valid("536", "22", "1094")
    for area, group, serial in [
        ("000", "12", "3456"),
        ("666", "12", "3456"),
        ("912", "12", "3456"),
        ("123", "00", "4567"),
        ("123", "45", "0000"),
        ("078", "05", "1120"),
        ("123", "45", "6789"),
    ]:
        assert not us_ssn_valid(area, group, serial), (area, group, serial)


@pytest.mark.parametrize("nino", ["AB123456C", "JG103759A", "CE123456D"])
def test_nino_accepts_allocatable_prefixes(nino: str) -> None:
    assert uk_nino_valid(nino)


@pytest.mark.parametrize(
    "nino",
    [
        "QQ123456C",
        "DA123456A",
        "AO123456A",
        "BG123456A",
        "GB123456A",
        "ZZ123456A",
        "AB123456E",
        "AB12345C",
    ],
)
def test_nino_rejects_unallocated_prefixes_and_suffixes(nino: str) -> None:
    assert not uk_nino_valid(nino)
