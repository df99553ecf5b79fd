"""Accuracy targets on the labelled sets in tests/data/pii (pattern recognizers only)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from chatkeep.privacy import PATTERN_ENTITY_TYPES
from chatkeep.privacy.detector import PiiDetector
from chatkeep.privacy.evaluation import load_labelled, score

DATA = Path(__file__).resolve().parents[1] / "data" / "pii"
PATTERN_TYPES = PATTERN_ENTITY_TYPES
MIN_PRECISION = 0.98
MIN_RECALL = 0.97


@pytest.mark.parametrize("name", ["eval.jsonl", "holdout.jsonl"])
def test_labels_are_consistent(name: str) -> None:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 300
    locales = set()
    near_misses = 0
    for line in lines:
        record = json.loads(line)
        locales.add(record["locale"])
        near_misses += record["kind"] == "near_miss"
        for entity in record["entities"]:
            assert record["text"][entity["start"] : entity["end"]] == entity["value"]
            assert entity["type"] in PATTERN_TYPES
    assert {"en_US", "en_GB", "es_ES", "de_DE", "fr_FR"} <= locales
    assert near_misses >= 100


@pytest.mark.parametrize("name", ["eval.jsonl", "holdout.jsonl"])
def test_precision_and_recall_targets(name: str) -> None:
    scores = score(PiiDetector(), load_labelled(DATA / name), PATTERN_TYPES)
    assert set(scores) == set(PATTERN_TYPES)
    failures = {
        entity_type: (round(s.precision, 3), round(s.recall, 3), s.support)
        for entity_type, s in scores.items()
        if s.precision < MIN_PRECISION or s.recall < MIN_RECALL or s.support < 25
    }
    assert not failures, failures


REALISTIC = ["realistic.jsonl", "realistic_holdout.jsonl"]
REALISTIC_TYPES = (*PATTERN_TYPES, "PERSON")


@pytest.mark.parametrize("name", REALISTIC)
def test_realistic_labels_are_consistent(name: str) -> None:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    assert len(lines) >= 150
    locales, kinds, contexts = set(), {"pii": 0, "near_miss": 0}, 0
    for line in lines:
        record = json.loads(line)
        locales.add(record["locale"])
        kinds[record["kind"]] += 1
        contexts += bool(record.get("context"))
        for entity in record["entities"]:
            assert record["text"][entity["start"] : entity["end"]] == entity["value"]
            assert entity["type"] in REALISTIC_TYPES
    assert {"en_US", "en_GB", "es_ES", "de_DE", "fr_FR"} <= locales
    assert kinds["near_miss"] >= 40 and contexts >= 8


@pytest.mark.parametrize("name", REALISTIC)
def test_realistic_sets_are_what_their_marked_sources_give(name: str) -> None:
    # The JSONL is generated from the hand-written *.marked.txt beside it; they must agree.
    spec = importlib.util.spec_from_file_location(
        "generate_pii_set", DATA.parents[2] / "scripts" / "generate_pii_set.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    source = DATA / name.replace(".jsonl", ".marked.txt")
    prefix = "rh" if "holdout" in name else "r"
    expected = [json.dumps(r, ensure_ascii=False) for r in module.read_marked(source, prefix)]
    assert (DATA / name).read_text(encoding="utf-8").splitlines() == expected


@pytest.mark.parametrize("name", REALISTIC)
def test_realistic_precision_and_recall_targets(name: str) -> None:
    scores = score(PiiDetector(), load_labelled(DATA / name), PATTERN_TYPES)
    assert set(scores) == set(PATTERN_TYPES)
    failures = {
        entity_type: (round(s.precision, 3), round(s.recall, 3), s.support)
        for entity_type, s in scores.items()
        if s.precision < MIN_PRECISION or s.recall < MIN_RECALL or s.support < 4
    }
    assert not failures, failures
