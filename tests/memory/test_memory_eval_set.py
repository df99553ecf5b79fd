"""The labelled conversation set: the distiller's bookkeeping invariants (bench/memory_eval.py)."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench" / "memory_eval.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memory_eval", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("memory_eval", module)
    spec.loader.exec_module(module)
    return module


def test_the_set_is_what_the_issue_asks_for() -> None:
    conversations = _bench().load()
    assert len(conversations) >= 20
    actions = Counter(f["action"] for c in conversations for f in c["facts"])
    assert actions["add"] and actions["duplicate_of"] and actions["supersedes"]
    assert any(c["actor"] is None for c in conversations)
    assert any(c["subject"] is None for c in conversations)
    assert len({str(c["tenant"]) for c in conversations}) > 1
    assert any(m.get("tool_calls") for c in conversations for m in c["messages"])


def test_bookkeeping_invariants_on_the_labelled_set(db_url: str) -> None:
    bench = _bench()
    report = bench.run(db_url)
    for row in report.rows:  # every conversation writes exactly its non-duplicate facts
        assert (row.id, row.written) == (row.id, row.expected_written)
    labelled = [f for c in bench.load() for f in c["facts"]]
    assert sum(r.duplicates for r in report.rows) == sum(
        f["action"] == "duplicate_of" for f in labelled)
    assert sum(r.superseded for r in report.rows) == sum(
        f["action"] == "supersedes" for f in labelled)
    assert report.live == report.written - sum(r.superseded for r in report.rows)
    assert report.rerun_written == report.rerun_model_calls == 0
    assert report.redistil_written == 0
    assert report.redistil_duplicates == len(labelled)
    assert report.leaks == 0 and report.pairs_checked == len(report.rows) * report.stored
    assert report.superseded_recalled == 0
    assert report.own_found == report.own_total > 0
    assert report.retrieval_misses == []
