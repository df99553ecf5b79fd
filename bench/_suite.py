"""Puts the test suite's support package (``tests/support``: scratch PostgreSQL schemas,
the API axis, timing) on the path, so the benchmarks measure on the fixtures the tests
use without shipping them in the wheel."""

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
