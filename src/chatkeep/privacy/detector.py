"""Runs the recognizers over a text and returns one clean, non-overlapping list of spans.

Overlap rule: when spans overlap, the longer one wins; at equal length the more
specific type wins (:data:`ENTITY_PRIORITY`: checksum-validated ids over
e-mails over IPs over phone numbers over NER guesses); then the higher score,
then the earlier start. Losers are dropped whole, never trimmed, so a card
number is never left half-redacted by a phone number found inside it.

Context: :meth:`PiiDetector.detect` optionally takes the previous message of
the conversation, because people answer questions with bare values ("What's
your SSN?" / "536221234"). Recognizers implementing
:class:`~chatkeep.privacy.base.ContextualRecognizer` read it; the others do not.

Cost: every built-in recognizer runs in time linear in the text (no regular
expression can backtrack more than a bounded amount per character; see
``tests/privacy/test_linear_time.py``), so no message can stall redaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import ENTITY_TYPE_RE, ContextualRecognizer, Recognizer, Span
from chatkeep.privacy.known_values import KNOWN_VALUE_SCORE
from chatkeep.privacy.recognizers import (
    DEFAULT_PHONE_REGIONS,
    CreditCardRecognizer,
    EmailRecognizer,
    EsNifRecognizer,
    IbanRecognizer,
    IpAddressRecognizer,
    PersonRecognizer,
    PhoneRecognizer,
    UkNinoRecognizer,
    UrlCredentialsRecognizer,
    UsSsnRecognizer,
)

__all__ = [
    "DEFAULT_PHONE_REGIONS",
    "ENTITY_PRIORITY",
    "ContextualRecognizer",
    "PiiDetector",
    "Recognizer",
    "Span",
    "default_recognizers",
    "resolve_for_redaction",
    "resolve_overlaps",
]

#: Tie-break between overlapping spans of equal length; higher wins. Types not
#: listed (custom recognizers) get :data:`DEFAULT_PRIORITY`.
ENTITY_PRIORITY: dict[str, int] = {
    "CREDIT_CARD": 90,
    "IBAN": 90,
    "US_SSN": 85,
    "ES_NIF": 85,
    "UK_NINO": 85,
    "URL_CREDENTIALS": 80,
    "EMAIL": 70,
    "IP_ADDRESS": 60,
    "PHONE": 50,
    "PERSON": 20,
    "LOCATION": 20,
}
#: Bounds of each detector's result cache: texts, and their characters in all.
CACHE_MAX_ENTRIES = 8192
CACHE_MAX_CHARS = 16 * 1024 * 1024
#: Priority of entity types missing from :data:`ENTITY_PRIORITY` (above PHONE, below IP).
DEFAULT_PRIORITY = 55


def default_recognizers(
    phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS,
) -> list[Recognizer]:
    """The built-in pattern recognizers (no NER), phone numbers read for ``phone_regions``."""
    return [
        EmailRecognizer(),
        PhoneRecognizer(phone_regions),
        CreditCardRecognizer(),
        IbanRecognizer(),
        IpAddressRecognizer(),
        UrlCredentialsRecognizer(),
        UsSsnRecognizer(),
        EsNifRecognizer(),
        UkNinoRecognizer(),
        PersonRecognizer(),
    ]


class PiiDetector:
    """Finds personal data in text with a set of recognizers.

    ``recognizers`` replaces the built-in set when given; to add a custom one
    keep the defaults: ``PiiDetector([*default_recognizers(), MyRecognizer()])``.
    ``phone_regions`` only applies to the built-in set.
    """

    def __init__(
        self,
        recognizers: Sequence[Recognizer] | None = None,
        phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS,
    ) -> None:
        chosen = default_recognizers(phone_regions) if recognizers is None else list(recognizers)
        for recognizer in chosen:
            _check_recognizer(recognizer)
        self._recognizers = tuple(chosen)
        # The recognizers that read the previous message, checked once (isinstance on a
        # protocol looks up every member).
        self._contextual = tuple(r if isinstance(r, ContextualRecognizer) else None for r in chosen)
        self._cache: OrderedDict[tuple[str, str | None], list[Span]] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()

    @property
    def recognizers(self) -> tuple[Recognizer, ...]:
        """The recognizers in use."""
        return self._recognizers

    @property
    def entity_types(self) -> tuple[str, ...]:
        """Every entity type some recognizer may report."""
        return tuple(dict.fromkeys(t for r in self._recognizers for t in r.entity_types))

    def detect(self, text: str, context: str | None = None) -> list[Span]:
        """Spans of ``text`` holding personal data, sorted by start, never overlapping.

        ``context`` is the previous message of the conversation, the one ``text``
        answers, when there is one. It is never searched itself; it only tells
        what a short reply holds: after "What's your SSN?" a bare ``536221234``
        is an SSN, after "What's your order number?" ``612345678`` is not a phone
        number. Omitting it gives the context-free result (the same as before).

        Results are cached (least recently used, bounded in entries and characters): a
        session's stored messages go out again on every turn, and what is personal in
        them does not change between turns.
        """
        key = (text, context or None)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return list(cached)
        spans = self._detect(text, context)
        size = len(text) + len(context or "")
        if size <= CACHE_MAX_CHARS // 16:
            with self._lock:
                if key not in self._cache:
                    self._cache[key] = spans
                    self._cached_chars += size
                while self._cache and (len(self._cache) > CACHE_MAX_ENTRIES
                                       or self._cached_chars > CACHE_MAX_CHARS):
                    (old, old_context), _ = self._cache.popitem(last=False)
                    self._cached_chars -= len(old) + len(old_context or "")
        return list(spans)

    def _detect(self, text: str, context: str | None) -> list[Span]:
        found: list[Span] = []
        for recognizer, contextual in zip(self._recognizers, self._contextual, strict=True):
            if context and contextual is not None:
                spans = contextual.find_in_context(text, context)
            else:
                spans = recognizer.find(text)
            for span in spans:
                _check_span(span, text, recognizer)
                found.append(span)
        return resolve_overlaps(found)


def resolve_overlaps(spans: Iterable[Span]) -> list[Span]:
    """Keep a non-overlapping subset of ``spans`` by the module's overlap rule, sorted by start."""
    ranked = sorted(
        spans,
        key=lambda s: (
            -(s.end - s.start),
            -ENTITY_PRIORITY.get(s.entity_type, DEFAULT_PRIORITY),
            -s.score,
            s.start,
        ),
    )
    if not ranked:
        return []
    # One byte per character, set once a kept span covers it: checking a span
    # costs its length at most, so thousands of spans stay linear in the text.
    taken = bytearray(max(span.end for span in ranked))
    kept: list[Span] = []
    for span in ranked:
        if taken.find(1, span.start, span.end) != -1:
            continue
        taken[span.start : span.end] = b"\x01" * (span.end - span.start)
        kept.append(span)
    kept.sort(key=lambda s: s.start)
    return kept


def resolve_for_redaction(spans: Iterable[Span]) -> list[Span]:
    """:func:`resolve_overlaps`, then each vault match that lost to a span it only partly
    overlaps keeps its uncovered part (trimmed of separators): a match that reached into
    its neighbour's text (``5500 0000 0000 0004 07700 900123``: the phone pattern read
    ``0004`` as a prefix) must not leave the rest of its value raw when the neighbour
    wins. Sorted by start, not overlapping."""
    spans = list(spans)
    kept = resolve_overlaps(spans)
    if len(kept) == len(spans):
        return kept
    taken = bytearray(max((span.end for span in spans), default=0))
    for span in kept:
        taken[span.start:span.end] = b"\x01" * (span.end - span.start)
    chosen = set(kept)
    extra: list[Span] = []
    for span in sorted(spans, key=lambda s: (-(s.end - s.start), s.start)):
        if span in chosen or span.score < KNOWN_VALUE_SCORE:
            continue
        position = span.start
        while position < span.end:
            free = taken.find(0, position, span.end)
            if free == -1:
                break
            stop = taken.find(1, free, span.end)
            stop = span.end if stop == -1 else stop
            piece = _trimmed(span, free, stop)
            if piece is not None:
                taken[piece.start:piece.end] = b"\x01" * (piece.end - piece.start)
                extra.append(piece)
            position = stop
    return sorted([*kept, *extra], key=lambda s: s.start)


def _trimmed(span: Span, start: int, end: int) -> Span | None:
    """The part ``[start, end)`` of ``span`` without separators at its edges, if it holds a
    letter or digit."""
    text = span.text[start - span.start:end - span.start]
    lead = len(text) - len(text.lstrip(_EDGE_SEPARATORS))
    text = text.strip(_EDGE_SEPARATORS)
    if not any(c.isalnum() for c in text):
        return None
    first = start + lead
    return Span(first, first + len(text), span.entity_type, text, span.score, span.canonical)


_EDGE_SEPARATORS = " \t\n\r\u00a0\u202f-.,;:()[]{}<>/\\|+_*\"'"


def _check_recognizer(recognizer: object) -> None:
    if not isinstance(recognizer, Recognizer):
        raise PrivacyError(
            f"{recognizer!r} is not a recognizer: it needs entity_types and find(text)"
        )
    for entity_type in recognizer.entity_types:
        if not ENTITY_TYPE_RE.fullmatch(entity_type):
            raise PrivacyError(f"invalid entity type {entity_type!r}: use A-Z, 0-9 and _")


def _check_span(span: Span, text: str, recognizer: Recognizer) -> None:
    """Refuse a malformed span rather than redact the wrong characters."""
    if not (0 <= span.start < span.end <= len(text)) or text[span.start : span.end] != span.text:
        raise PrivacyError(
            f"{type(recognizer).__name__} returned a span that does not fit the text"
        )
    if span.entity_type not in recognizer.entity_types:
        raise PrivacyError(
            f"{type(recognizer).__name__} returned type {span.entity_type!r} "
            "it does not declare in entity_types"
        )
