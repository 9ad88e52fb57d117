"""The private timings file of a run folder (``private_timings.json``).

Wall-clock timings of a private run (run time, training time, steps/s) depend on the private
(Poisson) batch sizes: an un-noised function of private data.  They never go to ``results.json``,
``metrics.csv`` or W&B; ``private_timings.json`` holds them for the operator only (keep it with the
run's checkpoints, never publish it).  Light module (no torch): reporting tools import it.
"""

from __future__ import annotations

import json
from pathlib import Path

PRIVATE_TIMINGS = "private_timings.json"
LEGACY_RUNTIME_FILE = "runtime.json"  # run folders written before the timings became private
PRIVATE_NOTE = ("private: wall-clock timings depend on the private (Poisson) batch sizes; keep this file with "
                "the run's checkpoints, never publish it")


def read_private_timings(run_dir: str | Path) -> dict:
    """The operator's timings of a run folder (``private_timings.json``; ``runtime_s`` of an older
    folder's results.json); {} when there are none."""
    path = Path(run_dir) / PRIVATE_TIMINGS
    if path.is_file():
        return json.loads(path.read_text())
    old = Path(run_dir) / "results.json"
    if old.is_file():
        res = json.loads(old.read_text())
        return {k: res[k] for k in ("runtime_s", "runtime_segments_s") if k in res}
    return {}


def load_results(run_dir: str | Path) -> dict:
    """``results.json`` of a run folder plus its private ``runtime_s`` — the operator's own view, for the
    reproduction tools that run the benchmarks themselves (their run times are of public benchmarks)."""
    res = json.loads((Path(run_dir) / "results.json").read_text())
    timings = read_private_timings(run_dir)
    if "runtime_s" in timings:
        res["runtime_s"] = timings["runtime_s"]
    return res
