"""The speed-ups in the recognizers give exactly what the plain forms they replace give.

Each fast path (joined libphonenumber type patterns, a reversed label pattern,
anchored scans instead of ``finditer``) is checked against the slow original on
seeded random inputs built from the characters that matter to it.
"""

from __future__ import annotations

import random
import re

import phonenumbers
import pytest

from chatkeep.privacy.recognizers import network, phones
from chatkeep.privacy.recognizers.phone_rules import number_rules, valid_anywhere
from chatkeep.privacy.recognizers.phones import PhoneRecognizer

REGIONS = ("US", "CA", "GB", "JE", "ES", "DE", "FR", "IT", "NL", "BR", "IN", "RU", "KZ", "JP")


def _random_text(rng: random.Random, alphabet: str, longest: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, longest)))


def _national_numbers(rng: random.Random, region: str) -> list[str]:
    """Example numbers of each type, one-digit mutations of them and random digits."""
    examples = []
    for number_type in range(12):
        example = phonenumbers.example_number_for_type(region, number_type)
        if example is not None:
            examples.append(str(example.national_number))
    numbers = list(examples)
    for example in examples:
        for _ in range(20):
            digits = list(example)
            digits[rng.randrange(len(digits))] = str(rng.randrange(10))
            if rng.random() < 0.3:
                digits.insert(rng.randrange(len(digits) + 1), str(rng.randrange(10)))
            numbers.append("".join(digits))
    numbers += [_random_text(rng, "0123456789", 15) for _ in range(60)]
    return [number.lstrip("0") or "1" for number in numbers]


@pytest.mark.parametrize("region", REGIONS)
def test_number_rules_agree_with_libphonenumber(region: str) -> None:
    rng = random.Random(region)
    country_code = phonenumbers.country_code_for_region(region)
    rules = number_rules(region)
    for nsn in _national_numbers(rng, region):
        number = phonenumbers.PhoneNumber(country_code=country_code, national_number=int(nsn))
        assert rules.valid(nsn) == phonenumbers.is_valid_number_for_region(number, region), nsn
        assert valid_anywhere(country_code, nsn) == phonenumbers.is_valid_number(number), nsn


def test_valid_anywhere_handles_non_geographic_codes() -> None:
    number = phonenumbers.parse("+800 1234 5678")
    assert valid_anywhere(800, "12345678") == phonenumbers.is_valid_number(number)


_LABEL_FORWARD = re.compile(
    r"(?i)(?:\b(?:" + "|".join(phones._LABEL_WORDS) + r")\b\.?|#|n[°º]|№)\s*[:#.]?\s*$"
)


def test_reversed_label_pattern_matches_like_the_forward_one() -> None:
    rng = random.Random(1)
    pieces = [*phones._LABEL_WORDS, "Order", "NO", "ſerial", " ", "  ", "\n", ".", ":", "#"]
    pieces += ["n°", "nº", "№", "x", "my", "-", "call "]
    for _ in range(5000):
        before = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 5)))
        reversed_match = phones._LABEL_REVERSED.match(before[::-1]) is not None
        assert reversed_match == (_LABEL_FORWARD.search(before) is not None), repr(before)


@pytest.mark.parametrize(
    ("pattern", "anchor", "alphabet"),
    [
        (network._IPV4, network._IPV4_ANCHOR, "0123456789١٢...a_- \n"),
        (network._IPV6, network._IPV6_ANCHOR, "0123456789abcdefABCDEFg::.. \n_%"),
    ],
)
def test_anchored_scan_finds_what_finditer_finds(
    pattern: re.Pattern[str], anchor: re.Pattern[str], alphabet: str
) -> None:
    rng = random.Random(alphabet)
    ipv4 = pattern is network._IPV4
    head = str.isdecimal if ipv4 else network._HEX_DIGITS.__contains__
    size = 3 if ipv4 else 4
    for _ in range(5000):
        text = _random_text(rng, alphabet, 40)
        fast = [m.span() for m in network._anchored_matches(pattern, text, anchor, head, size)]
        assert fast == [m.span() for m in pattern.finditer(text)], repr(text)


def test_url_scan_finds_what_finditer_finds() -> None:
    rng = random.Random(2)
    alphabet = "ab+.-:/@ \nZ9:p//'\"#?_"
    recognizer = network.UrlCredentialsRecognizer()
    for _ in range(5000):
        text = _random_text(rng, alphabet, 40)
        expected = []
        for match in network._URL_CREDENTIALS.finditer(text):
            value = match.group().rstrip(network._TRAILING_PUNCTUATION)
            if "@" in value.split("://", 1)[1]:
                expected.append(value)
        assert [span.text for span in recognizer.find(text)] == expected, repr(text)


def test_zeros_split_by_a_space_do_not_crash_the_phone_recognizer() -> None:
    # "0 0810 ..." has digits starting "00" but no "00" in the text.
    assert list(PhoneRecognizer().find("call 0 0810 4228215 now")) == []
