"""PERSON benchmark: the dependency-free name recognizer on the hand-written name sets.

Run from the repository root: ``python bench/names.py`` (prints markdown);
``--errors`` also lists every miss and false alarm (look at the held-out set's
only to report them, never to tune on them); ``--markdown`` prints the timing lines
under the table as a list.

The sets (``tests/data/pii/names.jsonl``, the development set the recognizer
was tuned on, and ``names_holdout.jsonl``, written before the recognizer and not
used for tuning) label every person's name, each with ``cue``: whether a
greeting, sign-off, introduction, title, e-mail display name or name field
stands before it. The recognizer reads only cued names by design, so recall is
given on cued names and on all names (uncued ones are the NER backend's job).
Scoring is strict (same offsets) with the default detector, so overlaps with the
pattern recognizers count as they do in production.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import _suite  # noqa: F401  (tests/support on the path)

ROOT = Path(__file__).resolve().parent.parent
try:
    import chatkeep  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

from chatkeep.privacy.detector import PiiDetector  # noqa: E402
from chatkeep.privacy.recognizers import PersonRecognizer  # noqa: E402
from support.timing import best_time  # noqa: E402

DATA = ROOT / "tests" / "data" / "pii"
SETS = {
    "names.jsonl": "development set (tuned on)",
    "names_holdout.jsonl": "held-out set (written first, never tuned on)",
}
BLOCK_CHARS = 1024
#: Inputs built to make a name recognizer work hard: dense cues, long runs.
ADVERSARIAL_UNITS = {
    "greetings": "Hi ",
    "titles": "Mr. ",
    "introductions": "I'm Ana ",
    "sign-offs": "Thanks,\n",
    "display names": '"Ana <ana@x.io> ',
    "name fields": "name: Ana\n",
    "letters": "a",
    "hyphenated": "Ab-",
    "spaces": " ",
}


@dataclass
class NameScore:
    """Counts of one run over a name set."""

    messages: int = 0
    true_positives: int = 0
    false_positives: int = 0
    cued_found: int = 0
    cued: int = 0
    labelled: int = 0

    @property
    def precision(self) -> float:
        """Share of reported names that were labelled names."""
        reported = self.true_positives + self.false_positives
        return self.true_positives / reported if reported else 1.0

    @property
    def recall(self) -> float:
        """Share of all labelled names that were found."""
        return self.true_positives / self.labelled if self.labelled else 1.0

    @property
    def cued_recall(self) -> float:
        """Share of the names behind a cue that were found: what the recognizer aims at."""
        return self.cued_found / self.cued if self.cued else 1.0


def score_names(
    path: Path, detector: PiiDetector | None = None, errors: list[str] | None = None
) -> NameScore:
    """PERSON precision and recall (all names and cued names) of ``detector`` on ``path``."""
    detector = detector if detector is not None else PiiDetector()
    result = NameScore()
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        text = record["text"]
        expected = {(e["start"], e["end"]): bool(e["cue"]) for e in record["entities"]}
        found = {(s.start, s.end) for s in detector.detect(text) if s.entity_type == "PERSON"}
        result.messages += 1
        result.labelled += len(expected)
        result.cued += sum(expected.values())
        for key in sorted(found):
            if key in expected:
                result.true_positives += 1
                result.cued_found += expected[key]
            else:
                result.false_positives += 1
                _note(errors, "false alarm", record, key)
        for key, cued in sorted(expected.items()):
            if key not in found:
                _note(errors, "missed (cued)" if cued else "missed (no cue)", record, key)
    return result


def _note(
    errors: list[str] | None, kind: str, record: dict[str, str], key: tuple[int, int]
) -> None:
    if errors is not None:
        text = record["text"]
        errors.append(f"- {record['id']} {kind}: `{text[key[0] : key[1]]}` in {text!r}")


def timing(messages: list[str]) -> tuple[float, dict[str, float]]:
    """Median ms per KB of the recognizer on ~1 KB blocks, and ms per KB on 100 KB adversaries.

    Each time is the fastest of three runs, so load on the machine does not count.
    """
    recognizer = PersonRecognizer()
    blocks, current = [], ""
    for text in messages:
        current = f"{current}\n{text}" if current else text
        if len(current) >= BLOCK_CHARS:
            blocks.append(current)
            current = ""
    per_kb = [_ms(recognizer, block) * BLOCK_CHARS / len(block) for block in blocks]
    worst = {}
    for name, unit in ADVERSARIAL_UNITS.items():
        text = unit * (100_000 // len(unit))
        worst[name] = _ms(recognizer, text) * BLOCK_CHARS / len(text)
    return statistics.median(per_kb), worst


def _ms(recognizer: PersonRecognizer, text: str, repeats: int = 3) -> float:
    """Fastest of ``repeats`` runs on ``text``, in milliseconds."""
    return best_time(lambda: list(recognizer.find(text)), repeats) * 1000


def main() -> None:
    """Print the markdown report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--errors", action="store_true", help="list misses and false alarms")
    parser.add_argument("--markdown", action="store_true",
                        help="the timing lines under the table as a Markdown list")
    args = parser.parse_args()
    dash = "- " if args.markdown else ""
    detector = PiiDetector()
    print("## PERSON without NER (PersonRecognizer, default detector)\n")
    print("| set | messages | names (cued) | precision | recall, cued | recall, all |")
    print("|---|---:|---:|---:|---:|---:|")
    errors: dict[str, list[str]] = {}
    texts: list[str] = []
    for name, description in SETS.items():
        errors[name] = []
        result = score_names(DATA / name, detector, errors[name])
        print(
            f"| {name}: {description} | {result.messages} | {result.labelled} ({result.cued}) "
            f"| {result.precision:.3f} | {result.cued_recall:.3f} | {result.recall:.3f} |"
        )
        texts += [json.loads(line)["text"] for line in (DATA / name).open(encoding="utf-8")]
    median, worst = timing(texts)
    print(f"\n{dash}Time: median {median:.3f} ms per KB of these messages "
          "(PersonRecognizer alone).")
    print(f"{dash}Adversarial 100 KB inputs, ms per KB: ", end="")
    print(", ".join(f"{name} {ms:.2f}" for name, ms in worst.items()))
    if args.errors:
        for name, lines in errors.items():
            print(f"\n### {name}\n")
            print("\n".join(lines) or "(none)")


if __name__ == "__main__":
    main()
