"""What the inspector shows of personal data: placeholders by default, values on a logged,
keyed request.

Stored messages keep their original text; the inspector shows it redacted, as the
session's own redactor would: the values of the session's stored mapping (opened with
``privacy.encryption_key``) under their stored placeholders, and whatever the recognizers
detect now under the next free ones. Nothing is stored: the mapping grows in memory for
the one page. Revealing the values takes three things: the inspector started with
``--reveal``, a key typed on the page that opens the session's sealed mapping (or, for a
session without one, that is one of the configured keys), and the request itself, which
is logged with who asked and for which page.
"""

from __future__ import annotations

import hmac
import logging
import re
from dataclasses import dataclass
from typing import Any

from chatkeep.errors import PrivacyError
from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.egress import map_strings
from chatkeep.privacy.escaping import PLACEHOLDER_TOKEN_RE
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault, is_sealed, unseal

audit = logging.getLogger("chatkeep.inspect.reveal")


class Masker:
    """Shows text with personal values as placeholders (``shown`` as stored when the
    page was revealed). One per page and session: placeholders stay stable on the page."""

    def __init__(self, redactor: Redactor | None, vault: PlaceholderVault | None = None, *,
                 note: str | None = None) -> None:
        self.redactor = redactor
        self.vault = vault if vault is not None else PlaceholderVault()
        self.note = note
        """Why the placeholders may differ from the stored ones (``None``: they do not)."""

    @property
    def revealed(self) -> bool:
        """Whether this page shows stored values as they are."""
        return self.redactor is None

    def text(self, text: str | None, context: str | None = None) -> str:
        """``text`` as the page shows it."""
        if not text or self.redactor is None:
            return text or ""
        return self.redactor.redact(text, self.vault, context)

    def payload(self, value: Any) -> Any:
        """Every string of a JSON-like value as the page shows it."""
        if self.redactor is None:
            return value
        return map_strings(value, lambda s: self.text(s))

    def restore_then_mask(self, stored: str) -> str:
        """Text chatkeep stored in placeholder form (a summary written while redacting):
        its placeholders read with the stored mapping, then shown masked."""
        if self.redactor is None:
            return Redactor.restore(stored, self.vault)
        return self.text(Redactor.restore(stored, self.vault))


def open_vault(blob: str | None, key: str | None) -> tuple[PlaceholderVault, str | None]:
    """The stored mapping (a fresh one when there is none) and, when it cannot be opened
    with ``key``, why: its placeholders then number from 1 for this page only."""
    if blob is None:
        return PlaceholderVault(), None
    try:
        return unseal(blob, key), None
    except PrivacyError as exc:
        return PlaceholderVault(), (f"the stored placeholder mapping cannot be opened ({exc}); "
                                    "placeholders on this page are numbered for it alone")


def masker_for(redactor: Redactor, blob: str | None, key: str | None) -> Masker:
    """A masker over the mapping stored as ``blob`` (a session's vault or the values a
    memory carries)."""
    vault, note = open_vault(blob, key)
    return Masker(redactor, vault, note=note)


@dataclass(frozen=True, slots=True)
class Reveal:
    """The verdict on a request to reveal a page's values."""

    granted: bool
    message: str
    vault: PlaceholderVault | None = None
    """The stored mapping, opened with the typed key (when there is one)."""


def check_reveal(*, enabled: bool, typed_key: str, blob: str | None,
                 configured_key: str | None) -> Reveal:
    """Whether a page may show values: the inspector runs with ``--reveal`` and
    ``typed_key`` opens the sealed mapping ``blob``; without a sealed mapping it must be
    one of ``configured_key``'s keys (``privacy.encryption_key``)."""
    if not enabled:
        return Reveal(False, "revealing is off: start the inspector with --reveal")
    typed = typed_key.strip()
    if not typed:
        return Reveal(False, "revealing needs the vault key (privacy.encryption_key)")
    if blob is not None and is_sealed(blob):
        try:
            return Reveal(True, "revealed with the key that opens this mapping",
                          unseal(blob, typed))
        except PrivacyError:
            return Reveal(False, "that key does not open this session's mapping")
    keys = [k.strip() for k in (configured_key or "").split(",") if k.strip()]
    if not keys:
        return Reveal(False, "no privacy.encryption_key is configured, so there is no key "
                             "to check: the inspector reveals nothing")
    if not any(hmac.compare_digest(typed.encode(), k.encode()) for k in keys):
        return Reveal(False, "that is not the configured vault key")
    vault = None
    if blob is not None:
        try:
            vault = unseal(blob, None)
        except PrivacyError:
            vault = None
    return Reveal(True, "revealed with the configured vault key", vault)


def log_reveal(verdict: Reveal, *, page: str, client: str) -> None:
    """Record a reveal request, granted or not (the audit trail)."""
    audit.warning("reveal %s: page %s, client %s: %s",
                  "granted" if verdict.granted else "refused", page, client, verdict.message)


def detectors_by_type(detector: PiiDetector) -> dict[str, list[str]]:
    """Entity type -> the recognizers that report it (what caught a value of that type:
    the mapping stores each value's type, not the recognizer instance)."""
    out: dict[str, list[str]] = {}
    for recognizer in detector.recognizers:
        name = str(getattr(recognizer, "name", "") or type(recognizer).__name__)
        for entity_type in recognizer.entity_types:
            names = out.setdefault(entity_type, [])
            if name not in names:
                names.append(name)
    return out


_TOKEN = re.compile(PLACEHOLDER_TOKEN_RE.pattern)


def split_placeholders(text: str) -> list[tuple[str, bool]]:
    """``text`` cut into ``(piece, is_placeholder)`` runs, for highlighting."""
    out: list[tuple[str, bool]] = []
    position = 0
    for match in _TOKEN.finditer(text):
        if match.start() > position:
            out.append((text[position:match.start()], False))
        out.append((match.group(), not match.group(1)))
        position = match.end()
    if position < len(text):
        out.append((text[position:], False))
    return out

