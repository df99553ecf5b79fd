"""Generate the labelled PII evaluation set ``tests/data/pii/eval.jsonl`` (deterministic).

Usage: ``python scripts/generate_pii_set.py [--out PATH] [--count N] [--seed S]``.
The held-out set: ``--seed 97531 --count 600 --no-handwritten --out tests/data/pii/holdout.jsonl``.
The realistic sets: ``--from-marked tests/data/pii/realistic.marked.txt --out
tests/data/pii/realistic.jsonl`` (and ``realistic_holdout`` with ``--id-prefix rh``).

Each line is one chat message::

    {"id": "m0001", "locale": "de_DE", "kind": "mixed", "text": "...",
     "entities": [{"start": 12, "end": 39, "type": "IBAN", "value": "DE89 ..."}]}

Messages mix real-looking personal data written the way people write it
(phones with spaces, dashes, dots, slashes, parentheses and ``(0)``; grouped
cards and IBANs; plus-addressed e-mails on sub-domains) with near misses that
must not be reported: order, invoice and tracking numbers, dates, times,
versions, prices, card numbers failing Luhn, IBANs failing mod-97, numbers
shaped like phones that libphonenumber rejects, SSNs/DNIs/NINOs breaking their
rules, out-of-range IPs, URLs without a password, e-mail look-alikes.

Labels come from construction, and validity is checked here with independent
code (or with ``phonenumbers`` itself for phones), never with chatkeep's
recognizers, so the set measures them rather than mirrors them.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import phonenumbers
from faker import Faker

SEED = 20240611
COUNT = 720
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "pii" / "eval.jsonl"
LOCALES = ("en_US", "en_GB", "es_ES", "de_DE", "fr_FR")
REGION = {"en_US": "US", "en_GB": "GB", "es_ES": "ES", "de_DE": "DE", "fr_FR": "FR"}
ALL_REGIONS = tuple(REGION.values())


# --------------------------------------------------------------------------- checks
# Independent re-implementations, used only to keep generated values honest.


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def nif_letter(number: int) -> str:
    return "TRWAGMYFPDXBNJZSQVHLCKE"[number % 23]


def phone_valid_somewhere(text: str) -> bool:
    """True if libphonenumber accepts ``text`` as international or in any region used."""
    regions: tuple[str | None, ...] = (None, *ALL_REGIONS)
    for region in regions:
        try:
            number = phonenumbers.parse(text, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return True
    return False


# --------------------------------------------------------------------------- builder


@dataclass
class Message:
    """A message under construction: text pieces and the labels they carry."""

    locale: str
    parts: list[str] = field(default_factory=list)
    entities: list[dict[str, object]] = field(default_factory=list)
    length: int = 0

    def add(self, text: str, entity_type: str | None = None) -> None:
        if entity_type is not None:
            self.entities.append(
                {
                    "start": self.length,
                    "end": self.length + len(text),
                    "type": entity_type,
                    "value": text,
                }
            )
        self.parts.append(text)
        self.length += len(text)

    def add_template(self, template: str, value: str, entity_type: str | None) -> None:
        before, _, after = template.partition("{}")
        self.add(before)
        self.add(value, entity_type)
        self.add(after)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class Gen:
    """Seeded value generators, one Faker per locale."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fakers: dict[str, Faker] = {}
        for index, locale in enumerate((*LOCALES, "nl_NL", "it_IT")):
            faker = Faker(locale)
            faker.seed_instance(seed + index)
            self.fakers[locale] = faker

    def pick(self, options: Sequence[str]) -> str:
        return options[self.rng.randrange(len(options))]

    def digits(self, count: int, first: str = string.digits) -> str:
        return self.pick(first) + "".join(self.pick(string.digits) for _ in range(count - 1))

    # ---------------------------------------------------------------- valid values

    def email(self, locale: str) -> str:
        f = self.fakers[locale]
        first = _ascii(f.first_name()).lower().replace(" ", "") or "ana"
        last = _ascii(f.last_name()).lower().replace(" ", "") or "lopez"
        domain = f.domain_name()
        style = self.rng.randrange(8)
        if style == 0:
            value = f.email()
        elif style == 1:
            value = f.free_email()
        elif style == 2:
            tag = self.pick(("news", "shop", "work", "2024", "github", "spam"))
            value = f"{first}.{last}+{tag}@{domain}"
        elif style == 3:
            value = f"{first[0]}.{last}@{self.pick(('mail', 'eu', 'corp.mail', 'staff'))}.{domain}"
        elif style == 4:
            value = f"{first.capitalize()}.{last.capitalize()}@{domain}"
        elif style == 5:
            value = f"{first}_{last}{self.rng.randrange(10, 99)}@{f.free_email_domain()}"
        elif style == 6:
            value = f"{last}-{first}@{domain.upper() if self.rng.random() < 0.3 else domain}"
        else:
            value = f.company_email()
        return _ascii(value) if _ascii(value).count("@") == 1 else f"{first}@{domain}"

    def phone(self, locale: str) -> str:
        region = REGION[locale]
        if self.rng.random() < 0.15:  # someone abroad, written internationally
            region = self.pick([r for r in ALL_REGIONS if r != region])
            return self._format_phone(self._valid_number(region), region, international=True)
        if self.rng.random() < 0.3:
            faked = self._faker_phone(locale)
            if faked:
                return faked
        return self._format_phone(self._valid_number(region), region, international=None)

    def _faker_phone(self, locale: str) -> str | None:
        for _ in range(20):
            candidate = self.fakers[locale].phone_number()
            try:
                number = phonenumbers.parse(candidate, REGION[locale])
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(number):
                return str(candidate)
        return None

    def _valid_number(self, region: str) -> phonenumbers.PhoneNumber:
        shapes = {
            "US": lambda: self.digits(3, "23456789") + self.digits(3, "23456789") + self.digits(4),
            "GB": lambda: self.pick(
                [
                    "7" + self.digits(9),
                    "20" + self.digits(8),
                    "161" + self.digits(7),
                    "121" + self.digits(7),
                    "113" + self.digits(7),
                    "1632" + self.digits(6),
                ]
            ),
            "ES": lambda: self.digits(9, "6789"),
            "DE": lambda: self.pick(
                [
                    "15" + self.digits(9),
                    "17" + self.digits(8),
                    "30" + self.digits(8),
                    "89" + self.digits(7),
                    "40" + self.digits(8),
                    "221" + self.digits(7),
                    "69" + self.digits(8),
                    "911" + self.digits(6),
                ]
            ),
            "FR": lambda: self.digits(9, "1234567"),
        }
        code = phonenumbers.country_code_for_region(region)
        while True:
            number = phonenumbers.parse(f"+{code}{shapes[region]()}", None)
            if phonenumbers.is_valid_number(number):
                return number

    def _format_phone(
        self, number: phonenumbers.PhoneNumber, region: str, international: bool | None
    ) -> str:
        fmt = phonenumbers.PhoneNumberFormat
        national = phonenumbers.format_number(number, fmt.NATIONAL)
        intl = phonenumbers.format_number(number, fmt.INTERNATIONAL)
        e164 = phonenumbers.format_number(number, fmt.E164)
        if international is None:
            international = self.rng.random() < 0.4
        if international:
            style = self.rng.randrange(6)
            if style == 0:
                return e164
            if style == 1 and region in ("GB", "DE", "FR"):
                cc, _, rest = intl.partition(" ")
                return f"{cc} (0){rest}" if self.rng.random() < 0.5 else f"{cc} (0) {rest}"
            if style == 2 and region != "US":
                return "00" + intl[1:]
            if style == 3:
                return intl.replace(" ", "-")
            return intl
        style = self.rng.randrange(6)
        if region == "US":
            digits = national.replace("(", "").replace(")", "").replace("-", " ").split()
            a, b, c = digits
            return self.pick(
                [
                    f"({a}) {b}-{c}",
                    f"{a}-{b}-{c}",
                    f"{a}.{b}.{c}",
                    f"{a}{b}{c}",
                    f"1-{a}-{b}-{c}",
                    f"({a}){b}-{c}",
                    f"{a} {b} {c}",
                ]
            )
        if style == 0:
            return national.replace(" ", "")
        if style == 1:
            return national.replace(" ", "-")
        if style == 2 and region == "FR":
            return national.replace(" ", ".")
        if style == 2 and region == "DE":
            area, _, rest = national.partition(" ")
            return f"{area}/{rest.replace(' ', '')}"
        if style == 3 and region == "DE":
            area, _, rest = national.partition(" ")
            return f"({area}) {rest}"
        if style == 3 and region == "ES":
            flat = national.replace(" ", "")
            return f"{flat[:3]} {flat[3:5]} {flat[5:7]} {flat[7:]}"
        return national

    def card(self) -> str:
        kind = self.pick(
            ("visa16", "visa16", "mastercard", "mastercard", "amex", "discover", "jcb16", "diners")
        )
        f = self.fakers["en_US"]
        digits = f.credit_card_number(card_type=kind)
        # Faker draws JCB numbers from all of 35xx; only 3528-3589 is JCB's range.
        while kind == "jcb16" and not 3528 <= int(digits[:4]) <= 3589:
            digits = f.credit_card_number(card_type=kind)
        assert luhn_ok(digits), digits
        return self._group_card(digits)

    def _group_card(self, digits: str) -> str:
        style = self.rng.randrange(4)
        if style == 0:
            return digits
        sep = " " if style in (1, 2) else "-"
        if len(digits) == 15:
            return sep.join((digits[:4], digits[4:10], digits[10:]))
        if len(digits) == 14:
            return sep.join((digits[:4], digits[4:10], digits[10:]))
        return sep.join(digits[i : i + 4] for i in range(0, len(digits), 4))

    def iban(self, locale: str) -> str:
        source = self.pick((locale, locale, locale, "nl_NL", "it_IT", "de_DE", "fr_FR", "es_ES"))
        if source == "en_US":
            source = "en_GB"
        value = self.fakers[source].iban()
        assert iban_ok(value), value
        return self._group_iban(value)

    def _group_iban(self, value: str) -> str:
        style = self.rng.randrange(10)
        if style < 6:
            return " ".join(value[i : i + 4] for i in range(0, len(value), 4))
        if style == 9:
            return value.lower()
        return value

    def ip(self) -> str:
        f = self.fakers["en_US"]
        style = self.rng.randrange(6)
        if style == 0:
            return f.ipv4_private()
        if style == 1:
            return str(ipaddress.IPv6Address(f.ipv6()))
        if style == 2:
            return f"2001:db8:{self.rng.randrange(1, 0xFFFF):x}::{self.rng.randrange(1, 0xFFF):x}"
        if style == 3:
            return f"fe80::{self.rng.randrange(1, 0xFFFF):x}:{self.rng.randrange(1, 0xFFFF):x}"
        return f.ipv4_public()

    def url_credentials(self, locale: str) -> str:
        f = self.fakers[locale]
        scheme = self.pick(
            (
                "postgres",
                "postgresql",
                "mysql",
                "https",
                "ftp",
                "redis",
                "amqp",
                "mongodb+srv",
                "sftp",
            )
        )
        user = _ascii(f.user_name()) or "admin"
        password = f.password(length=self.rng.randrange(8, 16), special_chars=False)
        if self.rng.random() < 0.3:
            password = password[:4] + self.pick(("%40", "%21", "-", "_", ".")) + password[4:]
        host = self.pick(
            (
                f.domain_name(),
                "db.internal",
                f.ipv4_private(),
                "localhost",
                f"{f.word()}.{f.domain_name()}",
            )
        )
        port = self.pick(("", ":5432", ":3306", ":6379", ":8443", ":21"))
        path = self.pick(("", "/", "/app", "/prod_db", "/vhost?ssl=true", "/files/export.csv"))
        return f"{scheme}://{user}:{password}@{host}{port}{path}"

    def ssn(self) -> tuple[str, bool]:
        value = str(self.fakers["en_US"].ssn())
        area, group, serial = value.split("-")
        assert area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"
        style = self.rng.randrange(8)
        if style == 0:
            return f"{area} {group} {serial}", False
        if style == 1:
            return area + group + serial, True  # compact: only valid with an "SSN" label
        return value, False

    def nif(self) -> str:
        f = self.fakers["es_ES"]
        value = str(f.nie() if self.rng.random() < 0.35 else f.nif())
        body = ("012"["XYZ".index(value[0])] + value[1:8]) if value[0] in "XYZ" else value[:8]
        assert nif_letter(int(body)) == value[8], value
        style = self.rng.randrange(8)
        if style == 0:
            return f"{value[:8]}-{value[8]}"
        if style == 1 and value[0] in "XYZ":
            return f"{value[0]}-{value[1:8]}-{value[8]}"
        if style == 2:
            return value[:8] + value[8].lower()
        return value

    def nino(self) -> str:
        first = self.pick("ABCEGHJKLMNOPRSTWXYZ")
        second = self.pick("ABCEGHJKLMNPRSTWXYZ")
        while first + second in {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}:
            second = self.pick("ABCEGHJKLMNPRSTWXYZ")
        digits = self.digits(6)
        suffix = self.pick("ABCD")
        if self.rng.random() < 0.5:
            return f"{first}{second} {digits[:2]} {digits[2:4]} {digits[4:]} {suffix}"
        return f"{first}{second}{digits}{suffix}"

    # ---------------------------------------------------------------- near misses

    def order_number(self) -> str:
        return self.pick(
            [
                f"#{self.digits(self.rng.randrange(6, 11))}",
                f"ORD-{self.digits(8)}",
                f"{self.rng.randrange(2019, 2026)}-{self.digits(6)}",
                f"INV-2024-{self.digits(5)}",
                f"PO {self.digits(10, '4')}",
                f"A{self.digits(9)}",
                f"{self.digits(3)}-{self.digits(7)}",
                f"SO{self.digits(7)}",
                f"#{self.digits(3)}-{self.digits(3)}-{self.digits(4)}",
            ]
        )

    def date(self) -> str:
        day, month, year = (
            self.rng.randrange(1, 29),
            self.rng.randrange(1, 13),
            self.rng.randrange(1990, 2031),
        )
        hour, minute = self.rng.randrange(0, 24), self.rng.randrange(0, 60)
        return self.pick(
            [
                f"{year}-{month:02d}-{day:02d}",
                f"{day:02d}/{month:02d}/{year}",
                f"{month}/{day}/{year}",
                f"{day:02d}.{month:02d}.{year}",
                f"{year}-{month:02d}-{day:02d} {hour:02d}:{minute:02d}",
                f"{day:02d}/{month:02d}/{year} {hour}h{minute:02d}",
                f"{year}{month:02d}{day:02d}",
                f"{day}.{month}.{year % 100:02d}",
                f"{year}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:00Z",
            ]
        )

    def time_value(self) -> str:
        h, m, s = self.rng.randrange(24), self.rng.randrange(60), self.rng.randrange(60)
        return self.pick([f"{h:02d}:{m:02d}", f"{h:02d}:{m:02d}:{s:02d}", f"{h}h{m:02d}"])

    def version(self) -> str:
        a, b, c = self.rng.randrange(0, 20), self.rng.randrange(0, 40), self.rng.randrange(0, 300)
        return self.pick(
            [
                f"v{a}.{b}.{c}",
                f"{a}.{b}.{c}",
                f"{a}.{b}",
                f"{a}.{b}.{c}-rc.{self.rng.randrange(1, 5)}",
                f"{a}.{b}.{c}.{self.rng.randrange(256, 9999)}",
                f"build {self.rng.randrange(1000, 99999)}",
                f"{self.rng.randrange(2019, 2026)}.{self.rng.randrange(1, 13)}."
                f"{self.rng.randrange(0, 9)}",
            ]
        )

    def price(self) -> str:
        amount = self.rng.randrange(1, 2_000_000)
        cents = self.rng.randrange(100)
        return self.pick(
            [
                f"${amount:,}.{cents:02d}",
                f"€{amount:,}".replace(",", "."),
                f"{amount:,} €".replace(",", " "),
                f"£{amount:,}",
                f"{amount:,},{cents:02d} EUR".replace(",", ".", amount >= 1000),
                f"USD {amount}",
                f"{amount / 100:.2f}€",
            ]
        )

    def tracking(self) -> str:
        return self.pick(
            [
                f"1Z{self.digits(3)}{self.pick(['AA', 'X4', 'E1'])}{self.digits(10)}",
                " ".join(self.digits(4, "9") if i == 0 else self.digits(4) for i in range(5))
                + " "
                + self.digits(2),
                f"9400{self.digits(18)}",
                f"{self.pick(['RR', 'LX', 'CP'])}{self.digits(9)}{self.pick(['GB', 'DE', 'FR'])}",
                f"JJD{self.digits(18)}",
                self.digits(12, "7"),
            ]
        )

    def bad_card(self) -> str:
        digits = self.fakers["en_US"].credit_card_number(
            card_type=self.pick(("visa16", "mastercard", "amex", "discover"))
        )
        last = str((int(digits[-1]) + self.rng.randrange(1, 10)) % 10)
        broken = digits[:-1] + last
        assert not luhn_ok(broken)
        return self._group_card(broken)

    def bad_iban(self, locale: str) -> str:
        value = self.fakers[self.pick((locale, "de_DE", "es_ES", "fr_FR"))].iban()
        while True:
            pos = self.rng.randrange(4, len(value))
            if value[pos].isdigit():
                new = str((int(value[pos]) + self.rng.randrange(1, 10)) % 10)
                broken = value[:pos] + new + value[pos + 1 :]
                if not iban_ok(broken):
                    return self._group_iban(broken)

    def bad_phone(self, locale: str) -> str:
        while True:
            good = self.phone(locale)
            positions = [i for i, c in enumerate(good) if c.isdigit()]
            pos = self.pick([str(p) for p in positions[2:]])
            index = int(pos)
            edit = self.rng.randrange(3)
            if edit == 0:
                candidate = good[:index] + good[index + 1 :]
            elif edit == 1:
                candidate = good[:index] + self.pick(string.digits) + good[index:]
            else:
                candidate = good[:index] + self.pick(string.digits) + good[index + 1 :]
            if not phone_valid_somewhere(candidate):
                return candidate

    def bad_ssn(self) -> str:
        area, group, serial = self.digits(3), self.digits(2), self.digits(4)
        broken = self.rng.randrange(5)
        if broken == 0:
            area = "000"
        elif broken == 1:
            area = "666"
        elif broken == 2:
            area = "9" + self.digits(2)
        elif broken == 3:
            group = "00"
        else:
            serial = "0000"
        return f"{area}-{group}-{serial}"

    def bad_nif(self) -> str:
        number = self.rng.randrange(10_000_000, 100_000_000)
        wrong = self.pick([c for c in "TRWAGMYFPDXBNJZSQVHLCKE" if c != nif_letter(number)])
        if self.rng.random() < 0.3:
            body = self.digits(7)
            prefix = self.pick("XYZ")
            good = nif_letter(int(str("XYZ".index(prefix)) + body))
            wrong = self.pick([c for c in "TRWAGMYFPDXBNJZSQVHLCKE" if c != good])
            return f"{prefix}{body}{wrong}"
        return f"{number}{wrong}"

    def bad_nino(self) -> str:
        digits = self.digits(6)
        style = self.rng.randrange(4)
        if style == 0:
            prefix = self.pick(("QQ", "BG", "GB", "NK", "TN", "ZZ", "KN"))
        elif style == 1:
            prefix = self.pick("DFIQUV") + self.pick("ABCEGH")
        elif style == 2:
            prefix = self.pick("ABCEGH") + self.pick("DFIOQUV")
        else:
            prefix = self.pick(("AB", "CE", "JK", "PR"))
            return f"{prefix} {digits[:2]} {digits[2:4]} {digits[4:]} {self.pick('EFGXYZ')}"
        return f"{prefix} {digits[:2]} {digits[2:4]} {digits[4:]} {self.pick('ABCD')}"

    def bad_ip(self) -> str:
        a, b, c = (self.rng.randrange(1, 255) for _ in range(3))
        return self.pick(
            [
                f"{self.rng.randrange(256, 999)}.{a}.{b}.{c}",
                f"{a}.{b}.{c}",
                f"{a}.{b}.{c}.{self.rng.randrange(256, 999)}",
                f"{a}.{b}.{c}.{a}.{b}",
                f"{a:02d}:{b % 60:02d}:{c % 60:02d}",
                f"2001:db8::{a:x}::{b:x}",
            ]
        )

    def plain_url(self, locale: str) -> str:
        f = self.fakers[locale]
        return self.pick(
            [
                f.url(),
                f"https://{f.domain_name()}/{f.uri_path()}?id={self.digits(6)}",
                f"ssh://git@github.com/{_ascii(f.user_name())}/repo.git",
                f"http://{f.domain_word()}.local:8080/status",
                f"https://{_ascii(f.user_name())}@{f.domain_name()}/login",
                f"ftp://{f.domain_name()}:21/pub",
            ]
        )

    def email_like(self, locale: str) -> str:
        f = self.fakers[locale]
        user = _ascii(f.user_name()) or "someone"
        return self.pick(
            [
                f"@{user}",
                f"{user}@localhost",
                f"{user} at {f.domain_name().replace('.', ' dot ')}",
                f"{user}@{self.rng.randrange(1, 9)}.{self.rng.randrange(0, 20)}."
                f"{self.rng.randrange(0, 9)}",
                f"{user}@",
                f"@{f.domain_name()}",
                f"{user}@@{f.domain_name()}",
            ]
        )


def _ascii(text: str) -> str:
    table = str.maketrans(
        "áàâäãåéèêëíìîïóòôöõúùûüñçßÁÀÂÄÉÈÊÍÓÔÖÚÜÑÇ", "aaaaaaeeeeiiiiooooouuuuncsAAAAEEEIOOOUUNC"
    )
    return "".join(c for c in text.translate(table) if c.isascii())


# --------------------------------------------------------------------------- templates

_T = dict[str, dict[str, list[str]]]
TEMPLATES: _T = {
    "en": {
        "EMAIL": [
            "You can reach me at {} any time.",
            "My email is {}",
            "please cc {} on the thread",
            "Send the invoice to {}, thanks!",
            "({}) is my work address",
        ],
        "PHONE": [
            "Call me on {} after 6pm.",
            "my number is {}",
            "Phone: {}",
            "text me at {} if you're late",
            "Mobile {} (whatsapp ok)",
            "The office line is {}.",
        ],
        "CREDIT_CARD": [
            "Charge it to my card {} please.",
            "card number: {}",
            "I paid with {} exp 09/27",
            "Use the Visa ending... actually full number is {}",
        ],
        "IBAN": ["Please wire it to {}.", "IBAN: {}", "my account is {} (same as last time)"],
        "IP_ADDRESS": [
            "The server at {} keeps timing out.",
            "login attempts from {}",
            "ping {} and tell me",
            "open http://{}:8080/status",
            "blocked {}.",
        ],
        "URL_CREDENTIALS": [
            "The connection string is {}",
            "try {} and see if it connects",
            "DATABASE_URL={}",
        ],
        "US_SSN": ["My SSN is {}.", "social security number {} for the form", "SSN: {}"],
        "US_SSN_COMPACT": ["My SSN is {}.", "SSN: {}", "social security number: {}"],
        "UK_NINO": ["My National Insurance number is {}.", "NI no. {}", "NINO {} for payroll"],
        "ES_NIF": ["My DNI is {}.", "NIE: {}"],
        "order": [
            "Where is order {}?",
            "Re: invoice {}",
            "ticket {} is still open",
            "ref {} please",
            "Order number {} hasn't arrived",
            "I was charged twice for {}",
        ],
        "date": ["Delivery was scheduled for {}.", "since {} nothing works", "meeting on {}"],
        "time": ["see you at {}", "the job ran at {}"],
        "version": ["after upgrading to {} it broke", "running {} on prod", "release {} notes"],
        "price": ["it cost {} in total", "refund of {} pending", "budget is {}"],
        "tracking": ["tracking number {}", "the parcel {} is stuck", "shipment {}"],
        "bad_card": ["is {} a valid card? the form rejects it", "card {} was declined"],
        "bad_iban": ["the bank says {} is wrong", "IBAN {} bounced"],
        "bad_phone": ["the number {} doesn't work", "I dialled {} but nothing", "fax {}"],
        "bad_ssn": ["the form example shows {}", "placeholder SSN {}"],
        "bad_nif": ["código {} rejected", "ID {} from the old form"],
        "bad_nino": ["the letter shows {}", "example NI number {}"],
        "bad_ip": ["the value {} looks odd", "log line: {}"],
        "plain_url": ["see {}", "docs at {}", "clone {}"],
        "email_like": ["ping {} on Slack", "who is {}?", "reply to {}"],
    },
    "es": {
        "EMAIL": ["Mi correo es {}", "Escríbeme a {} cuando puedas.", "copia a {} por favor"],
        "PHONE": [
            "Llámame al {} por la tarde.",
            "mi móvil es {}",
            "Tel. {}",
            "el fijo de la oficina: {}",
        ],
        "IBAN": ["Hazme la transferencia a {}.", "Mi cuenta: {}"],
        "ES_NIF": [
            "Mi DNI es {}.",
            "NIE {} para el contrato",
            "DNI/NIE: {}",
            "con NIF {} a nombre de la empresa",
        ],
        "CREDIT_CARD": ["Cárgalo a la tarjeta {}"],
        "order": ["¿Dónde está el pedido {}?", "factura {} pendiente", "referencia {}"],
        "date": ["La entrega era el {}.", "desde el {} no funciona"],
        "price": ["me costó {}", "el total es {}"],
        "version": ["con la versión {} falla"],
    },
    "de": {
        "EMAIL": ["Meine E-Mail ist {}", "Schreiben Sie an {}.", "bitte {} in CC setzen"],
        "PHONE": ["Rufen Sie mich unter {} an.", "Tel.: {}", "Handy {}", "Festnetz: {}, ab 9 Uhr"],
        "IBAN": ["Bitte überweisen Sie an {}.", "IBAN: {}", "mein Konto: {}"],
        "CREDIT_CARD": ["Kreditkarte {} bitte belasten"],
        "order": ["Wo ist meine Bestellung {}?", "Rechnung {} ist offen", "Vorgang {}"],
        "date": ["Lieferung am {}", "seit {} geht nichts"],
        "price": ["es kostet {}", "Rückerstattung von {}"],
        "version": ["nach dem Update auf {}"],
    },
    "fr": {
        "EMAIL": ["Mon adresse est {}", "Écrivez-moi à {}.", "mettez {} en copie"],
        "PHONE": ["Appelez-moi au {}.", "mon portable : {}", "Tél. {}", "le standard est au {}"],
        "IBAN": ["Merci de virer sur {}.", "IBAN : {}", "mon RIB : {}"],
        "CREDIT_CARD": ["Débitez la carte {}"],
        "order": ["Où est ma commande {} ?", "facture {} impayée", "dossier {}"],
        "date": ["Livraison prévue le {}", "depuis le {} rien ne marche"],
        "price": ["ça coûte {}", "remboursement de {}"],
        "version": ["depuis la version {}"],
    },
}
FILLERS = {
    "en": [
        "Hi there,",
        "Thanks in advance.",
        "Let me know if you need anything else.",
        "Quick question:",
        "Sorry for the delay.",
        "Best, and have a nice weekend.",
        "This is urgent.",
    ],
    "es": ["Hola,", "Gracias de antemano.", "Un saludo.", "Es urgente.", "Perdona el retraso."],
    "de": ["Hallo,", "Vielen Dank im Voraus.", "Mit freundlichen Grüßen.", "Es ist dringend."],
    "fr": ["Bonjour,", "Merci d'avance.", "Cordialement.", "C'est urgent."],
}
PII_TYPES = [
    "EMAIL",
    "PHONE",
    "CREDIT_CARD",
    "IBAN",
    "IP_ADDRESS",
    "URL_CREDENTIALS",
    "US_SSN",
    "ES_NIF",
    "UK_NINO",
]
NEAR_MISSES = [
    "order",
    "date",
    "time",
    "version",
    "price",
    "tracking",
    "bad_card",
    "bad_iban",
    "bad_phone",
    "bad_ssn",
    "bad_nif",
    "bad_nino",
    "bad_ip",
    "plain_url",
    "email_like",
]
# Identity documents appear mostly in their own country's messages.
LOCAL_TYPES = {"US_SSN": "en_US", "UK_NINO": "en_GB", "ES_NIF": "es_ES"}


def build(gen: Gen, index: int) -> dict[str, object]:
    rng = gen.rng
    locale = LOCALES[index % len(LOCALES)]
    lang = locale[:2]
    message = Message(locale)
    roll = rng.random()
    kind = "near_miss" if roll < 0.3 else ("pii" if roll < 0.5 else "mixed")
    items: list[str] = []
    if kind != "near_miss":
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
            entity_type = rng.choice(PII_TYPES)
            home = LOCAL_TYPES.get(entity_type)
            if home and home != locale and rng.random() < 0.8:
                entity_type = rng.choice(["EMAIL", "PHONE", "IBAN", "CREDIT_CARD"])
            items.append(entity_type)
    if kind != "pii":
        items += [rng.choice(NEAR_MISSES) for _ in range(rng.choice((1, 1, 2, 3)))]
    rng.shuffle(items)
    if rng.random() < 0.5:
        message.add(rng.choice(FILLERS[lang]) + " ")
    for position, item in enumerate(items):
        if position:
            message.add(rng.choice((" ", " ", "\n", " Also, ", ". ")))
        _add_item(gen, message, item, lang)
    if rng.random() < 0.4:
        message.add(" " + rng.choice(FILLERS[lang]))
    return {
        "id": f"m{index + 1:04d}",
        "locale": locale,
        "kind": kind,
        "text": message.text,
        "entities": message.entities,
    }


def _add_item(gen: Gen, message: Message, item: str, lang: str) -> None:
    locale = message.locale
    entity_type: str | None = item if item in PII_TYPES else None
    template_key = item
    producers: dict[str, Callable[[], str]] = {
        "EMAIL": lambda: gen.email(locale),
        "PHONE": lambda: gen.phone(locale),
        "CREDIT_CARD": gen.card,
        "IBAN": lambda: gen.iban(locale),
        "IP_ADDRESS": gen.ip,
        "URL_CREDENTIALS": lambda: gen.url_credentials(locale),
        "ES_NIF": gen.nif,
        "UK_NINO": gen.nino,
        "order": gen.order_number,
        "date": gen.date,
        "time": gen.time_value,
        "version": gen.version,
        "price": gen.price,
        "tracking": gen.tracking,
        "bad_card": gen.bad_card,
        "bad_iban": lambda: gen.bad_iban(locale),
        "bad_phone": lambda: gen.bad_phone(locale),
        "bad_ssn": gen.bad_ssn,
        "bad_nif": gen.bad_nif,
        "bad_nino": gen.bad_nino,
        "bad_ip": gen.bad_ip,
        "plain_url": lambda: gen.plain_url(locale),
        "email_like": lambda: gen.email_like(locale),
    }
    if item == "US_SSN":
        value, compact = gen.ssn()
        template_key = "US_SSN_COMPACT" if compact else "US_SSN"
    else:
        value = producers[item]()
    templates = TEMPLATES[lang].get(template_key) or TEMPLATES["en"][template_key]
    if item == "IP_ADDRESS" and ":" in value:  # an IPv6 in a URL needs [brackets]
        templates = [t for t in templates if "://" not in t]
    message.add_template(gen.pick(templates), value, entity_type)


# Hand-written hard cases; [[TYPE|value]] marks a label. Written before measuring them.
HANDWRITTEN = [
    ("en_US", "Call [[PHONE|+1 (415) 555-2671 ext. 12]] or my cell [[PHONE|(650) 253-0000]]."),
    ("en_US", "From: Ana <[[EMAIL|ana.lopez+billing@eu.mail.example.com]]>\nSubject: refund"),
    ("en_US", "mailto:[[EMAIL|SUPPORT@Example.ORG]] (caps on purpose)"),
    ("en_US", "- ssn: [[US_SSN|536-22-1094]]\n- dob: 1984-07-12\n- zip: 94110-1234"),
    ("en_US", "Order #4155552671 shipped; questions? [[PHONE|415-555-2671]]"),
    ("en_US", "My card is [[CREDIT_CARD|4242 4242 4242 4242]] and the CVV is 123, exp 04/29."),
    ("en_US", "Amex: [[CREDIT_CARD|3782 822463 10005]]; old Visa 4242 4242 4242 4241 is closed"),
    ("en_US", "The build 1.22.4.1023 broke on 10.0.0.256 but [[IP_ADDRESS|10.0.0.25]] is fine"),
    ("en_US", "ssh into [[IP_ADDRESS|2001:db8:85a3::8a2e:370:7334]] then run `ls -la` at 10:45:12"),
    (
        "en_US",
        "export DB=[[URL_CREDENTIALS|postgresql://svc_app:Xk9%23pQ2v@10.2.0.14:5432/orders]]",
    ),
    ("en_US", "git remote: https://github.com/acme/api.git and ssh://git@github.com/acme/api.git"),
    ("en_US", "Invoice total $12,499.00 (ref 2024-000871), paid 03/04/2024 at 14:05"),
    ("en_US", "UPS 1Z999AA10123456784 and USPS 9400 1000 0000 0000 0000 00 both late"),
    (
        "en_US",
        "Text me at [[PHONE|+1-202-555-0143]]... scratch that, email [[EMAIL|j.doe@corp.co]]",
    ),
    ("en_US", "@jdoe said the npm package left-pad@1.3.0 is fine; see user@localhost logs"),
    ("en_GB", "Ring me on [[PHONE|07700 900 123]] or the office [[PHONE|+44 (0)20 7946 0018]]"),
    ("en_GB", "NI number QQ 12 34 56 C is the HMRC example; mine is [[UK_NINO|JG103759A]]"),
    ("en_GB", "Sort code 20-00-00, account 55779911, IBAN [[IBAN|GB33BUKB20201555555555]]"),
    ("en_GB", "Reference GB33 BUKB 2020 1555 5555 56 was rejected by the bank"),
    ("en_GB", "Version 3.11.7, released 02.10.2023; price £1,299.99 inc. VAT"),
    ("es_ES", "Mi DNI es [[ES_NIF|12345678Z]] y el de mi mujer [[ES_NIF|X-1234567-L]]."),
    ("es_ES", "Llámame al [[PHONE|612 34 56 78]] o al fijo [[PHONE|91 123 45 67]], gracias"),
    ("es_ES", "El DNI 12345678A no es válido (la letra no cuadra)"),
    ("es_ES", "IBAN [[IBAN|ES91 2100 0418 4502 0005 1332]] a nombre de Ana"),
    ("es_ES", "pedido nº 612345678, entrega 15/03/2024, importe 1.299,00 €"),
    (
        "de_DE",
        "Tel. [[PHONE|030/12345678]], Fax [[PHONE|+49 (0)30 1234 5679]], "
        "Mobil [[PHONE|0151 23456789]]",
    ),
    ("de_DE", "Bitte an [[IBAN|DE89 3704 0044 0532 0130 00]] überweisen, Betrag 1.234,56 EUR"),
    ("de_DE", "Rechnungsnummer 2024-118734 vom 15.03.2024, Kundennummer 0301234567"),
    ("de_DE", "Meine Mail: [[EMAIL|max.mustermann@t-online.de]], Tel [[PHONE|+49 89 1234567]]"),
    ("fr_FR", "Appelez le [[PHONE|06 12 34 56 78]] ou le [[PHONE|01.42.68.53.00]]"),
    ("fr_FR", "IBAN : [[IBAN|FR14 2004 1010 0505 0001 3M02 606]]"),
    ("fr_FR", "commande n° 0612345678 livrée le 12/05/2024 à 14h30, total 89,90 €"),
    (
        "fr_FR",
        "Mon adresse : [[EMAIL|claire.dupont@orange.fr]] ; portable [[PHONE|+33 6 12 34 56 78]]",
    ),
    ("en_US", "<EMAIL_1> is a placeholder I typed myself, not an address"),
    ("en_US", "Two cards: [[CREDIT_CARD|5555555555554444]],[[CREDIT_CARD|4000056655665556]]"),
    ("en_US", "Tracking 7946 1234 5678 and PO 4500012345 and SKU 00012345678905"),
    ("en_US", "IPv6 loopback [[IP_ADDRESS|::1]] vs. C++ std::vector and a MAC 00:1A:2B:3C:4D:5E"),
    (
        "en_US",
        "redis url [[URL_CREDENTIALS|redis://:s3cr3tpass@cache.internal:6379/0]] and https://example.com:443/",
    ),
    ("en_GB", "Call 999 in an emergency or 111 for advice; my number is [[PHONE|+447911123456]]"),
    ("en_US", "Sent from my iPhone\n\n> On 2024-02-11 09:15, [[EMAIL|bob@example.net]] wrote:"),
]
_MARK = re.compile(r"\[\[([A-Z_]+)\|(.+?)\]\]")


def handwritten(index: int, locale: str, marked: str) -> dict[str, object]:
    message = Message(locale)
    position = 0
    for match in _MARK.finditer(marked):
        message.add(marked[position : match.start()])
        message.add(match.group(2), match.group(1))
        position = match.end()
    message.add(marked[position:])
    return {
        "id": f"h{index + 1:03d}",
        "locale": locale,
        "kind": "handwritten",
        "text": message.text,
        "entities": message.entities,
    }


# --------------------------------------------------------------------------- marked files
# The realistic sets (tests/data/pii/realistic*.marked.txt) are written by hand in a
# marked-up form; this turns one into JSONL after checking every label independently.

# IBAN lengths (SWIFT registry) of the countries the marked files use.
IBAN_COUNTRY_LENGTHS = {
    "AT": 20, "BE": 16, "CH": 21, "DE": 22, "ES": 24, "FR": 27, "GB": 22, "IE": 22,
    "IT": 27, "NL": 18, "PL": 28, "PT": 25,
}  # fmt: skip
_MARKED_HEADER = re.compile(r"@@ (?P<locale>[a-z]{2}_[A-Z]{2}) (?P<source>[a-z]+)$")
_NINO_OK = re.compile(r"(?!BG|GB|KN|NK|NT|TN|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z]\d{6}[A-D]")


def read_marked(path: Path, prefix: str) -> list[dict[str, object]]:
    """Parse a marked file (format in its header comment) into labelled records."""
    blocks: list[tuple[str, str, str, list[str]]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.startswith("@@"):
            header = _MARKED_HEADER.match(line)
            if header is None:
                raise SystemExit(f"{path}:{number}: bad header {line!r}")
            blocks.append((header["locale"], header["source"], "", []))
        elif not blocks:
            if line.strip() and not line.startswith("#"):
                raise SystemExit(f"{path}:{number}: text before the first message")
        elif line.startswith(">> ") and not blocks[-1][3]:
            locale, source, _, lines = blocks[-1]
            blocks[-1] = (locale, source, line[3:], lines)
        else:
            blocks[-1][3].append(line)
    records = []
    for index, (locale, source, context, lines) in enumerate(blocks, start=1):
        marked = "\n".join(lines).rstrip("\n").replace("{nbsp}", "\u00a0")
        record = handwritten(index - 1, locale, marked)
        entities = record["entities"]
        assert isinstance(entities, list)
        for entity in entities:
            problem = label_problem(str(entity["type"]), str(entity["value"]))
            if problem:
                raise SystemExit(f"{path}: message {index}: {entity['value']!r}: {problem}")
        record["id"] = f"{prefix}{index:03d}"
        record["kind"] = "pii" if entities else "near_miss"
        record["source"] = source
        if context:
            record["context"] = context.replace("{nbsp}", "\u00a0")
        records.append(record)
    return records


def label_problem(entity_type: str, value: str) -> str | None:
    """Why ``value`` is not a valid ``entity_type`` (checked without chatkeep), or None."""
    compact = re.sub(r"[\s\-.\u00a0]", "", value).upper()
    if value != value.strip() or not value:
        return "surrounding whitespace"
    if entity_type == "PHONE":
        return None if phone_valid_in_any_region(value) else "no region accepts it"
    if entity_type == "CREDIT_CARD":
        return None if 13 <= len(compact) <= 19 and luhn_ok(compact) else "fails Luhn"
    if entity_type == "IBAN":
        if IBAN_COUNTRY_LENGTHS.get(compact[:2]) != len(compact):
            return "wrong length for its country"
        return None if compact.isalnum() and iban_ok(compact) else "fails mod-97"
    if entity_type == "ES_NIF":
        body = compact[:-1].replace("X", "0").replace("Y", "1").replace("Z", "2")
        ok = len(compact) == 9 and body.isdigit() and nif_letter(int(body)) == compact[-1]
        return None if ok else "wrong control letter"
    if entity_type == "US_SSN":
        digits = compact
        ok = (
            len(digits) == 9
            and digits.isdigit()
            and digits[:3] not in ("000", "666")
            and digits[0] != "9"
            and digits[3:5] != "00"
            and digits[5:] != "0000"
        )
        return None if ok else "never issued"
    if entity_type == "UK_NINO":
        return None if _NINO_OK.fullmatch(compact) else "not an allocatable NINO"
    if entity_type == "IP_ADDRESS":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return "not an IP address"
        return None
    if entity_type == "EMAIL":
        local, _, domain = value.rpartition("@")
        return None if local and "." in domain and " " not in value else "not an address"
    if entity_type == "URL_CREDENTIALS":
        authority = value.partition("://")[2]
        return None if ":" in authority.rpartition("@")[0] else "no user:password@"
    if entity_type == "PERSON":
        return None if value[0].isupper() else "a name starts with a capital"
    return f"unknown type {entity_type}"


def phone_valid_in_any_region(text: str) -> bool:
    """True if libphonenumber accepts ``text`` as international or national in some region."""
    for region in (None, *sorted(phonenumbers.SUPPORTED_REGIONS)):
        try:
            number = phonenumbers.parse(text, region)
        except phonenumbers.NumberParseException:
            continue
        if phonenumbers.is_valid_number(number):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument(
        "--no-handwritten", dest="handwritten", action="store_false", help="generated only"
    )
    parser.add_argument(
        "--from-marked",
        type=Path,
        help="convert a hand-written marked file (tests/data/pii/*.marked.txt) instead",
    )
    parser.add_argument("--id-prefix", default="r", help="id prefix with --from-marked")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.from_marked is not None:
        records = read_marked(args.from_marked, args.id_prefix)
        with args.out.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        print(f"wrote {len(records)} messages to {args.out}")
        return
    gen = Gen(args.seed)
    with args.out.open("w", encoding="utf-8") as handle:
        records = [build(gen, index) for index in range(args.count)]
        if args.handwritten:
            records += [handwritten(i, loc, text) for i, (loc, text) in enumerate(HANDWRITTEN)]
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} messages to {args.out}")


if __name__ == "__main__":
    main()
