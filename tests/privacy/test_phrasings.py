"""Issue 8, section 2: the phrasings people really use, and the near misses they sit beside.

Each case goes through the whole default detector (all recognizers, overlap
rule), since that is what decides what reaches a model.
"""

from __future__ import annotations

import pytest

from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.recognizers.context import asked_for

DETECTOR = PiiDetector()

#: A national number valid in each default region, written as people there write it.
NATIONAL = {
    "US": "(206) 432-8871",
    "GB": "07722 345678",
    "ES": "611 22 33 44",
    "DE": "0171 4455667",
    "FR": "06 45 78 12 90",
}
#: The labels the issue lists, which used to read as "order number" labels.
PHONE_LABELS = [
    "phone number: ",
    "Phone No. ",
    "mobile no: ",
    "Contact number: ",
    "Tel. no. ",
    "cell #: ",
    "WhatsApp number ",
    "Teléfono nº ",
    "Tél. n° ",
    "Tel.-Nr.: ",
    "Handynummer ",
    "numéro de téléphone : ",
    "Número de teléfono: ",
    "my number: ",
]
OTHER_LABELS = [
    "order no. ",
    "Order number: ",
    "Invoice No. ",
    "invoice #",
    "Ticket #: ",
    "case number: ",
    "Case ref ",
    "Pedido nº ",
    "Factura n.º ",
    "Commande n° ",
    "Dossier n° ",
    "Rechnungsnr. ",
    "Bestellnummer: ",
    "Kundennummer ",
    "Booking ref ",
]


def found(text: str, context: str | None = None) -> list[tuple[str, str]]:
    return [(s.entity_type, s.text) for s in DETECTOR.detect(text, context=context)]


@pytest.mark.parametrize("region", list(NATIONAL))
@pytest.mark.parametrize("label", PHONE_LABELS)
def test_phone_after_a_phone_label_in_every_default_region(label: str, region: str) -> None:
    number = NATIONAL[region]
    assert found(f"{label}{number}") == [("PHONE", number)]


@pytest.mark.parametrize("region", list(NATIONAL))
@pytest.mark.parametrize("label", OTHER_LABELS)
def test_the_same_number_after_another_label_is_left_alone(label: str, region: str) -> None:
    assert found(f"{label}{NATIONAL[region]}") == []


@pytest.mark.parametrize(
    "text",
    [
        "Room 1204, invoice #07911123456 for £1,299.99",
        "upgraded to 10.0.19045.3803, version 3.2.1.4 and build 5.4.3.2",
        "on 2024-03-15 14:30, 15/03/2024, 15.03.2024; total 1.234,56 € or $4,155.55",
        "tracking 1Z999AA10123456784, PO 4500098812, SKU 00012345678905",
        "Account 000123456789 at routing 021000021",
        "https://example.com:8443/@jdoe and http://localhost:3000/users/@me",
        "user@localhost and left-pad@1.3.0",
    ],
)
def test_near_misses(text: str) -> None:
    assert found(text) == []


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("mobile no: 7911 123456", "7911 123456"),  # GB mobile without its trunk 0
        ("Mobile: 7700 900123", "7700 900123"),
        ("Phone number (Italy): 347 123 4567", "347 123 4567"),  # region not configured
        ("Mobile no: 06 87654321 (Netherlands)", "06 87654321"),
        ("Handy (Österreich): 0664 1234567", "0664 1234567"),
        ("Tél. n° (Belgique) 0470 12 34 56", "0470 12 34 56"),
        ("call our Lisbon office on +351 912 345 678", "+351 912 345 678"),
        ("Tel: 0043 664 1234567", "0043 664 1234567"),
    ],
)
def test_labelled_or_international_numbers_of_any_region(text: str, value: str) -> None:
    assert found(text) == [("PHONE", value)]


def test_an_unlabelled_foreign_national_number_is_not_guessed() -> None:
    # Almost any digit string is valid in one of 245 regions: only a label vouches for it.
    assert found("it was 347 123 4567 ok") == []
    assert found("Call me at 347 123 4567 ok") == [("PHONE", "347 123 4567")]


@pytest.mark.parametrize(
    "text",
    [
        "call me at 7911 123456",
        "ring me on 7911 123456",
        "llámame al 7911 123456",
        "appelez-moi au 7911 123456",
        "ruf mich unter 7911 123456 an",
        "Ich bin erreichbar unter 7911 123456",
    ],
)
def test_call_me_phrases_are_phone_labels(text: str) -> None:
    assert found(text) == [("PHONE", "7911 123456")]


@pytest.mark.parametrize(
    "address",
    ["josé@ejemplo.es", "josé.núñez@ejemplo.es", "info@müller-bau.de", "zoë@example.com"],
)
def test_unicode_e_mail_addresses(address: str) -> None:
    assert found(f"escríbeme a {address}, gracias") == [("EMAIL", address)]


def test_e_mail_in_cjk_text_does_not_swallow_the_words_before_it() -> None:
    assert found("请联系ana@example.com") == []  # glued to the text: never half an address
    assert found("请联系 ana@example.com") == [("EMAIL", "ana@example.com")]


@pytest.mark.parametrize(
    "iban",
    [
        "GB15  MIDL  4005  1512  3456  78",
        "DE89\u00a03704\u00a00044\u00a00532\u00a00130\u00a000",
        "FR14 2004 1010 0505 0001 3M02 606",
    ],
)
def test_iban_with_double_or_no_break_spaces(iban: str) -> None:
    assert found(f"IBAN: {iban} thanks") == [("IBAN", iban)]


@pytest.mark.parametrize(
    "card", ["4111.1111.1111.1111", "4111\u00a01111\u00a01111\u00a01111", "5555 5555 5555 4444"]
)
def test_cards_with_dots_or_no_break_spaces(card: str) -> None:
    assert found(f"card {card} exp 02/28") == [("CREDIT_CARD", card)]


def test_a_card_mixing_separators_is_not_a_card() -> None:
    assert found("ref 4111.1111 1111-1111") == []


@pytest.mark.parametrize(
    "text",
    ["my NI number is jg103759a", "NINO: AB 123456 C", "NI number: pr 48 19 27 c", "JG 1037 59A"],
)
def test_lower_case_and_spaced_ninos(text: str) -> None:
    assert [t for t, _ in found(text)] == ["UK_NINO"]


@pytest.mark.parametrize(
    "url",
    [
        "mongodb://app:Xy/9#kL2@mongo.internal:27017/prod",
        "postgres://app_user:Zq/8#x!@db.prod.internal:5432/main",
        "redis://:h4rd#pass@10.0.3.7:6379/0",
    ],
)
def test_url_credentials_whose_password_holds_slash_or_hash(url: str) -> None:
    assert found(f"try {url} please") == [("URL_CREDENTIALS", url)]


def test_ssn_given_as_its_own_reply() -> None:
    question = "Thanks. To verify your identity, what's your SSN?"
    assert found("536221234") == []
    assert found("536221234", context=question) == [("US_SSN", "536221234")]
    assert found("sure, it's 536221234", context=question) == [("US_SSN", "536221234")]
    # The context only speaks for a short reply, and only what it asks for.
    long_reply = "536221234 " + "and some more words " * 10
    assert found(long_reply, context=question) == []
    assert found("536221234", context="What's your date of birth?") == []


def test_the_question_decides_what_a_bare_number_is() -> None:
    assert found("612345678") == [("PHONE", "612345678")]
    assert found("612345678", context="Could you give me your order number?") == []
    assert found("7911 123456", context="What's the best number to reach you on?") == [
        ("PHONE", "7911 123456")
    ]
    assert found("07 52 33 14 68", context="Quel est votre numéro de téléphone ?") == [
        ("PHONE", "07 52 33 14 68")
    ]


@pytest.mark.parametrize(
    ("question", "topic"),
    [
        ("What's your SSN? Last four is fine.", "ssn"),
        ("Can you confirm your social security number for me?", "ssn"),
        ("¿Cuál es su número de teléfono?", "phone"),
        ("Unter welcher Nummer kann ich Sie erreichen?", "phone"),
        ("Can I take a contact number?", "phone"),
        ("What's your order number?", "other"),
        ("Nº de pedido, por favor", "other"),
        ("What's your date of birth?", None),
        ("", None),
    ],
)
def test_asked_for(question: str, topic: str | None) -> None:
    assert asked_for(question) == topic
