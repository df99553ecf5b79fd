"""Swaps personal data for stable placeholders before text reaches a model, and back after.

Placeholder-shaped text the user typed is escaped on the way in (see
:mod:`chatkeep.privacy.escaping`), so ``restore`` can only ever reveal values
the redactor itself hid, and ``restore(redact(text)) == text``.
"""

from __future__ import annotations

from chatkeep.privacy.detector import PiiDetector, resolve_overlaps
from chatkeep.privacy.escaping import escape, substitute_tokens
from chatkeep.privacy.vault import PlaceholderVault

__all__ = ["Redactor"]


class Redactor:
    """Redacts with a :class:`PiiDetector` and a session's :class:`PlaceholderVault`.

    Redact each raw text once: redacting already-redacted text escapes its
    placeholders, which then restore to the literal ``<EMAIL_1>``, not the value.
    """

    def __init__(self, detector: PiiDetector) -> None:
        self._detector = detector

    @property
    def detector(self) -> PiiDetector:
        """The detector deciding what is personal data."""
        return self._detector

    def redact(self, text: str, vault: PlaceholderVault, context: str | None = None) -> str:
        """Return ``text`` with each personal value replaced by its placeholder: what the
        recognizers detect (``context`` is the message ``text`` answers, if any) and,
        whatever the context, every value ``vault`` already holds, matched literally.

        New values are added to ``vault``; text between values is escaped.
        """
        parts: list[str] = []
        position = 0
        detected = self._detector.detect(text, context) if context else \
            self._detector.detect(text)
        for span in resolve_overlaps([*detected, *vault.find_known(text)]):
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
