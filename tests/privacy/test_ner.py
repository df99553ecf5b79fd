"""The optional Presidio backend: clear errors when missing, and the real integration end to end.

The end-to-end tests run Presidio's analyzer on a small spaCy pipeline they build
(``spacy.blank`` plus an ``entity_ruler``): no model download, yet the real code
runs: label mapping, offsets, scores, entity filtering, the language setting,
loading a pipeline from a directory, and mixing with the pattern recognizers.
spaCy and presidio-analyzer are in the ``dev`` extra so this runs in CI.
"""

from __future__ import annotations

import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chatkeep.errors import PrivacyError
from chatkeep.privacy.detector import PiiDetector, default_recognizers
from chatkeep.privacy.ner import PresidioRecognizer
from chatkeep.privacy.redactor import Redactor
from chatkeep.privacy.vault import PlaceholderVault


def test_importing_the_module_does_not_import_presidio() -> None:
    # In a fresh interpreter: other tests in this run do import Presidio.
    code = (
        "import sys, chatkeep.privacy, chatkeep.privacy.ner; "
        "assert 'presidio_analyzer' not in sys.modules and 'spacy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_presidio_is_a_clear_privacy_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)
    with pytest.raises(PrivacyError, match=r"chatkeep\[ner\]"):
        PresidioRecognizer()


def test_missing_spacy_model_is_a_clear_privacy_error(monkeypatch: pytest.MonkeyPatch) -> None:
    presidio = types.ModuleType("presidio_analyzer")
    nlp_engine = types.ModuleType("presidio_analyzer.nlp_engine")
    spacy = types.ModuleType("spacy")
    spacy_util = types.ModuleType("spacy.util")
    spacy_util.is_package = lambda name: False  # type: ignore[attr-defined]
    for name, module in [
        ("presidio_analyzer", presidio),
        ("presidio_analyzer.nlp_engine", nlp_engine),
        ("spacy", spacy),
        ("spacy.util", spacy_util),
    ]:
        monkeypatch.setitem(sys.modules, name, module)
    with pytest.raises(PrivacyError, match="python -m spacy download en_core_web_lg"):
        PresidioRecognizer()


@dataclass
class _Result:
    entity_type: str
    start: int
    end: int
    score: float


class _FakeAnalyzer:
    def __init__(self, results: list[_Result]) -> None:
        self.results = results
        self.calls: list[dict[str, Any]] = []

    def analyze(
        self, text: str, language: str, entities: list[str] | None = None, **kwargs: Any
    ) -> list[Any]:
        self.calls.append({"text": text, "language": language, "entities": entities, **kwargs})
        return list(self.results)


def test_results_become_spans_and_mix_with_patterns() -> None:
    text = "Ana García lives in Valladolid, mail ana@x.com"
    fake = _FakeAnalyzer(
        [
            _Result("PERSON", 0, 10, 0.85),
            _Result("LOCATION", 20, 30, 0.7),
            _Result("PERSON", 37, 40, 0.3),
        ]
    )
    ner = PresidioRecognizer(language="es", analyzer=fake)
    detector = PiiDetector([*default_recognizers(), ner])
    spans = detector.detect(text)
    assert [(s.entity_type, s.text) for s in spans] == [
        ("PERSON", "Ana García"),
        ("LOCATION", "Valladolid"),
        ("EMAIL", "ana@x.com"),
    ]
    assert fake.calls[0]["language"] == "es"
    assert fake.calls[0]["entities"] == ["PERSON", "LOCATION"]


def test_two_people_get_two_placeholders() -> None:
    text = "Ana met Bob; Ana left."
    fake = _FakeAnalyzer(
        [
            _Result("PERSON", 0, 3, 0.9),
            _Result("PERSON", 8, 11, 0.9),
            _Result("PERSON", 13, 16, 0.9),
        ]
    )
    redactor = Redactor(PiiDetector([PresidioRecognizer(analyzer=fake)]))
    vault = PlaceholderVault()
    assert redactor.redact(text, vault) == "<PERSON_1> met <PERSON_2>; <PERSON_1> left."


# --- the real Presidio + spaCy path, on pipelines the tests build ---------------------------


def _pipeline(language: str, patterns: list[dict[str, Any]]) -> Any:
    """A blank spaCy pipeline whose entity ruler tags ``patterns``: a stand-in for a model."""
    import spacy  # in the dev extra: these tests must run, not skip

    nlp = spacy.blank(language)
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(patterns)
    return nlp


_EN_PATTERNS: list[dict[str, Any]] = [
    {"label": "PERSON", "pattern": [{"ORTH": "Ana"}, {"ORTH": "García"}]},
    {"label": "PERSON", "pattern": [{"ORTH": {"IN": ["Bob", "Tom"]}}]},
    {"label": "GPE", "pattern": "Valladolid"},
    {"label": "ORG", "pattern": "Acme"},
]


@pytest.fixture(scope="module")
def english_ner() -> PresidioRecognizer:
    return PresidioRecognizer(nlp=_pipeline("en", _EN_PATTERNS))


def test_real_presidio_maps_labels_offsets_and_scores(english_ner: PresidioRecognizer) -> None:
    text = "Yesterday Ana García from Acme flew to Valladolid with Bob."
    spans = sorted(english_ner.find(text), key=lambda s: s.start)
    assert [(s.entity_type, s.text) for s in spans] == [
        ("PERSON", "Ana García"),
        ("LOCATION", "Valladolid"),  # spaCy's GPE, mapped by Presidio
        ("PERSON", "Bob"),
    ]
    for span in spans:
        assert text[span.start : span.end] == span.text
        assert 0.5 <= span.score <= 1.0
    assert list(english_ner.find("   ")) == []
    assert list(english_ner.find("nothing to see here")) == []


def test_real_presidio_filters_types_and_scores() -> None:
    nlp = _pipeline("en", _EN_PATTERNS)
    text = "Ana García flew to Valladolid."
    people_only = PresidioRecognizer(["PERSON"], nlp=nlp)
    assert [s.entity_type for s in people_only.find(text)] == ["PERSON"]
    # Presidio scores spaCy entities 0.85: a stricter threshold drops them all.
    assert list(PresidioRecognizer(nlp=nlp, score_threshold=0.9).find(text)) == []


def test_real_presidio_redacts_end_to_end_with_the_patterns(
    english_ner: PresidioRecognizer,
) -> None:
    redactor = Redactor(PiiDetector([*default_recognizers(), english_ner]))
    vault = PlaceholderVault()
    text = "Ana García lives in Valladolid, mail ana@x.com. Tom says hi to Ana García."
    redacted = redactor.redact(text, vault)
    assert redacted == (
        "<PERSON_1> lives in <LOCATION_1>, mail <EMAIL_1>. <PERSON_2> says hi to <PERSON_1>."
    )
    assert redactor.restore(redacted, vault) == text


def test_real_presidio_in_another_language_from_a_saved_pipeline(tmp_path: Path) -> None:
    # Spanish models label PER / LOC; the pipeline is saved and loaded by path,
    # the way a host without model downloads would ship one.
    nlp = _pipeline(
        "es",
        [
            {"label": "PER", "pattern": [{"ORTH": "María"}, {"ORTH": "López"}]},
            {"label": "LOC", "pattern": "Sevilla"},
        ],
    )
    nlp.to_disk(tmp_path / "es_pipeline")
    ner = PresidioRecognizer(language="es", model=tmp_path / "es_pipeline")
    text = "Hola, soy María López y vivo en Sevilla."
    assert [(s.entity_type, s.text) for s in ner.find(text)] == [
        ("PERSON", "María López"),
        ("LOCATION", "Sevilla"),
    ]


def test_a_missing_pipeline_directory_is_a_clear_privacy_error(tmp_path: Path) -> None:
    with pytest.raises(PrivacyError, match="no spaCy pipeline at"):
        PresidioRecognizer(model=tmp_path / "nowhere")


def test_an_uninstalled_model_is_refused_not_downloaded() -> None:
    with pytest.raises(PrivacyError, match="python -m spacy download xx_chatkeep_no_such_model"):
        PresidioRecognizer(model="xx_chatkeep_no_such_model")
