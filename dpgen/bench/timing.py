"""How the benchmarks time a call and write a time: repeated runs after a warm-up on a chosen clock
(CPU time by default; wall clock where a GPU or another process takes part)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def times(fn: Callable[[], object], repeats: int = 5, warmup: int = 1, clock: Callable[[], float] = time.process_time,
          clear: Callable[[], None] | None = None) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn`` on ``clock``, after ``warmup`` untimed calls;
    ``clear()`` runs before every call (e.g. a cache emptied, so each call starts cold)."""
    out = []
    for i in range(warmup + repeats):
        if clear is not None:
            clear()
        t = clock()
        fn()
        if i >= warmup:
            out.append(clock() - t)
    return out


def wall_median(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn`` (``fn`` synchronises its GPU work itself)."""
    return statistics.median(times(fn, repeats, warmup, clock=time.perf_counter))


def ms_spread(ts: list[float], digits: int = 1) -> str:
    """``12.3 ms (spread ×1.05)``: the median in milliseconds and max / min of the runs."""
    return f"{1e3 * statistics.median(ts):.{digits}f} ms (spread ×{max(ts) / max(min(ts), 1e-9):.2f})"
