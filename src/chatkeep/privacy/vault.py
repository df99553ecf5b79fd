"""The per-session mapping between placeholders and real values, and how it is stored.

One vault per conversation: the same value always gets the same placeholder,
across turns, so the model can still tell who is who. The vault holds the real
values, so at rest it is sealed with Fernet (``chatkeep[encryption]``) when a
key is configured. Once one is, a plain vault is refused: plain JSON carries no
integrity check, so one planted in the database could map a placeholder to any value.
Only the explicit migration, ``chatkeep privacy rekey`` (:func:`reseal`), reads the
plain vaults stored before encryption was turned on, and seals them.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import ENTITY_TYPE_RE, Span
from chatkeep.privacy.escaping import format_placeholder
from chatkeep.privacy.known_values import KnownValue, find_known_values, known_value
from chatkeep.privacy.normalize import canonical_value

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

__all__ = ["PlaceholderVault", "is_sealed", "new_key", "reseal", "seal", "unseal"]

_FORMAT = "chatkeep.pii-vault"
_VERSION = 1
_INSTALL_HINT = "install the extra: pip install 'chatkeep[encryption]'"


class PlaceholderVault:
    """Maps ``(entity type, canonical value)`` to ``<TYPE_N>`` and back.

    Numbers count up per type from 1 in order of first appearance. ``value_for``
    returns the value as first written (``Ana@X.com`` if that came before
    ``ana@x.com``). Not thread-safe: use one vault per session at a time.
    """

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], str] = {}
        self._values: dict[str, str] = {}
        self._entries: list[tuple[str, str, str, str]] = []
        self._counts: dict[str, int] = {}
        self._patterns: list[tuple[int, KnownValue]] = []
        self._fingerprint: bytes | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def fingerprint(self) -> bytes:
        """A digest of every entry: two vaults with equal contents redact alike (what the
        redactor's cache keys on; 16 bytes, so cached keys never hold the values)."""
        if self._fingerprint is None:
            digest = hashlib.blake2b(digest_size=16)
            for entry in self._entries:
                digest.update("\x00".join(entry).encode("utf-8", "surrogatepass") + b"\x01")
            self._fingerprint = digest.digest()
        return self._fingerprint

    def placeholder_for(self, entity_type: str, value: str, canonical: str | None = None) -> str:
        """Return the placeholder of ``value``, allocating the next one if it is new.

        ``canonical`` is the normalised value that decides equality; by default
        :func:`~chatkeep.privacy.normalize.canonical_value` computes it.
        """
        # A type already counted was checked when its first value came in.
        if entity_type not in self._counts and not ENTITY_TYPE_RE.fullmatch(entity_type):
            raise PrivacyError(f"invalid entity type {entity_type!r}: use A-Z, 0-9 and _")
        key = (entity_type, canonical_value(entity_type, value) if canonical is None else canonical)
        placeholder = self._by_key.get(key)
        if placeholder is None:
            number = self._counts.get(entity_type, 0) + 1
            placeholder = format_placeholder(entity_type, number)
            self._add(placeholder, entity_type, key[1], value, number)
        return placeholder

    def find_known(self, text: str, since: int = 0) -> list[Span]:
        """Where values already in this vault reappear in ``text``, whatever surrounds them
        (matched literally, in their rewritten forms, and in other surface forms: escaped,
        percent-encoded, without accents, surname first...; see
        ``chatkeep.privacy.known_values``). Spans may overlap; the redactor resolves them
        with the detector's. ``since``: only the entries added after the first ``since``
        (text already redacted with those needs no second look for them)."""
        return find_known_values([k for n, k in self._patterns if n >= since], text)

    def entries(self) -> list[tuple[str, str, str]]:
        """``(entity type, canonical value, value)`` of every entry, in allocation order."""
        return [(entity_type, canonical, value)
                for _, entity_type, canonical, value in self._entries]

    def value_for(self, placeholder: str) -> str | None:
        """The real value behind an exact placeholder, or None when unknown."""
        return self._values.get(placeholder)

    def items(self) -> list[tuple[str, str]]:
        """``(placeholder, value)`` pairs in allocation order."""
        return [(placeholder, value) for placeholder, _, _, value in self._entries]

    def to_json(self) -> str:
        """Serialise to a JSON string (holds the real values: seal it before storing)."""
        document = {
            "format": _FORMAT,
            "version": _VERSION,
            "entries": [list(entry) for entry in self._entries],
        }
        return json.dumps(document, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> PlaceholderVault:
        """Rebuild a vault from :meth:`to_json` output; PrivacyError if it is not one."""
        try:
            document = json.loads(text)
        except (ValueError, TypeError) as exc:
            raise PrivacyError("the placeholder vault is not valid JSON") from exc
        vault = cls()
        for placeholder, entity_type, canonical, value in _entries(document):
            prefix, _, number = placeholder[1:-1].rpartition("_")
            if (
                prefix != entity_type
                or placeholder != format_placeholder(entity_type, _int(number))
                or not ENTITY_TYPE_RE.fullmatch(entity_type)
                or placeholder in vault._values
                or (entity_type, canonical) in vault._by_key
            ):
                raise PrivacyError(f"corrupt placeholder vault entry {placeholder!r}")
            vault._add(placeholder, entity_type, canonical, value, int(number))
        return vault

    def _add(self, placeholder: str, entity_type: str, canonical: str, value: str, n: int) -> None:
        self._by_key[(entity_type, canonical)] = placeholder
        self._values[placeholder] = value
        self._entries.append((placeholder, entity_type, canonical, value))
        self._fingerprint = None
        self._counts[entity_type] = max(self._counts.get(entity_type, 0), n)
        known = known_value(entity_type, canonical, value)
        if known is not None:
            self._patterns.append((len(self._entries) - 1, known))


def _entries(document: Any) -> list[tuple[str, str, str, str]]:
    """Validate the document envelope and return its entries."""
    if (
        not isinstance(document, dict)
        or document.get("format") != _FORMAT
        or document.get("version") != _VERSION
        or not isinstance(document.get("entries"), list)
    ):
        raise PrivacyError("not a chatkeep placeholder vault (format/version mismatch)")
    entries: list[tuple[str, str, str, str]] = []
    for entry in document["entries"]:
        if not (
            isinstance(entry, list) and len(entry) == 4 and all(isinstance(f, str) for f in entry)
        ):
            raise PrivacyError("corrupt placeholder vault entry")
        entries.append((entry[0], entry[1], entry[2], entry[3]))
    return entries


def _int(text: str) -> int:
    return int(text) if text.isdigit() else -1


def seal(vault: PlaceholderVault, key: str | None) -> str:
    """The string to store for ``vault``: plain JSON without a key, a Fernet token with one.

    ``key`` is a Fernet key (url-safe base64 of 32 bytes, see :func:`new_key`), or several
    separated by commas, newest first (rotation): sealing always uses the newest.
    """
    plain = vault.to_json()
    if key is None:
        return plain
    return _fernet(key).encrypt(plain.encode("utf-8")).decode("ascii")


def is_sealed(blob: str) -> bool:
    """Whether ``blob`` is encrypted (a plain vault is a JSON document)."""
    return not blob.lstrip().startswith("{")


def unseal(blob: str, key: str | None, *, allow_plain: bool = False) -> PlaceholderVault:
    """Inverse of :func:`seal` with the same key (or any of the keys, for rotation).

    With a key, a plain vault is refused: it skips Fernet's integrity check, so whoever can
    write the table could plant one. Vaults stored plain before the key was configured are
    read only by the migration, ``chatkeep privacy rekey``, which passes ``allow_plain``
    (see :func:`reseal`). Raises PrivacyError for a plain vault with a key (unless
    ``allow_plain``), when the blob is encrypted but no key is given, when none of the
    keys decrypts it (wrong key, tampering), or when ``cryptography`` is missing.
    """
    if not is_sealed(blob):
        if key is not None and not allow_plain:
            raise PrivacyError(
                "the placeholder vault is stored unencrypted but privacy.encryption_key is "
                "set, so it is refused (a plain vault has no integrity check); if it was "
                "stored before encryption was turned on, seal it with `chatkeep privacy "
                "rekey`")
        return PlaceholderVault.from_json(blob)
    if key is None:
        raise PrivacyError("the placeholder vault is encrypted; configure its key")
    fernet = _fernet(key)
    from cryptography.fernet import InvalidToken

    try:
        plain = fernet.decrypt(blob.encode("utf-8"))
    except InvalidToken as exc:
        raise PrivacyError(
            "cannot decrypt the placeholder vault: none of the configured keys opens it "
            "(wrong key, or the data was tampered with)"
        ) from exc
    return PlaceholderVault.from_json(plain.decode("utf-8"))


def reseal(blob: str, key: str) -> str | None:
    """``blob`` sealed with the newest of ``key``'s keys, or ``None`` when it already is
    (what ``chatkeep privacy rekey`` writes). The one reader of plain vaults once a key is
    configured: it is the explicit migration to encryption."""
    vault = unseal(blob, key, allow_plain=True)
    if is_sealed(blob) and _opens(_keys(key)[0], blob):
        return None
    return seal(vault, key)


def new_key() -> str:
    """A fresh random Fernet key, as a string to put in configuration."""
    _require_cryptography()
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")


def _require_cryptography() -> None:
    """Import the optional ``cryptography`` package, or explain how to get it."""
    try:
        import cryptography.fernet  # noqa: F401
    except ImportError as exc:
        raise PrivacyError(
            f"vault encryption needs the 'cryptography' package; {_INSTALL_HINT}"
        ) from exc


def _keys(key: str) -> list[str]:
    keys = [k.strip() for k in key.split(",") if k.strip()]
    if not keys:
        raise PrivacyError("privacy.encryption_key is empty")
    return keys


def _fernet(key: str) -> MultiFernet:
    _require_cryptography()
    from cryptography.fernet import Fernet, MultiFernet

    try:
        return MultiFernet([Fernet(k) for k in _keys(key)])
    except (ValueError, TypeError) as exc:
        raise PrivacyError(
            "invalid vault encryption key: expected Fernet keys (url-safe base64 of 32 "
            "bytes, newest first, comma-separated; see chatkeep.privacy.vault.new_key)"
        ) from exc


def _opens(key: str, blob: str) -> bool:
    """Whether ``key`` alone decrypts ``blob`` (Fernet tokens name no key)."""
    from cryptography.fernet import Fernet, InvalidToken

    try:
        Fernet(key).decrypt(blob.encode("utf-8"))
    except InvalidToken:
        return False
    return True
