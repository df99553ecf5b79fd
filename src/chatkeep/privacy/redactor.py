"""Swaps personal data for stable placeholders before text reaches a model, and back after.

Placeholder-shaped text the user typed is escaped on the way in (see
:mod:`chatkeep.privacy.escaping`), so ``restore`` can only ever reveal values
the redactor itself hid, and ``restore(redact(text)) == text``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from chatkeep.privacy.detector import PiiDetector, resolve_for_redaction
from chatkeep.privacy.escaping import escape, substitute_tokens
from chatkeep.privacy.vault import PlaceholderVault

__all__ = ["Redactor"]

#: Bounds of the redaction cache: entries, the longest text kept, and characters in all.
CACHE_MAX_ENTRIES = 8192
CACHE_MAX_TEXT = 64 * 1024
CACHE_MAX_CHARS = 16 * 1024 * 1024


def _chars(key: tuple[bytes, str, str | None], redacted: str) -> int:
    """Characters a cache entry holds (the text, its context and its redaction)."""
    return len(key[1]) + len(key[2] or "") + len(redacted)


class Redactor:
    """Redacts with a :class:`PiiDetector` and a session's :class:`PlaceholderVault`.

    Redact each raw text once: redacting already-redacted text escapes its
    placeholders, which then restore to the literal ``<EMAIL_1>``, not the value.
    """

    def __init__(self, detector: PiiDetector) -> None:
        self._detector = detector
        self._cache: OrderedDict[tuple[bytes, str, str | None], str] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()

    @property
    def detector(self) -> PiiDetector:
        """The detector deciding what is personal data."""
        return self._detector

    def redact(self, text: str, vault: PlaceholderVault, context: str | None = None) -> str:
        """Return ``text`` with each personal value replaced by its placeholder: what the
        recognizers detect (``context`` is the message ``text`` answers, if any) and,
        whatever the context, every value ``vault`` already holds, matched literally.

        New values are added to ``vault``; text between values is escaped.

        A redaction that added nothing to the vault is cached, keyed by the vault's whole
        contents (a digest of them): a session's stored messages go out again every turn,
        under the same vault, and give the same text.
        """
        key = (vault.fingerprint(), text, context or None)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        size = len(vault)
        redacted = self._redact(text, vault, context)
        if len(vault) == size and len(text) <= CACHE_MAX_TEXT:
            with self._lock:
                if key not in self._cache:
                    self._cache[key] = redacted
                    self._cached_chars += _chars(key, redacted)
                while self._cache and (len(self._cache) > CACHE_MAX_ENTRIES
                                       or self._cached_chars > CACHE_MAX_CHARS):
                    old, old_redacted = self._cache.popitem(last=False)
                    self._cached_chars -= _chars(old, old_redacted)
        return redacted

    def _redact(self, text: str, vault: PlaceholderVault, context: str | None) -> str:
        parts: list[str] = []
        position = 0
        detected = self._detector.detect(text, context) if context else \
            self._detector.detect(text)
        for span in resolve_for_redaction([*detected, *vault.find_known(text)]):
            parts.append(escape(text[position : span.start]))
            parts.append(vault.placeholder_for(span.entity_type, span.text, span.canonical))
            position = span.end
        parts.append(escape(text[position:]))
        return "".join(parts)

    @staticmethod
    def restore(text: str, vault: PlaceholderVault) -> str:
        """Put real values back in place of exact, known placeholders; unescape the rest.

        A placeholder the vault does not know (``<EMAIL_9>``) or that the model
        mangled (``<EMAIL 1>``, ``<email_1>``) is left exactly as it is.
        """
        return substitute_tokens(text, vault.value_for)
