"""The private timings file of a run folder (``private_timings.json``).

Wall-clock timings of a private run (run time, training time, evaluation time, steps/s) depend on the
private (Poisson) batch sizes: an un-noised function of private data.  They never go to ``results.json``,
``metrics.csv``, W&B or the console; ``private_timings.json`` holds them for the operator only (mode
0600: keep it with the run's checkpoints, never publish it).  Light module (no torch): reporting tools
import it.
"""

from __future__ import annotations

import json
import os
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


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by its owner only (mode 0600), like the checkpoints."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)  # an older tmp file keeps its mode through O_CREAT
    os.replace(tmp, path)


def add_private_timings(run_dir: str | Path, timings: dict) -> None:
    """Merge ``timings`` into the run folder's ``private_timings.json`` (e.g. a later ``dpgen evaluate``)."""
    path = Path(run_dir) / PRIVATE_TIMINGS
    old = json.loads(path.read_text()) if path.is_file() else {"note": PRIVATE_NOTE}
    write_private(path, json.dumps({**old, **timings}, indent=2))
