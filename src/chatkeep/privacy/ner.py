"""Optional NER backend for names and places: Presidio on top of a spaCy model.

Patterns cannot find "Ana García" or "Valladolid", so this recognizer asks
Presidio's spaCy-based recognizer. It needs ``pip install 'chatkeep[ner]'`` plus
a spaCy model (``python -m spacy download en_core_web_lg``). Nothing here is
imported until a :class:`PresidioRecognizer` is created, and creating one
without those fails at once with a :class:`~chatkeep.errors.PrivacyError`
rather than at the first message.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from chatkeep.errors import PrivacyError
from chatkeep.privacy.base import Span

__all__ = ["NER_ENTITY_TYPES", "AnalyzerLike", "PresidioRecognizer"]

#: Entity types the NER backend reports by default.
NER_ENTITY_TYPES: tuple[str, ...] = ("PERSON", "LOCATION")
_INSTALL_HINT = "pip install 'chatkeep[ner]'"


class AnalyzerLike(Protocol):
    """The part of ``presidio_analyzer.AnalyzerEngine`` this recognizer uses."""

    def analyze(
        self, text: str, language: str, entities: list[str] | None = ..., **kwargs: Any
    ) -> list[Any]:
        """Return results with ``start``, ``end``, ``entity_type`` and ``score``."""
        ...


class PresidioRecognizer:
    """Finds PERSON and LOCATION with Presidio + spaCy.

    ``language`` and ``model`` pick the spaCy pipeline (e.g. ``"es"`` /
    ``"es_core_news_lg"``). Results under ``score_threshold`` are dropped.
    ``analyzer`` injects a ready engine (shared between sessions, or a test
    double) and skips loading. Loading a model takes seconds and hundreds of MB:
    create one recognizer per process and share it.
    """

    def __init__(
        self,
        entity_types: Sequence[str] = NER_ENTITY_TYPES,
        *,
        language: str = "en",
        model: str = "en_core_web_lg",
        score_threshold: float = 0.5,
        analyzer: AnalyzerLike | None = None,
    ) -> None:
        self.entity_types: tuple[str, ...] = tuple(entity_types)
        self._language = language
        self._threshold = score_threshold
        self._analyzer = analyzer if analyzer is not None else _load_analyzer(language, model)

    def find(self, text: str) -> Iterator[Span]:
        """Yield names and places Presidio finds in ``text`` above the threshold."""
        if not text.strip():
            return
        results = self._analyzer.analyze(
            text=text,
            language=self._language,
            entities=list(self.entity_types),
            score_threshold=self._threshold,
        )
        for result in results:
            start, end, entity_type = int(result.start), int(result.end), str(result.entity_type)
            if entity_type in self.entity_types and result.score >= self._threshold:
                yield Span(start, end, entity_type, text[start:end], float(result.score))


def _load_analyzer(language: str, model: str) -> AnalyzerLike:
    """Build a Presidio engine on ``model``, or raise PrivacyError saying what is missing."""
    try:
        presidio = importlib.import_module("presidio_analyzer")
        nlp_engine = importlib.import_module("presidio_analyzer.nlp_engine")
        spacy_util = importlib.import_module("spacy.util")
    except ImportError as exc:
        raise PrivacyError(
            f"name/place detection needs presidio-analyzer and spaCy: {_INSTALL_HINT} "
            f"({exc.name or exc} is missing)"
        ) from exc
    # Presidio would try to download a missing model at runtime; refuse instead.
    if not spacy_util.is_package(model):
        raise PrivacyError(
            f"spaCy model {model!r} is not installed: python -m spacy download {model}"
        )
    try:
        provider = nlp_engine.NlpEngineProvider(
            nlp_configuration={
                "nlp_engine_name": "spacy",
                "models": [{"lang_code": language, "model_name": model}],
            }
        )
        engine: AnalyzerLike = presidio.AnalyzerEngine(
            nlp_engine=provider.create_engine(), supported_languages=[language]
        )
    except Exception as exc:  # Presidio/spaCy raise many types; report them all the same way
        raise PrivacyError(f"could not load the NER backend ({model}): {exc}") from exc
    return engine
