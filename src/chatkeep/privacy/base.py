"""The two shapes every detector shares: a found ``Span`` and the ``Recognizer`` protocol.

Kept apart from :mod:`chatkeep.privacy.detector` so the built-in recognizers can
import them without importing the detector that imports them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ENTITY_TYPE_RE", "ContextualRecognizer", "Recognizer", "Span"]

#: An entity type must fit in a placeholder ``<TYPE_N>``: upper case, digits, underscores.
ENTITY_TYPE_RE = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class Span:
    """One piece of personal data found in a text.

    ``text`` is ``source[start:end]``. ``score`` is the recognizer's confidence
    (1.0 for validated patterns). ``canonical`` is the normalised value used to
    give equal values the same placeholder (for example a phone number in
    E.164); ``None`` lets the vault normalise ``text`` itself.
    """

    start: int
    end: int
    entity_type: str
    text: str
    score: float = 1.0
    canonical: str | None = None


@runtime_checkable
class Recognizer(Protocol):
    """What a custom detector implements to plug into ``PiiDetector``.

    ``entity_types`` names the types it can report (each matching
    :data:`ENTITY_TYPE_RE`, e.g. ``"EMPLOYEE_ID"``). ``find`` returns spans in
    any order, overlapping or not; the detector checks them (offsets inside the
    text, ``span.text == text[start:end]``) and resolves overlaps. ``find`` must
    be safe to call from several threads and should not keep state per call.
    """

    entity_types: tuple[str, ...]

    def find(self, text: str) -> Iterable[Span]:
        """Return every span of ``text`` that holds one of ``entity_types``."""
        ...


@runtime_checkable
class ContextualRecognizer(Recognizer, Protocol):
    """A recognizer that can also read the previous message of the conversation.

    People answer questions with bare values: "What's your SSN?" / "536221234".
    ``find_in_context`` gets the answer and the message it answers
    (``context``) and returns the same kind of spans as ``find``; the detector
    calls it instead of ``find`` when it is given a context. Implementing it is
    optional: recognizers with only ``find`` keep working and ignore context.
    """

    def find_in_context(self, text: str, context: str) -> Iterable[Span]:
        """Return every span of ``text`` holding one of ``entity_types``, read after ``context``."""
        ...
