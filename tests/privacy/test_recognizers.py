"""Each built-in recognizer: what it must find (exact span) and near misses it must not."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest

from chatkeep.privacy.base import Recognizer
from chatkeep.privacy.recognizers import (
    CreditCardRecognizer,
    EmailRecognizer,
    EsNifRecognizer,
    IbanRecognizer,
    IpAddressRecognizer,
    PhoneRecognizer,
    UkNinoRecognizer,
    UrlCredentialsRecognizer,
    UsSsnRecognizer,
    network,
)

PHONES = PhoneRecognizer(("US", "GB", "ES", "DE", "FR"))


def found(recognizer: Recognizer, text: str) -> list[str]:
    return [span.text for span in recognizer.find(text)]


def canonicals(recognizer: Recognizer, text: str) -> list[str | None]:
    return [span.canonical for span in recognizer.find(text)]


CASES: list[tuple[Recognizer, str, list[str]]] = [
    # e-mail
    (
        EmailRecognizer(),
        "mail ana.lopez+billing@eu.mail.example.com.",
        ["ana.lopez+billing@eu.mail.example.com"],
    ),
    (EmailRecognizer(), "From: <Bob_O'Neil@Example.ORG>", ["Bob_O'Neil@Example.ORG"]),
    (EmailRecognizer(), "mailto:j@x.io, k@y.co", ["j@x.io", "k@y.co"]),
    (EmailRecognizer(), "user@localhost, left-pad@1.3.0, @handle, a@@b.com", []),
    (EmailRecognizer(), "https://user@example.com/login and ssh://git@github.com/x", []),
    (EmailRecognizer(), "name at example dot com", []),
    (
        EmailRecognizer(),
        "josé@ejemplo.es; info@müller-bau.de.",
        ["josé@ejemplo.es", "info@müller-bau.de"],
    ),
    (EmailRecognizer(), "ΑΒΓ: δοκιμή@παράδειγμα.ελ", ["δοκιμή@παράδειγμα.ελ"]),
    (EmailRecognizer(), "punycode: a@xn--mller-kva.de", ["a@xn--mller-kva.de"]),
    # phone
    (PHONES, "Call (415) 555-2671 or 415.555.2671!", ["(415) 555-2671", "415.555.2671"]),
    (PHONES, "ext: +1-303-228-9218x401", ["+1-303-228-9218x401"]),
    (PHONES, "Ring 07700 900123 or +44 (0)20 7946 0018", ["07700 900123", "+44 (0)20 7946 0018"]),
    (PHONES, "Llámame al 612 34 56 78", ["612 34 56 78"]),
    (PHONES, "Tel. 030/12345678, Mobil 0151 23456789", ["030/12345678", "0151 23456789"]),
    (PHONES, "Appelez le 06 12 34 56 78 ou 01.42.68.53.00", ["06 12 34 56 78", "01.42.68.53.00"]),
    (PHONES, "0049 30 12345678", ["0049 30 12345678"]),
    (PHONES, "order no. 2024-118734, Order #4155552671, invoice 6123456789", []),
    (PHONES, "on 2024-03-15 14:30, 15/03/2024, 15.03.2024", []),
    (PHONES, "v 8.7.139.5127 at 192.168.100.200, zip 94110-1234", []),
    (PHONES, "price 612.345.678 € and USD 4155552671", []),
    (PHONES, "(123) 456-7890, +44 20 7946 095, +33 6 12 34 56", []),
    (PHONES, "ORD-612345678 and A612345678", []),
    (PHONES, "IBAN GB71 VCNI 0747 8169 7225 46", []),
    (PhoneRecognizer(("DE", "FR", "GB")), "Kundennummer 2024118734 and 2024118734", []),
    # card
    (CreditCardRecognizer(), "card 4111 1111 1111 1111 ok", ["4111 1111 1111 1111"]),
    (
        CreditCardRecognizer(),
        "amex 3782-822463-10005; mc 5555555555554444",
        ["3782-822463-10005", "5555555555554444"],
    ),
    (CreditCardRecognizer(), "bad 4111 1111 1111 1112, long 4111 1111 1111 1111 1111", []),
    (CreditCardRecognizer(), "mixed 4111 1111-1111 1111, glued JJD607493305684702110", []),
    (CreditCardRecognizer(), "no issuer 1234567812345670", []),
    (
        CreditCardRecognizer(),
        "4111.1111.1111.1111 and 5555\u00a05555\u00a05555\u00a04444.",
        ["4111.1111.1111.1111", "5555\u00a05555\u00a05555\u00a04444"],
    ),
    (CreditCardRecognizer(), "v4111.1111.1111.1111, 4111.1111 1111.1111", []),
    # IBAN
    (IbanRecognizer(), "pay DE89 3704 0044 0532 0130 00 today", ["DE89 3704 0044 0532 0130 00"]),
    (IbanRecognizer(), "GB33BUKB20201555555555.", ["GB33BUKB20201555555555"]),
    (IbanRecognizer(), "lower de89370400440532013000", ["de89370400440532013000"]),
    (IbanRecognizer(), "DE89 3704 0044 0532 0130 00 BY tomorrow", ["DE89 3704 0044 0532 0130 00"]),
    (IbanRecognizer(), "bad DE89 3704 0044 0532 0130 01, XX89370400440532013000", []),
    (IbanRecognizer(), "short DE89 3704 0044 0532 0130", []),
    (
        IbanRecognizer(),
        "DE89  3704  0044  0532  0130  00 / GB33\u00a0BUKB\u00a02020\u00a01555\u00a05555\u00a055",
        [
            "DE89  3704  0044  0532  0130  00",
            "GB33\u00a0BUKB\u00a02020\u00a01555\u00a05555\u00a055",
        ],
    ),
    (IbanRecognizer(), "three spaces DE89   3704 0044 0532 0130 00", []),
    # IP
    (
        IpAddressRecognizer(),
        "from 10.0.0.25, ::1 and 2001:db8::8a2e:370:7334.",
        ["10.0.0.25", "::1", "2001:db8::8a2e:370:7334"],
    ),
    (IpAddressRecognizer(), "http://192.168.1.20:8080/x", ["192.168.1.20"]),
    (IpAddressRecognizer(), "256.1.1.1 1.2.3 1.2.3.4.5 v1.2.3.4 01.02.03.04", []),
    (IpAddressRecognizer(), "at 10:30:45, std::vector, dead::beef, MAC 00:1A:2B:3C:4D:5E", []),
    (IpAddressRecognizer(), "version 3.2.1.4, Version: 10.0.0.1, build 5.4.3.2", []),
    (IpAddressRecognizer(), "host 10.0.0.1 (version 2)", ["10.0.0.1"]),
    (IpAddressRecognizer(), "1:" * 3000 + "g and fe80::1", ["fe80::1"]),
    # URL credentials
    (
        UrlCredentialsRecognizer(),
        "DATABASE_URL=postgres://app:s3cr%40t@db:5432/x.",
        ["postgres://app:s3cr%40t@db:5432/x"],
    ),
    (UrlCredentialsRecognizer(), "(redis://:pw@cache:6379/0)", ["redis://:pw@cache:6379/0"]),
    (UrlCredentialsRecognizer(), "https://example.com/a?b=c https://user@host/ ftp://h:21/", []),
    (
        UrlCredentialsRecognizer(),
        "mongodb://app:Xy/9#kL2@mongo:27017/prod, redis://:s3cr#t@cache:6379.",
        ["mongodb://app:Xy/9#kL2@mongo:27017/prod", "redis://:s3cr#t@cache:6379"],
    ),
    (UrlCredentialsRecognizer(), "https://example.com:8443/@jdoe ftp://h:21/pub/a@2x.png", []),
    # SSN
    (UsSsnRecognizer(), "SSN 536-22-1094 or 536 22 1094", ["536-22-1094", "536 22 1094"]),
    (UsSsnRecognizer(), "My SSN is 536221094.", ["536221094"]),
    (UsSsnRecognizer(), "order 536221094, 000-12-3456, 666-12-3456, 912-34-5678", []),
    (UsSsnRecognizer(), "123-00-4567 123-45-0000 536-22-1094-9 +1 773-57-8045", []),
    (UsSsnRecognizer(), "zip 94110-1234, date 2024-03-15", []),
    # Spanish NIF
    (
        EsNifRecognizer(),
        "DNI 12345678Z, NIE X-1234567-L, 12345678-z",
        ["12345678Z", "X-1234567-L", "12345678-z"],
    ),
    (EsNifRecognizer(), "DNI 12345678A, X1234567A, 123456789Z", []),
    # UK NINO
    (UkNinoRecognizer(), "NI JG 10 37 59 A, JG103759A", ["JG 10 37 59 A", "JG103759A"]),
    (UkNinoRecognizer(), "QQ 12 34 56 C, DA123456A, AB123456E, JG 10 37 59 E", []),
    # issue 8: lower case and other groupings are how people type them
    (
        UkNinoRecognizer(),
        "jg103759a, JG 1037 59A, AB 123456 C, HY\u00a056\u00a078\u00a090\u00a0B",
        ["jg103759a", "JG 1037 59A", "AB 123456 C", "HY\u00a056\u00a078\u00a090\u00a0B"],
    ),
    (UkNinoRecognizer(), "NI number: pr 48 19 27 c", ["pr 48 19 27 c"]),
    (UkNinoRecognizer(), "call me 12 34 56 a bit later", []),
]


@pytest.mark.parametrize(("recognizer", "text", "expected"), CASES)
def test_recognizer(recognizer: Recognizer, text: str, expected: list[str]) -> None:
    assert found(recognizer, text) == expected


def test_spans_point_into_the_text() -> None:
    text = "x DE89 3704 0044 0532 0130 00 y"
    for span in IbanRecognizer().find(text):
        assert text[span.start : span.end] == span.text


def test_phone_canonical_is_e164_across_formats() -> None:
    text = "+34 612 345 678 / 612345678 / 0034 612 34 56 78"
    assert canonicals(PHONES, text) == ["+34612345678"] * 3


def test_phone_grouping_breaks_region_ties() -> None:
    # Valid in DE and FR: the French pair grouping decides.
    assert canonicals(PHONES, "06 12 34 56 78") == ["+33612345678"]
    assert canonicals(PhoneRecognizer(("DE",)), "06123 45678") == ["+49612345678"]


def test_phone_regions_limit_national_formats() -> None:
    assert found(PhoneRecognizer(("US",)), "612345678 and +34 612 345 678") == ["+34 612 345 678"]


def test_phone_extension_is_part_of_canonical() -> None:
    assert canonicals(PHONES, "(415) 555-2671 ext. 12") == ["+14155552671;ext=12"]


def test_unknown_phone_region_is_a_privacy_error() -> None:
    from chatkeep.errors import PrivacyError

    with pytest.raises(PrivacyError, match="unknown phone region"):
        PhoneRecognizer(("XX",))


def test_canonical_forms() -> None:
    assert canonicals(EmailRecognizer(), "Ana@X.com") == ["ana@x.com"]
    assert canonicals(CreditCardRecognizer(), "4111-1111-1111-1111") == ["4111111111111111"]
    assert canonicals(IbanRecognizer(), "de89 3704 0044 0532 0130 00") == ["DE89370400440532013000"]
    assert canonicals(IpAddressRecognizer(), "2001:0db8:0000::0001") == ["2001:db8::1"]
    assert canonicals(EsNifRecognizer(), "x-1234567-l") == ["X1234567L"]


@pytest.mark.parametrize(
    ("pattern", "anchor", "alphabet", "head", "size", "blocking"),
    [
        (
            network._IPV4,
            network._IPV4_ANCHOR,
            "0123456789١٢...a_- \n",
            str.isdecimal,
            3,
            network._IPV4_BLOCKING,
        ),
        (
            network._IPV6,
            network._IPV6_ANCHOR,
            "0123456789abcdefABCDEFg::.. \n_%",
            network._HEX_DIGITS.__contains__,
            4,
            network._IPV6_BLOCKING,
        ),
    ],
)
def test_anchored_scan_skipping_blocked_runs_finds_what_finditer_finds(
    pattern: re.Pattern[str],
    anchor: re.Pattern[str],
    alphabet: str,
    head: Callable[[str], bool],
    size: int,
    blocking: re.Pattern[str],
) -> None:
    rng = random.Random(alphabet)
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        fast = network._anchored_matches(pattern, text, anchor, head, size, blocking)
        assert [m.span() for m in fast] == [m.span() for m in pattern.finditer(text)], repr(text)


def test_email_canonical_ignores_unicode_composition() -> None:
    composed, decomposed = "jos\u00e9@x.es", "jose\u0301@x.es"
    assert canonicals(EmailRecognizer(), composed) == canonicals(EmailRecognizer(), decomposed)


def test_nino_scan_from_digits_finds_what_finditer_finds() -> None:
    # The recognizer jumps to digits with two letters before them instead of trying the
    # NINO pattern at every letter; the result must be what plain finditer gives.
    from chatkeep.privacy.checksums import uk_nino_valid
    from chatkeep.privacy.recognizers import national_ids

    def plain(text: str) -> list[str]:
        values = []
        for match in national_ids._NINO.finditer(text):
            value = match.group()
            compact = value.translate(national_ids._NINO_SPACES)
            context = national_ids._NINO_CONTEXT.search(
                text, max(0, match.start() - 40), match.start()
            )
            if uk_nino_valid(compact.upper()) and (
                compact == compact.upper() or compact == value or context
            ):
                values.append(value)
        return values

    rng = random.Random(3)
    alphabet = "ABCEGHJKabce0123456789  \u00a0-_xZ"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30)))
        assert found(UkNinoRecognizer(), text) == plain(text), repr(text)
