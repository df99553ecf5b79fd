"""Measure a detector: precision and recall per entity type, and inputs to time it on.

Used by ``bench/pii.py`` and the test suite on ``tests/data/pii/*.jsonl``, and
usable on your own data to check a custom recognizer. A prediction counts only
if its type and both offsets equal a label's (strict span match).

:data:`ADVERSARIAL_FAMILIES` are the texts that make pattern matching slow if
any pattern backtracks (repetitions of near-matching fragments): the test suite
checks that time grows linearly on them and the benchmark reports the worst.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import Span

__all__ = [
    "ADVERSARIAL_FAMILIES",
    "LabelledMessage",
    "SpanDetector",
    "TypeScore",
    "load_labelled",
    "score",
]


class SpanDetector(Protocol):
    """What :func:`score` measures: :class:`~chatkeep.privacy.detector.PiiDetector`, or
    any adapter with the same ``detect`` (the benchmark wraps Presidio in one)."""

    def detect(self, text: str, context: str | None = None) -> list[Span]:
        """Spans of ``text`` holding personal data; ``context`` is the previous message."""
        ...


@dataclass(frozen=True, slots=True)
class LabelledMessage:
    """A text and the spans that are personal data in it.

    ``context`` is the previous message of the conversation, when the labels
    depend on it (a bare number answering "What's your SSN?").
    """

    id: str
    text: str
    entities: tuple[Span, ...]
    locale: str = ""
    context: str = ""


@dataclass(slots=True)
class TypeScore:
    """Counts for one entity type; precision/recall are 1.0 when nothing was expected."""

    true_positives: int = 0
    false_positives: int = 0
    false_negatives: int = 0

    @property
    def precision(self) -> float:
        """Share of reported spans that were right."""
        reported = self.true_positives + self.false_positives
        return self.true_positives / reported if reported else 1.0

    @property
    def recall(self) -> float:
        """Share of labelled spans that were reported."""
        expected = self.true_positives + self.false_negatives
        return self.true_positives / expected if expected else 1.0

    @property
    def support(self) -> int:
        """Number of labelled spans."""
        return self.true_positives + self.false_negatives


def load_labelled(path: Path) -> list[LabelledMessage]:
    """Read a JSONL file of ``{"id", "text", "entities": [{"start", "end", "type"}]}`` lines.

    Optional keys: ``locale`` and ``context`` (the previous message, passed to
    :meth:`~chatkeep.privacy.detector.PiiDetector.detect` by :func:`score`).
    """
    messages: list[LabelledMessage] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            text = record["text"]
            spans = tuple(
                Span(e["start"], e["end"], e["type"], text[e["start"] : e["end"]])
                for e in record["entities"]
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise PrivacyError(f"{path}:{number}: not a labelled message") from exc
        messages.append(
            LabelledMessage(
                str(record["id"]),
                text,
                spans,
                record.get("locale", ""),
                record.get("context", ""),
            )
        )
    return messages


def score(
    detector: SpanDetector,
    messages: Iterable[LabelledMessage],
    entity_types: Sequence[str] | None = None,
) -> dict[str, TypeScore]:
    """Per-type counts of ``detector`` on ``messages`` (only ``entity_types`` if given)."""
    scores: dict[str, TypeScore] = {}
    for message in messages:
        expected = {(s.start, s.end, s.entity_type) for s in message.entities}
        spans = detector.detect(message.text, context=message.context or None)
        found = {(s.start, s.end, s.entity_type) for s in spans}
        for key, bucket in (
            (expected & found, "tp"),
            (found - expected, "fp"),
            (expected - found, "fn"),
        ):
            for _start, _end, entity_type in key:
                if entity_type_allowed(entity_type, entity_types):
                    _bump(scores.setdefault(entity_type, TypeScore()), bucket)
    return dict(sorted(scores.items()))


def entity_type_allowed(entity_type: str, entity_types: Sequence[str] | None) -> bool:
    """True when ``entity_type`` is among ``entity_types`` (or no filter is set)."""
    return entity_types is None or entity_type in entity_types


def _bump(counts: TypeScore, bucket: str) -> None:
    if bucket == "tp":
        counts.true_positives += 1
    elif bucket == "fp":
        counts.false_positives += 1
    else:
        counts.false_negatives += 1


def _repeat(fragment: str, tail: str = "") -> Callable[[int], str]:
    def make(size: int) -> str:
        return (fragment * (size // len(fragment) + 1))[: size - len(tail)] + tail

    return make


def _prefixed(prefix: str, body: Callable[[int], str]) -> Callable[[int], str]:
    return lambda size: prefix + body(size - len(prefix))


def _fuzz(seed: int) -> Callable[[int], str]:
    alphabet = "0123456789 .:-/@#+()aAbBcdefxXgG\u00a0_%é\n:/@.-"

    def make(size: int) -> str:
        rng = random.Random(seed)
        return "".join(rng.choice(alphabet) for _ in range(size))

    return make


#: Adversarial inputs: name -> ``make(size)`` returning a text of exactly ``size``
#: characters. Each repeats a fragment that nearly matches some pattern (what makes
#: a backtracking regex engine retry), or is a seeded mix of the characters that
#: matter to the patterns.
ADVERSARIAL_FAMILIES: dict[str, Callable[[int], str]] = {
    "ipv6 colon run glued to a word": _repeat("1:", "g"),
    "ipv6 hex groups glued to a word": _repeat("ab12:", "x"),
    "ipv6 double colons": _repeat("1::"),
    "ipv6 mixed with dots": _repeat("1:1.", "g"),
    "ipv4 dotted run": _repeat("1."),
    "ipv4 dotted pairs": _repeat("9.9", "x"),
    "email local dots": _repeat("a."),
    "email at signs": _repeat("a@"),
    "email address-like run": _repeat("a@a."),
    "email long domain without tld": _prefixed("x@", _repeat("a.", "1")),
    "email long local part": _repeat("a", "@"),
    "email accented dots": _repeat("é.", "@x"),
    "email hyphen domain": _prefixed("x@", _repeat("a-")),
    "digits and spaces": _repeat("1 "),
    "digits and dashes": _repeat("1-"),
    "digits and dots": _repeat("1.1 "),
    "digit pairs": _repeat("12 "),
    "digits and parentheses": _repeat("(1"),
    "plus signs": _repeat("+1 "),
    "zeros": _repeat("0"),
    "one long number": _repeat("1"),
    "digits and no-break spaces": _repeat("1\u00a0"),
    "extensions": _repeat("1 ext"),
    "iban heads": _repeat("DE89 "),
    "iban heads, double spaces": _repeat("DE89  "),
    "iban groups": _repeat("DE89 3704 "),
    "url schemes": _repeat("a://"),
    "url users": _repeat("a://b:"),
    "url passwords without host": _repeat("a://b:c"),
    "url passwords with slashes": _repeat("http://a:b/"),
    "nino prefixes": _repeat("AB 12 "),
    "nino lower case": _repeat("ab 1"),
    "nie bodies": _repeat("X1234567"),
    "ssn label and groups": _repeat("SSN 123 45 "),
    "bare ssn-like numbers": _repeat("123456789 "),
    "phone labels": _repeat("phone 7700900123 "),
    "order labels": _repeat("order no. 612345678 "),
    "national numbers": _repeat("612 34 56 78 "),
    "card groups": _repeat("4111 "),
    "card dotted groups": _repeat("4111."),
    "many e-mails": _repeat("a@b.co "),
    "many ipv4": _repeat("10.0.0.1 "),
    "random specials 1": _fuzz(1),
    "random specials 2": _fuzz(2),
}
