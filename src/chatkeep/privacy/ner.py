"""Optional NER backend for names and places: Presidio on top of a spaCy pipeline.

Patterns cannot find "Ana García" or "Valladolid" without a cue, so this
recognizer asks Presidio's spaCy-based recognizer. It needs
``pip install 'chatkeep[ner]'`` plus a spaCy pipeline: an installed model package
(``python -m spacy download en_core_web_lg``), the directory of one saved with
``nlp.to_disk`` (for hosts that cannot download models at run time), or a
``spacy.Language`` object already in memory. Nothing here is imported until a
:class:`PresidioRecognizer` is created, and creating one without those fails at
once with a :class:`~chatkeep.errors.PrivacyError` rather than at the first
message; Presidio is never allowed to download a model itself.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
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

    ``language`` and ``model`` pick the spaCy pipeline: a package name (e.g.
    ``"es"`` / ``"es_core_news_lg"``) or the path of a pipeline directory saved
    with ``nlp.to_disk``. ``nlp`` passes a loaded ``spacy.Language`` instead (built
    in code, shared, or made for a test) and ``analyzer`` a ready Presidio engine
    (or a test double); either skips loading. Pipeline labels are mapped by
    Presidio (``PERSON``/``PER`` to PERSON, ``GPE``/``LOC`` to LOCATION). Results
    under ``score_threshold`` are dropped. Loading a model takes seconds and
    hundreds of MB: create one recognizer per process and share it.
    """

    def __init__(
        self,
        entity_types: Sequence[str] = NER_ENTITY_TYPES,
        *,
        language: str = "en",
        model: str | os.PathLike[str] = "en_core_web_lg",
        score_threshold: float = 0.5,
        analyzer: AnalyzerLike | None = None,
        nlp: Any | None = None,
    ) -> None:
        self.entity_types: tuple[str, ...] = tuple(entity_types)
        self._language = language
        self._threshold = score_threshold
        if analyzer is not None:
            self._analyzer = analyzer
        else:
            self._analyzer = _load_analyzer(language, model, nlp)

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


def _load_analyzer(language: str, model: str | os.PathLike[str], nlp: Any | None) -> AnalyzerLike:
    """Build a Presidio engine on ``nlp`` or ``model``; PrivacyError says what is missing."""
    try:
        presidio = importlib.import_module("presidio_analyzer")
        nlp_engine = importlib.import_module("presidio_analyzer.nlp_engine")
        spacy_util = importlib.import_module("spacy.util")
    except ImportError as exc:
        raise PrivacyError(
            f"name/place detection needs presidio-analyzer and spaCy: {_INSTALL_HINT} "
            f"({exc.name or exc} is missing)"
        ) from exc
    model_name = os.fspath(model)
    if nlp is None:
        _check_model(model_name, spacy_util)
    try:
        engine = nlp_engine.SpacyNlpEngine(
            models=[{"lang_code": language, "model_name": model_name}]
        )
        if nlp is not None:
            # A loaded pipeline: give it to the engine so that it never loads one itself.
            engine.nlp = {language: nlp}
        analyzer: AnalyzerLike = presidio.AnalyzerEngine(
            nlp_engine=engine, supported_languages=[language]
        )
    except Exception as exc:  # Presidio/spaCy raise many types; report them all the same way
        source = "the given spaCy pipeline" if nlp is not None else model_name
        raise PrivacyError(f"could not load the NER backend ({source}): {exc}") from exc
    return analyzer


def _check_model(model: str, spacy_util: Any) -> None:
    """Refuse a model that is neither an installed package nor a pipeline directory.

    Presidio would try to download a missing model at run time; that must never
    happen behind the application's back (and fails on hosts without access).
    """
    if _looks_like_path(model):
        if not (Path(model) / "config.cfg").is_file():
            raise PrivacyError(
                f"no spaCy pipeline at {model!r}: save one there with nlp.to_disk(path)"
            )
    elif not spacy_util.is_package(model):
        raise PrivacyError(
            f"spaCy model {model!r} is not installed: python -m spacy download {model}"
        )


def _looks_like_path(model: str) -> bool:
    return os.sep in model or "/" in model or model.startswith(".") or Path(model).is_dir()
