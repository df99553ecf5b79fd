"""Measure a detector against labelled messages: precision and recall per entity type.

Used by ``bench/pii.py`` and the test suite on ``tests/data/pii/eval.jsonl``,
and usable on your own data to check a custom recognizer. A prediction counts
only if its type and both offsets equal a label's (strict span match).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import Span
from chatkeep.privacy.detector import PiiDetector

__all__ = ["LabelledMessage", "TypeScore", "load_labelled", "score"]


@dataclass(frozen=True, slots=True)
class LabelledMessage:
    """A text and the spans that are personal data in it."""

    id: str
    text: str
    entities: tuple[Span, ...]
    locale: str = ""


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
    """Read a JSONL file of ``{"id", "text", "entities": [{"start", "end", "type"}]}`` lines."""
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
        messages.append(LabelledMessage(str(record["id"]), text, spans, record.get("locale", "")))
    return messages


def score(
    detector: PiiDetector,
    messages: Iterable[LabelledMessage],
    entity_types: Sequence[str] | None = None,
) -> dict[str, TypeScore]:
    """Per-type counts of ``detector`` on ``messages`` (only ``entity_types`` if given)."""
    scores: dict[str, TypeScore] = {}
    for message in messages:
        expected = {(s.start, s.end, s.entity_type) for s in message.entities}
        found = {(s.start, s.end, s.entity_type) for s in detector.detect(message.text)}
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
