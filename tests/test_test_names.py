"""Every test module has a name of its own: pytest imports test modules by their basename
(no packages under tests/), so two ``test_migration.py`` in two folders stop the whole
collection, and a reader looking for a module's tests finds one file by its name."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_two_test_modules_share_a_basename() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
