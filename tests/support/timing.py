"""Timing for tests and benchmarks that compare costs (ratios, never absolute limits)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable


def best_time(run: Callable[[], object], repeats: int = 3, *,
              without_gc: bool = False) -> float:
    """Seconds of the fastest of ``repeats`` calls of ``run``: the least noisy estimate of
    what it costs. ``without_gc``: collect first and keep the garbage collector off while
    timing (its pauses are noise, not the cost being measured)."""
    best = float("inf")
    if without_gc:
        gc.collect()
        gc.disable()
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
    finally:
        if without_gc:
            gc.enable()
    return best
