"""PlaceholderVault stability and normalisation; seal/unseal with and without a key."""

from __future__ import annotations

import sys

import pytest

from chatkeep.errors import PrivacyError
from chatkeep.privacy.vault import PlaceholderVault, is_sealed, new_key, reseal, seal, unseal


def test_same_value_same_placeholder_different_values_count_up() -> None:
    vault = PlaceholderVault()
    assert vault.placeholder_for("EMAIL", "ana@x.com") == "<EMAIL_1>"
    assert vault.placeholder_for("EMAIL", "bob@x.com") == "<EMAIL_2>"
    assert vault.placeholder_for("EMAIL", "ana@x.com") == "<EMAIL_1>"
    assert vault.placeholder_for("PERSON", "Ana") == "<PERSON_1>"
    assert vault.placeholder_for("PERSON", "Bob") == "<PERSON_2>"
    assert len(vault) == 4


def test_normalisation_merges_equal_values_and_keeps_first_form() -> None:
    vault = PlaceholderVault()
    assert vault.placeholder_for("EMAIL", "Ana@X.com") == vault.placeholder_for(
        "EMAIL", "ana@x.COM"
    )
    assert vault.placeholder_for("CREDIT_CARD", "4111 1111 1111 1111") == vault.placeholder_for(
        "CREDIT_CARD", "4111-1111-1111-1111"
    )
    assert vault.placeholder_for("IBAN", "de89 3704 0044 0532 0130 00") == vault.placeholder_for(
        "IBAN", "DE89370400440532013000"
    )
    assert vault.placeholder_for("PHONE", "+34 612 345 678") == vault.placeholder_for(
        "PHONE", "612345678", "+34612345678"
    )
    assert vault.placeholder_for("IP_ADDRESS", "2001:0db8::0001") == vault.placeholder_for(
        "IP_ADDRESS", "2001:db8::1"
    )
    assert vault.value_for("<EMAIL_1>") == "Ana@X.com"


def test_same_value_different_types_are_different_entries() -> None:
    vault = PlaceholderVault()
    assert vault.placeholder_for("PERSON", "Paris") != vault.placeholder_for("LOCATION", "Paris")


def test_value_for_unknown_or_mangled_placeholder_is_none() -> None:
    vault = PlaceholderVault()
    vault.placeholder_for("EMAIL", "ana@x.com")
    for token in ("<EMAIL_2>", "<EMAIL 1>", "EMAIL_1", "<email_1>"):
        assert vault.value_for(token) is None


def test_invalid_entity_type_is_refused() -> None:
    with pytest.raises(PrivacyError):
        PlaceholderVault().placeholder_for("e-mail", "x")


def test_json_round_trip_keeps_numbering_going() -> None:
    vault = PlaceholderVault()
    vault.placeholder_for("EMAIL", "ana@x.com")
    vault.placeholder_for("PHONE", "+34 612 345 678", "+34612345678")
    again = PlaceholderVault.from_json(vault.to_json())
    assert again.items() == vault.items()
    assert again.placeholder_for("PHONE", "612345678", "+34612345678") == "<PHONE_1>"
    assert again.placeholder_for("EMAIL", "new@x.com") == "<EMAIL_2>"


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"format": "other", "version": 1, "entries": []}',
        '{"format": "chatkeep.pii-vault", "version": 1, "entries": '
        '[["<EMAIL_1>", "PHONE", "a", "a"]]}',
        '{"format": "chatkeep.pii-vault", "version": 1, "entries": [["<EMAIL_1>", "EMAIL", "a"]]}',
        '{"format": "chatkeep.pii-vault", "version": 1, "entries": '
        '[["<EMAIL_1>", "EMAIL", "a", "a"], ["<EMAIL_1>", "EMAIL", "b", "b"]]}',
    ],
)
def test_corrupt_json_is_a_privacy_error(text: str) -> None:
    with pytest.raises(PrivacyError):
        PlaceholderVault.from_json(text)


def _vault() -> PlaceholderVault:
    vault = PlaceholderVault()
    vault.placeholder_for("EMAIL", "ana@x.com")
    vault.placeholder_for("PERSON", "José Ñúñez")
    return vault


def test_seal_without_key_is_plain_json() -> None:
    blob = seal(_vault(), None)
    assert "ana@x.com" in blob
    assert unseal(blob, None).items() == _vault().items()


def test_seal_with_key_encrypts_and_round_trips() -> None:
    key = new_key()
    blob = seal(_vault(), key)
    assert "ana@x.com" not in blob and "EMAIL" not in blob
    assert unseal(blob, key).items() == _vault().items()


def test_wrong_key_is_a_privacy_error() -> None:
    blob = seal(_vault(), new_key())
    with pytest.raises(PrivacyError, match="cannot decrypt"):
        unseal(blob, new_key())


def test_tampered_blob_is_a_privacy_error() -> None:
    key = new_key()
    blob = seal(_vault(), key)
    with pytest.raises(PrivacyError):
        unseal(blob[:-4] + ("AAAA" if not blob.endswith("AAAA") else "BBBB"), key)


def test_malformed_key_is_a_privacy_error() -> None:
    with pytest.raises(PrivacyError, match="invalid vault encryption key"):
        seal(_vault(), "not-a-fernet-key")


def test_encrypted_blob_without_key_is_a_privacy_error() -> None:
    with pytest.raises(PrivacyError, match="encrypted"):
        unseal(seal(_vault(), new_key()), None)


def test_a_plain_vault_is_refused_once_a_key_is_configured() -> None:
    """A plain vault skips Fernet's integrity check: with a key set, one planted in the
    database must not be read (it could map a placeholder to the planter's value)."""
    key = new_key()
    planted = (' {"format":"chatkeep.pii-vault","version":1,"entries":'
               '[["<EMAIL_1>","EMAIL","evil@x.com","evil@x.com"]]}')
    for plain in (seal(_vault(), None), planted):
        with pytest.raises(PrivacyError, match="chatkeep privacy rekey"):
            unseal(plain, key)
    assert unseal(seal(_vault(), None), None).items() == _vault().items()  # no key: plain


def test_rekey_reads_a_plain_vault_and_seals_it() -> None:
    """Turning encryption on: the explicit migration (``reseal``) still reads plain vaults."""
    plain = seal(_vault(), None)
    key = new_key()
    assert unseal(plain, key, allow_plain=True).items() == _vault().items()
    sealed = reseal(plain, key)
    assert sealed is not None and is_sealed(sealed)
    assert unseal(sealed, key).items() == _vault().items()
    assert reseal(sealed, key) is None  # already sealed with the newest key


def test_key_rotation_reads_old_tokens_and_reseals_with_the_newest() -> None:
    old, new = new_key(), new_key()
    token = seal(_vault(), old)
    rotated = f"{new},{old}"
    assert unseal(token, rotated).items() == _vault().items()
    fresh = reseal(token, rotated)
    assert fresh is not None
    assert unseal(fresh, new).items() == _vault().items()  # the newest key alone opens it
    with pytest.raises(PrivacyError, match="none of the configured keys"):
        unseal(fresh, old)
    with pytest.raises(PrivacyError, match="none of the configured keys"):
        unseal(token, new_key())


def test_missing_cryptography_is_a_clear_privacy_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.fernet", None)
    with pytest.raises(PrivacyError, match=r"chatkeep\[encryption\]"):
        seal(_vault(), "x" * 44)
    with pytest.raises(PrivacyError, match=r"chatkeep\[encryption\]"):
        unseal("gAAAA", "x" * 44)
    assert unseal(seal(_vault(), None), None).items() == _vault().items()
