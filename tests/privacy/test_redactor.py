"""Redact/restore: stable placeholders across turns, exact restore, and the escaping scheme."""

from __future__ import annotations

import random

import pytest

from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault, seal, unseal

REDACTOR = Redactor(PiiDetector())


def test_redact_replaces_values_with_stable_placeholders_across_turns() -> None:
    vault = PlaceholderVault()
    first = REDACTOR.redact("I'm ana@x.com, call +34 612 345 678.", vault)
    assert first == "I'm <EMAIL_1>, call <PHONE_1>."
    second = REDACTOR.redact("Again: ANA@x.com / 612345678; boss is bob@x.com", vault)
    assert second == "Again: <EMAIL_1> / <PHONE_1>; boss is <EMAIL_2>"


def test_vault_survives_sealing_between_turns() -> None:
    vault = PlaceholderVault()
    REDACTOR.redact("ana@x.com", vault)
    vault = unseal(seal(vault, None), None)
    assert REDACTOR.redact("bob@x.com and ana@x.com", vault) == "<EMAIL_2> and <EMAIL_1>"


def test_restore_puts_values_back() -> None:
    vault = PlaceholderVault()
    REDACTOR.redact("card 4111 1111 1111 1111, mail ana@x.com", vault)
    answer = "I have charged <CREDIT_CARD_1> and emailed <EMAIL_1>."
    assert (
        REDACTOR.restore(answer, vault)
        == "I have charged 4111 1111 1111 1111 and emailed ana@x.com."
    )


@pytest.mark.parametrize(
    "mangled",
    [
        "<EMAIL 1>",
        "<EMAIL_9>",
        "<email_1>",
        "EMAIL_1",
        "<EMAIL_1",
        "< EMAIL_1>",
        "<EMAIL_01>",
        "<EMAIL-1>",
        "<EMAIL_1 >",
        "<EMAIL__1>",
        "[EMAIL_1]",
    ],
)
def test_mangled_or_unknown_placeholders_are_left_alone(mangled: str) -> None:
    vault = PlaceholderVault()
    REDACTOR.redact("ana@x.com", vault)
    assert REDACTOR.restore(f"see {mangled} now", vault) == f"see {mangled} now"


def test_user_typed_placeholder_is_escaped_and_never_restored_to_a_value() -> None:
    vault = PlaceholderVault()
    REDACTOR.redact("my mail is ana@x.com", vault)
    text = "What does <EMAIL_1> mean? And <\\EMAIL_1>?"
    redacted = REDACTOR.redact(text, vault)
    assert redacted == "What does <\\EMAIL_1> mean? And <\\\\EMAIL_1>?"
    assert REDACTOR.restore(redacted, vault) == text
    # The model echoing the escaped token gets the literal text back, not ana@x.com.
    assert REDACTOR.restore("You typed <\\EMAIL_1>.", vault) == "You typed <EMAIL_1>."


def test_placeholder_shaped_text_next_to_pii_round_trips() -> None:
    vault = PlaceholderVault()
    text = "<PHONE_4155552671> <\\a@b.co> <EMAIL_1>a@b.co"
    assert REDACTOR.restore(REDACTOR.redact(text, vault), vault) == text


def test_values_containing_placeholder_text_are_not_rescanned() -> None:
    vault = PlaceholderVault()
    vault.placeholder_for("SECRET", "<EMAIL_1>")
    vault.placeholder_for("EMAIL", "ana@x.com")
    assert REDACTOR.restore("<SECRET_1>", vault) == "<EMAIL_1>"


def test_restore_is_a_static_method() -> None:
    vault = PlaceholderVault()
    vault.placeholder_for("EMAIL", "a@b.co")
    assert Redactor.restore("<EMAIL_1>", vault) == "a@b.co"


def test_round_trip_on_random_text_with_placeholder_shapes() -> None:
    rng = random.Random(7)
    pieces = [
        "<",
        ">",
        "\\",
        "EMAIL_1",
        "PHONE_2",
        "_",
        "1",
        " ",
        "a@b.co",
        "x",
        "<EMAIL_1>",
        " +34 612 345 678 ",
        "<\\PHONE_1>",
        " DE89 3704 0044 0532 0130 00 ",
    ]
    for _ in range(400):
        vault = PlaceholderVault()
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 12)))
        redacted = REDACTOR.redact(text, vault)
        assert REDACTOR.restore(redacted, vault) == text, text


def test_restore_uses_the_first_form_seen_of_a_normalised_value() -> None:
    vault = PlaceholderVault()
    redacted = REDACTOR.redact("+34 612 345 678, later 612345678", vault)
    assert redacted == "<PHONE_1>, later <PHONE_1>"
    assert REDACTOR.restore(redacted, vault) == "+34 612 345 678, later +34 612 345 678"
