"""The optional Presidio backend: clear errors when missing, span mapping with a fake engine."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import Any

import pytest

from chatkeep.errors import PrivacyError
from chatkeep.privacy.detector import PiiDetector, default_recognizers
from chatkeep.privacy.ner import PresidioRecognizer


def test_importing_the_module_does_not_import_presidio() -> None:
    assert "presidio_analyzer" not in sys.modules or sys.modules["presidio_analyzer"] is None


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
    from chatkeep.privacy.redactor import Redactor
    from chatkeep.privacy.vault import PlaceholderVault

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
