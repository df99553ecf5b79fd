"""The personal values a memory carries (``Memory.sealed_pii``), whatever its source's switch.

A memory outlives its conversation and is recalled into others, so the values it holds
travel with it, sealed like a vault: every session that recalls it redacts them literally
under its own placeholders, and every embedding of it masks them (``pii_mask``), on the
first attempt and on every retry or backfill alike.

With ``privacy.anonymize_pii`` on, a memory carries what the recognizers detect in its
text, and every value its source session knows as personal found in it literally: the
session's vault, the values detected in the distilled messages (each read with the
message it answers as context, so "536221234" after "What's your SSN?" is an SSN), the
subject reference, and, for a text an UPDATE rewrote, the values of the memories it
merged. The messages are read even when the source session's own switch is off: that
switch lets its text go out raw by the user's choice, for that conversation only; the
values are no less personal in a session that redacts and recalls the memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from chatkeep.history.plan import previous_texts
from chatkeep.messages import Message
from chatkeep.privacy.guard import PrivacyGuard, seal_spans
from chatkeep.privacy.vault import PlaceholderVault, unseal
from chatkeep.sessions import ChatSession


class SealsValues(Protocol):
    """An outbound filter's own answer (``PrivacyGuard.sealed_values``): used as it is
    when the filter is not chatkeep's guard, or the application switch is off."""

    def sealed_values(self, session: ChatSession, text: str) -> str | None:
        """The personal values ``text`` holds, sealed, or ``None``."""
        ...


class MemoryValues:
    """What the memories distilled from one chunk of a session carry (``sealed``)."""

    def __init__(self, source: SealsValues | None, session: ChatSession,
                 talk: Sequence[Message]) -> None:
        self.source = source
        self.session = session
        self.talk = talk
        # A worker whose own switch is off still protects a session created under it.
        self.guard = source if isinstance(source, PrivacyGuard) and (
            source.config.anonymize_pii or source.redacts(session)) else None
        self._known: PlaceholderVault | None = None

    def sealed(self, text: str, merged: Sequence[str | None] = ()) -> str | None:
        """The values ``text`` holds, sealed (``None``: none): detected in it, or known to
        the source session (or carried by the ``merged`` memories) and found in it."""
        if self.guard is None:
            return self.source.sealed_values(self.session, text) if self.source else None
        key = self.guard.config.encryption_key
        spans = [*self.guard.redactor.detector.detect(text), *self.known.find_known(text)]
        for blob in merged:
            if blob:
                spans += unseal(blob, key).find_known(text)
        return seal_spans(spans, key)

    @property
    def known(self) -> PlaceholderVault:
        """The session's vault plus every value detected in the chunk's messages (with
        their question context) and in the subject reference, whether or not the session
        redacts (its vault alone misses them when it does not). Read once, on first use:
        a chunk that yields no fact costs nothing."""
        if self._known is None:
            assert self.guard is not None
            known = self.guard.vault(self.session)
            detector = self.guard.redactor.detector
            previous = previous_texts(self.talk)
            texts = [(m.content or "", previous.get(m.seq)) for m in self.talk]
            if self.session.subject is not None:
                texts.append((str(self.session.subject), None))
            for text, context in texts:
                for span in detector.detect(text, context):
                    known.placeholder_for(span.entity_type, span.text, span.canonical)
            self._known = known
        return self._known


def sealed_direct(source: object, text: str, merged: Sequence[str | None] = ()) -> str | None:
    """What a memory written directly (``keep.memory.add`` / ``update``: from no
    conversation) carries: the values chatkeep's guard detects in ``text``, and those the
    ``merged`` memories carry (the version an update replaces) found in it literally,
    sealed; whatever the application switch, as a distilled memory's. ``None`` when
    ``source`` is not chatkeep's ``PrivacyGuard`` (another filter's ``sealed_values``
    reads a session, and there is none) or nothing is found."""
    if not isinstance(source, PrivacyGuard):
        return None
    key = source.config.encryption_key
    spans = list(source.redactor.detector.detect(text))
    for blob in merged:
        if blob:
            spans += unseal(blob, key).find_known(text)
    return seal_spans(spans, key)
