"""PII detection benchmark: precision/recall per entity type and redaction time per 1 KB.

Run from the repository root: ``python bench/pii.py`` (prints markdown).

Accuracy uses the built-in pattern recognizers (no NER) on the labelled sets in
``tests/data/pii/`` (strict span match). Timing redacts ~1 KB messages built by
joining consecutive messages of the set, each with a fresh vault, and reports
the median and p95 time scaled to exactly 1024 characters.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
try:
    import chatkeep  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

from chatkeep.privacy import PATTERN_ENTITY_TYPES  # noqa: E402
from chatkeep.privacy.detector import PiiDetector  # noqa: E402
from chatkeep.privacy.evaluation import LabelledMessage, TypeScore, load_labelled, score  # noqa: E402
from chatkeep.privacy.redactor import Redactor  # noqa: E402
from chatkeep.privacy.vault import PlaceholderVault  # noqa: E402

DATA = ROOT / "tests" / "data" / "pii"
SETS = {
    "eval.jsonl": "development set (generated + hand-written)",
    "holdout.jsonl": "held-out set (other seed)",
}
PATTERN_TYPES = PATTERN_ENTITY_TYPES
BLOCK_CHARS = 1024
REPEATS = 5


def accuracy_table(detector: PiiDetector, name: str, messages: list[LabelledMessage]) -> str:
    """Markdown table of per-type precision/recall for one labelled set."""
    scores = score(detector, messages, PATTERN_TYPES)
    lines = [
        f"### {name}: {SETS.get(name, '')}, {len(messages)} messages",
        "",
        "| entity type | labelled | TP | FP | FN | precision | recall |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    total = TypeScore()
    for entity_type in PATTERN_TYPES:
        s = scores.get(entity_type, TypeScore())
        total.true_positives += s.true_positives
        total.false_positives += s.false_positives
        total.false_negatives += s.false_negatives
        lines.append(_row(entity_type, s))
    lines.append(_row("**all**", total))
    return "\n".join(lines)


def _row(name: str, s: TypeScore) -> str:
    return (
        f"| {name} | {s.support} | {s.true_positives} | {s.false_positives} | "
        f"{s.false_negatives} | {s.precision:.3f} | {s.recall:.3f} |"
    )


def blocks(messages: list[LabelledMessage]) -> list[str]:
    """Consecutive messages joined into texts of at least ``BLOCK_CHARS`` characters."""
    result: list[str] = []
    current: list[str] = []
    size = 0
    for message in messages:
        current.append(message.text)
        size += len(message.text) + 1
        if size >= BLOCK_CHARS:
            result.append("\n".join(current))
            current, size = [], 0
    return result


def timing_table(redactor: Redactor, texts: list[str]) -> str:
    """Markdown table of redaction time per 1 KB (best of ``REPEATS`` per text)."""
    per_kb: list[float] = []
    for text in texts:
        best = float("inf")
        for _ in range(REPEATS):
            vault = PlaceholderVault()
            start = time.perf_counter()
            redactor.redact(text, vault)
            best = min(best, time.perf_counter() - start)
        per_kb.append(best * 1000 * BLOCK_CHARS / len(text))
    per_kb.sort()
    p95 = per_kb[min(len(per_kb) - 1, int(len(per_kb) * 0.95))]
    prose = ("The quick brown fox jumps over the lazy dog while we wait for the build. " * 15)[
        :BLOCK_CHARS
    ]
    prose_time = min(_time(redactor, prose) for _ in range(50)) * 1000
    median = statistics.median(per_kb)
    return "\n".join(
        [
            f"### Redaction time ({len(texts)} messages of ~1 KB, default recognizers, "
            f"phone regions US GB ES DE FR)",
            "",
            "| measure | ms per 1 KB |",
            "|---|---:|",
            f"| median | {median:.3f} |",
            f"| p95 | {p95:.3f} |",
            f"| max | {per_kb[-1]:.3f} |",
            f"| 1 KB of prose without PII | {prose_time:.3f} |",
            "",
            f"Dense messages take {median / prose_time:.1f}x the time of PII-free prose "
            "(both measured in this run).",
        ]
    )


def _time(redactor: Redactor, text: str) -> float:
    start = time.perf_counter()
    redactor.redact(text, PlaceholderVault())
    return time.perf_counter() - start


def main() -> None:
    detector = PiiDetector()
    redactor = Redactor(detector)
    print(f"## chatkeep PII benchmark (Python {sys.version.split()[0]})\n")
    timed: list[LabelledMessage] = []
    for name in SETS:
        path = DATA / name
        if not path.exists():
            continue
        messages = load_labelled(path)
        timed += messages
        print(accuracy_table(detector, name, messages))
        print()
    print(timing_table(redactor, blocks(timed)))


if __name__ == "__main__":
    main()
