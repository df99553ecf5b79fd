"""PII detection benchmark: precision/recall per entity type, redaction time per 1 KB, worst case.

Run from the repository root: ``python bench/pii.py`` (prints markdown);
``--no-presidio`` skips the Presidio yardstick, ``--errors`` lists our misses and
false alarms on the development sets (never on the held-out ones). ``--only`` picks
sections (comma-separated): ``accuracy``, ``timing``, ``worst``, ``turn``, ``surface``;
``redaction`` stands for the last two (``--only redaction`` runs just them). The
accuracy, timing and worst-case tables are always Markdown; ``--markdown`` prints the
turn and surface tables as Markdown too (aligned plain text otherwise). ``--turns``,
``--surface-repeats``, ``--format``, ``--db-dir`` and ``--profile`` tune the turn
section (see ``bench/pii_cost.py``, which describes both sections).

Accuracy uses the default detector (pattern recognizers and the dependency-free
name recognizer, no NER) on the labelled sets in ``tests/data/pii/`` (strict span
match; a message's ``context``, the previous message, is passed to the detector).
Beside each figure: Presidio's predefined pattern recognizers on the same
messages in the same run (``pip install -e '.[bench]'``). No spaCy model is
needed: a blank spaCy tokenizer stands in for the NLP engine, so context words
still raise scores; every recognizer runs whatever the message language; phone
regions are ours; the score threshold is Presidio's default, 0, so every result
it returns counts. Presidio has no URL-credentials recognizer, and its PERSON
needs NER, so those rows show "n/a".

Timing redacts ~1 KB messages built by joining consecutive messages of the sets,
each with a fresh vault, and reports the median and p95 scaled to 1024
characters. The worst case redacts each of
:data:`~chatkeep.privacy.evaluation.ADVERSARIAL_FAMILIES` at 10 KB and 100 KB and
reports the slowest ms per KB at each size and the growth (x10 input: linear is
~10, quadratic ~100).

Redaction cost per turn: one ``build_history`` of a 100-message session with redaction
on and off, side by side in one run, the ratio judged against the 2.0x target.
Surface-form families: ms per KB to redact ~10 KB of each surface form a known value
can come back in, and the worst family (both in ``bench/pii_cost.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import _suite  # noqa: F401  (tests/support on the path)

ROOT = Path(__file__).resolve().parent.parent
try:
    import chatkeep  # noqa: F401
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))

from chatkeep.privacy import PATTERN_ENTITY_TYPES  # noqa: E402
from chatkeep.privacy.base import Span  # noqa: E402
from chatkeep.privacy.detector import DEFAULT_PHONE_REGIONS, PiiDetector  # noqa: E402
from chatkeep.privacy.evaluation import (  # noqa: E402
    ADVERSARIAL_FAMILIES,
    LabelledMessage,
    SpanDetector,
    TypeScore,
    load_labelled,
    score,
)
from chatkeep.privacy.redactor import Redactor  # noqa: E402
from chatkeep.privacy.vault import PlaceholderVault  # noqa: E402
from support.timing import best_time  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pii_cost  # noqa: E402  (the turn and surface sections)

DATA = ROOT / "tests" / "data" / "pii"
SETS = {
    "eval.jsonl": "generated development set (+ 40 hand-written)",
    "holdout.jsonl": "generated held-out set (other seed)",
    "realistic.jsonl": "hand-written realistic development set (tuned on)",
    "realistic_holdout.jsonl": "hand-written realistic held-out set (written first, not tuned on)",
}
HELD_OUT = {"holdout.jsonl", "realistic_holdout.jsonl"}
REPORTED_TYPES = (*PATTERN_ENTITY_TYPES, "PERSON")
BLOCK_CHARS = 1024
REPEATS = 5
WORST_SIZES = (10_000, 100_000)
WORST_REPEATS = 3

#: Presidio entity names for ours (its NIE recognizer reports what we call ES_NIF too).
PRESIDIO_TYPES = {
    "EMAIL_ADDRESS": "EMAIL",
    "PHONE_NUMBER": "PHONE",
    "CREDIT_CARD": "CREDIT_CARD",
    "IBAN_CODE": "IBAN",
    "IP_ADDRESS": "IP_ADDRESS",
    "US_SSN": "US_SSN",
    "UK_NINO": "UK_NINO",
    "ES_NIF": "ES_NIF",
    "ES_NIE": "ES_NIF",
}
PRESIDIO_MISSING = {"URL_CREDENTIALS", "PERSON"}


class PresidioPatterns:
    """Presidio's predefined pattern recognizers behind our ``detect`` interface.

    Built offline: the NLP engine is a blank spaCy English tokenizer (no model,
    no NER), enough for Presidio's context-word score boost. Every recognizer is
    registered for that one language so it runs on every message.
    """

    def __init__(self, phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS) -> None:
        # Presidio's e-mail recognizer asks tldextract, which would download the public
        # suffix list; its bundled snapshot is enough (and the benchmark stays offline).
        os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")
        import spacy
        from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
        from presidio_analyzer import predefined_recognizers as predefined
        from presidio_analyzer.nlp_engine import NlpArtifacts, NlpEngine

        blank = spacy.blank("en")

        class BlankNlpEngine(NlpEngine):  # type: ignore[misc]
            """Tokens and lower-cased words as lemmas; no entities."""

            def load(self) -> None:
                return None

            def is_loaded(self) -> bool:
                return True

            def get_supported_languages(self) -> list[str]:
                return ["en"]

            def get_supported_entities(self) -> list[str]:
                return []

            def process_text(self, text: str, language: str) -> Any:
                doc = blank(text)
                return NlpArtifacts(
                    entities=[],
                    tokens=doc,
                    tokens_indices=[token.idx for token in doc],
                    lemmas=[token.text.lower() for token in doc],
                    nlp_engine=self,
                    language=language,
                )

            def process_batch(self, texts: Any, language: str, **kwargs: Any) -> Any:
                for text in texts:
                    yield text, self.process_text(text, language)

            def is_stopword(self, word: str, language: str) -> bool:
                return bool(blank.vocab[word].is_stop)

            def is_punct(self, word: str, language: str) -> bool:
                return bool(blank.vocab[word].is_punct)

        regions = tuple("UK" if r == "GB" else r for r in phone_regions) + tuple(phone_regions)
        recognizers = [
            predefined.EmailRecognizer(),
            predefined.PhoneRecognizer(supported_regions=regions),
            predefined.CreditCardRecognizer(),
            predefined.IbanRecognizer(),
            predefined.IpRecognizer(),
            predefined.UsSsnRecognizer(),
            predefined.UkNinoRecognizer(),
            predefined.EsNifRecognizer(supported_language="en"),
            predefined.EsNieRecognizer(supported_language="en"),
        ]
        registry = RecognizerRegistry(supported_languages=["en"])
        for recognizer in recognizers:
            registry.add_recognizer(recognizer)
        self._engine = AnalyzerEngine(
            registry=registry, nlp_engine=BlankNlpEngine(), supported_languages=["en"]
        )
        self._entities = sorted(PRESIDIO_TYPES)

    def detect(self, text: str, context: str | None = None) -> list[Span]:
        """Presidio's results as our spans (types mapped; others dropped). No context."""
        spans = []
        for result in self._engine.analyze(text, language="en", entities=self._entities):
            entity_type = PRESIDIO_TYPES.get(result.entity_type)
            if entity_type is not None:
                value = text[result.start : result.end]
                spans.append(Span(result.start, result.end, entity_type, value, result.score))
        return spans


def accuracy_table(
    name: str,
    messages: list[LabelledMessage],
    detector: SpanDetector,
    presidio: SpanDetector | None,
) -> str:
    """Markdown table of per-type precision/recall for one labelled set, with Presidio's.

    PERSON is reported only on sets that label names (the generated ones do not).
    """
    names = any(s.entity_type == "PERSON" for m in messages for s in m.entities)
    types = REPORTED_TYPES if names else PATTERN_ENTITY_TYPES
    ours = score(detector, messages, types)
    theirs = score(presidio, messages, types) if presidio is not None else {}
    lines = [
        f"### {name}: {SETS.get(name, '')}, {len(messages)} messages",
        "",
        "| entity type | labelled | TP | FP | FN | precision | recall "
        "| Presidio precision | Presidio recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    total, total_theirs = TypeScore(), TypeScore()
    for entity_type in types:
        s = ours.get(entity_type, TypeScore())
        if s.support == 0 and s.false_positives == 0:
            continue
        t = theirs.get(entity_type, TypeScore())
        if entity_type in PATTERN_ENTITY_TYPES:
            _add(total, s)
            if entity_type not in PRESIDIO_MISSING:
                _add(total_theirs, t)
        lines.append(_row(entity_type, s, t if presidio is not None else None))
    lines.append(_row("**all pattern types**", total, total_theirs if presidio else None))
    notes = []
    if presidio is not None:
        notes.append("Presidio's total leaves out the types it has no recognizer for.")
    if names:
        notes.append(
            "PERSON is the dependency-free name recognizer, which reads cued names only "
            "(see bench/names.py); it is not in the total."
        )
    return "\n".join([*lines, "", *notes] if notes else lines)


def _add(total: TypeScore, s: TypeScore) -> None:
    total.true_positives += s.true_positives
    total.false_positives += s.false_positives
    total.false_negatives += s.false_negatives


def _row(name: str, s: TypeScore, theirs: TypeScore | None) -> str:
    if theirs is None or name in PRESIDIO_MISSING:
        presidio = "| n/a | n/a |"
    else:
        presidio = f"| {theirs.precision:.3f} | {theirs.recall:.3f} |"
    return (
        f"| {name} | {s.support} | {s.true_positives} | {s.false_positives} | "
        f"{s.false_negatives} | {s.precision:.3f} | {s.recall:.3f} {presidio}"
    )


def error_list(name: str, messages: list[LabelledMessage], detector: PiiDetector) -> str:
    """Every miss and false alarm of ``detector`` on a development set."""
    lines = [f"#### errors on {name}", ""]
    for message in messages:
        expected = {
            (s.start, s.end, s.entity_type)
            for s in message.entities
            if s.entity_type in REPORTED_TYPES
        }
        found = {
            (s.start, s.end, s.entity_type)
            for s in detector.detect(message.text, context=message.context or None)
            if s.entity_type in REPORTED_TYPES
        }
        for label, keys in (("missed", expected - found), ("false alarm", found - expected)):
            for start, end, entity_type in sorted(keys):
                lines.append(
                    f"- {message.id} {label} {entity_type} {message.text[start:end]!r} "
                    f"in {message.text[:80]!r}"
                )
    return "\n".join(lines)


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


def _redaction_time(redactor: Redactor, text: str, repeats: int) -> float:
    """Best time to redact ``text`` with a fresh vault each run."""
    return best_time(lambda: redactor.redact(text, PlaceholderVault()), repeats)


def _per_kb(seconds: float, chars: int) -> float:
    return seconds * 1000 * BLOCK_CHARS / chars


def timing_table(redactor: Redactor, texts: list[str], presidio: SpanDetector | None) -> str:
    """Markdown table of redaction time per 1 KB (best of ``REPEATS`` per text)."""
    per_kb = sorted(_per_kb(_redaction_time(redactor, text, REPEATS), len(text)) for text in texts)
    p95 = per_kb[min(len(per_kb) - 1, int(len(per_kb) * 0.95))]
    prose = ("The quick brown fox jumps over the lazy dog while we wait for the build. " * 15)[
        :BLOCK_CHARS
    ]
    prose_time = best_time(lambda: redactor.redact(prose, PlaceholderVault()), 50) * 1000
    median = statistics.median(per_kb)
    lines = [
        f"### Redaction time ({len(texts)} messages of ~1 KB from the sets, default "
        f"recognizers, phone regions {' '.join(DEFAULT_PHONE_REGIONS)})",
        "",
        "| measure | ms per 1 KB |",
        "|---|---:|",
        f"| median | {median:.3f} |",
        f"| p95 | {p95:.3f} |",
        f"| max | {per_kb[-1]:.3f} |",
        f"| 1 KB of prose without PII | {prose_time:.3f} |",
    ]
    if presidio is not None:
        theirs = sorted(
            _per_kb(best_time(lambda t=text: presidio.detect(t), 1), len(text)) for text in texts
        )
        median_theirs = statistics.median(theirs)
        lines.append(f"| Presidio patterns, median (detection only) | {median_theirs:.3f} |")
    lines += [
        "",
        f"Dense messages take {median / prose_time:.1f}x the time of PII-free prose "
        "(both measured in this run).",
    ]
    return "\n".join(lines)


def worst_case_table(redactor: Redactor) -> str:
    """Markdown table of the slowest adversarial families at 10 KB and 100 KB."""
    rows = []
    for family, make in ADVERSARIAL_FAMILIES.items():
        times = []
        for size in WORST_SIZES:
            text = make(size)
            times.append(_per_kb(_redaction_time(redactor, text, WORST_REPEATS), size))
        rows.append((family, times[0], times[1], times[1] / times[0] * 10))
    worst_small = max(rows, key=lambda r: r[1])
    worst_large = max(rows, key=lambda r: r[2])
    worst_growth = max(rows, key=lambda r: r[3])
    lines = [
        f"### Worst case: redacting each of {len(rows)} adversarial input families "
        "(best of 3 runs each)",
        "",
        "| measure | value | family |",
        "|---|---:|---|",
        f"| slowest at 10 KB, ms per 1 KB | {worst_small[1]:.3f} | {worst_small[0]} |",
        f"| slowest at 100 KB, ms per 1 KB | {worst_large[2]:.3f} | {worst_large[0]} |",
        f"| largest growth, 100 KB time / 10 KB time | {worst_growth[3]:.1f} | {worst_growth[0]} |",
        f"| median growth over families | {statistics.median(r[3] for r in rows):.1f} | |",
        "",
        "Slowest five at 100 KB (ms per 1 KB at 10 KB / at 100 KB):",
        "",
    ]
    for family, small, large, _growth in sorted(rows, key=lambda r: -r[2])[:5]:
        lines.append(f"- {family}: {small:.3f} / {large:.3f}")
    return "\n".join(lines)


SECTIONS = ("accuracy", "timing", "worst", "turn", "surface")
SECTION_GROUPS = {"redaction": ("turn", "surface")}


def _sections(value: str) -> set[str]:
    """``--only``'s comma-separated section names (groups expanded)."""
    chosen: set[str] = set()
    for name in filter(None, (part.strip() for part in value.split(","))):
        if name in SECTION_GROUPS:
            chosen.update(SECTION_GROUPS[name])
        elif name in SECTIONS:
            chosen.add(name)
        else:
            names = ", ".join((*SECTIONS, *SECTION_GROUPS))
            raise argparse.ArgumentTypeError(f"unknown section {name!r} (one of {names})")
    return chosen


def main() -> None:
    """Print the benchmark (see the module docstring for the sections and flags)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--no-presidio", action="store_true", help="skip the Presidio yardstick")
    parser.add_argument("--errors", action="store_true", help="list errors on development sets")
    parser.add_argument("--only", type=_sections, default=set(SECTIONS),
                        help="sections to run, comma-separated: " + ", ".join(
                            (*SECTIONS, *SECTION_GROUPS)) + " (default: all)")
    parser.add_argument("--markdown", action="store_true",
                        help="print the turn and surface tables as Markdown")
    parser.add_argument("--turns", type=int, default=40,
                        help="interleaved build_history repetitions per session (turn)")
    parser.add_argument("--surface-repeats", type=int, default=15,
                        help="redactions per surface-form family")
    parser.add_argument("--format", default="openai_chat",
                        choices=("openai_chat", "openai_responses", "anthropic_messages"),
                        help="wire format of the timed build_history (turn)")
    parser.add_argument("--db-dir", type=Path, default=None,
                        help="directory for the SQLite file (default: a temporary one)")
    parser.add_argument("--profile", action="store_true",
                        help="profile a redacting turn even when the target is met")
    args = parser.parse_args()
    sections: set[str] = args.only
    print(f"## chatkeep PII benchmark (Python {sys.version.split()[0]})\n")
    if sections & {"accuracy", "timing", "worst"}:
        detection_sections(args, sections)
    if "turn" in sections:
        print(pii_cost.turn_section(args.turns, args.format, args.markdown, args.db_dir,
                                    args.profile))
        print()
    if "surface" in sections:
        print(pii_cost.surface_section(args.surface_repeats, args.markdown))


def detection_sections(args: argparse.Namespace, sections: set[str]) -> None:
    """The accuracy tables, redaction time per 1 KB and the worst case (Markdown)."""
    detector = PiiDetector()
    redactor = Redactor(detector)
    presidio: PresidioPatterns | None = None
    note = ""
    if not args.no_presidio and sections & {"accuracy", "timing"}:
        try:
            presidio = PresidioPatterns()
        except ImportError as exc:
            note = f"(Presidio not run: {exc}; `pip install -e '.[bench]'`)"
    if note:
        print(note + "\n")
    timed: list[LabelledMessage] = []
    for name in SETS:
        path = DATA / name
        if not path.exists():
            continue
        messages = load_labelled(path)
        timed += messages
        if "accuracy" not in sections:
            continue
        print(accuracy_table(name, messages, detector, presidio))
        print()
        if args.errors and name not in HELD_OUT:
            print(error_list(name, messages, detector))
            print()
    if "timing" in sections:
        print(timing_table(redactor, blocks(timed), presidio))
        print()
    if "worst" in sections:
        print(worst_case_table(redactor))
        print()


if __name__ == "__main__":
    main()
