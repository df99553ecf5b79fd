"""No input can stall redaction: every recognizer, and the detector, runs in linear time.

Redaction runs on every outgoing text (history, summarizer, distiller), so one
message that makes a pattern backtrack quadratically would slow every turn of
its session (the old IPv6 pattern took 17 s on ``"1:" * 25000 + "g"``). Each
family repeats a fragment that nearly matches some pattern, the shapes
that make a backtracking regex engine retry. Each family is timed at 10 KB and
at 100 KB in the same run (the families are
:data:`~chatkeep.privacy.evaluation.ADVERSARIAL_FAMILIES`, which ``bench/pii.py``
times too) and only the ratio is asserted: linear is about 10,
quadratic about 100; the bound of 30 leaves room for noise without letting a
quadratic case through. No absolute time is asserted (machines differ).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from chatkeep.privacy.detector import PiiDetector, default_recognizers
from chatkeep.privacy.evaluation import ADVERSARIAL_FAMILIES
from support.timing import best_time

SMALL = 10_000
LARGE = 100_000
MAX_RATIO = 30.0
REPEATS = 2
#: Shortest measurement (seconds): cheaper targets are run in a loop until it is reached.
MIN_MEASUREMENT = 0.002
#: A ratio over MAX_RATIO is measured again this many times (a busy machine can make one
#: measurement slow; a quadratic target is slow every time) and the lowest is kept.
RETRIES = 3


FAMILIES = ADVERSARIAL_FAMILIES

_RECOGNIZERS = default_recognizers()
_DETECTOR = PiiDetector()
TARGETS: dict[str, Callable[[str], object]] = {
    **{type(r).__name__: (lambda text, r=r: list(r.find(text))) for r in _RECOGNIZERS},
    "PiiDetector": _DETECTOR.detect,
}


def growth(target: Callable[[str], object], small: str, large: str) -> float:
    """Time on ``large`` over time on ``small``, each the best of a few interleaved runs.

    The small input runs ``len(large) // len(small)`` times per measurement, each
    time on its own copy, so both measurements do the same work if the target is
    linear and read as much memory (a 10 KB text read ten times stays in the CPU
    cache, ten copies do not). A target that takes microseconds is run several
    times per measurement, so that timer resolution and interrupts do not decide
    the ratio.
    """
    copies = [small[:1] + small[1:] for _ in range(len(large) // len(small))]
    target(small)  # warm caches (compiled patterns, phone metadata)
    once = best_time(lambda: target(large), 1)
    loops = max(1, min(1000, int(MIN_MEASUREMENT / max(once, 1e-7))))

    def run_large() -> None:
        for _ in range(loops):
            target(large)

    def run_small() -> None:
        for _ in range(loops):
            for copy in copies:
                target(copy)

    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        small_time = large_time = float("inf")
        for _ in range(REPEATS):
            small_time = min(small_time, best_time(run_small, 1))
            large_time = min(large_time, best_time(run_large, 1))
    finally:
        if gc_was_enabled:
            gc.enable()
    return large_time / max(small_time / len(copies), 1e-12)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_time_grows_linearly(family: str) -> None:
    make = FAMILIES[family]
    small, large = make(SMALL), make(LARGE)
    assert len(small) == SMALL and len(large) == LARGE
    ratios: dict[str, float] = {}
    for name, target in TARGETS.items():
        ratios[name] = growth(target, small, large)
        for _ in range(RETRIES):
            if ratios[name] <= MAX_RATIO:
                break
            ratios[name] = min(ratios[name], growth(target, small, large))
    slow = {name: round(ratio, 1) for name, ratio in ratios.items() if ratio > MAX_RATIO}
    assert not slow, f"{family}: time grows faster than linearly (x10 input): {slow}"
