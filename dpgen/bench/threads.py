"""`make train` alone and beside a competing CPU-bound process, per `trainer.threads`.

Whole-process wall time of ``python train.py logger=local trainer.progress=false trainer.threads=T``
(the default experiment on the embedded digits), median of ``REPEATS`` runs after one warm-up, once
alone and once while a pure-Python busy loop (one CPU-bound process, the "other job" of a shared
laptop / CI runner) runs beside it.  The target of the issue is contended / alone <= 1.5 for the
default.  Run folders go to a temporary directory (never the repo); the FID extractor cache is the
run's own (``DPGEN_CACHE_DIR``), warmed by the warm-up run.

``dpgen bench --only threads --out docs/benchmarks.md`` (about 5 min on 2 cores).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from ..paths import ROOT

REPEATS = 3
THREADS = ("1", "2")


def _train_wall(threads: str, run_dir: Path, env: dict) -> float:
    cmd = [sys.executable, "train.py", "logger=local", "trainer.progress=false", f"trainer.threads={threads}",
           f"hydra.run.dir={run_dir}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _median_wall(threads: str, tmp: Path, env: dict, tag: str) -> tuple[float, float, float]:
    _train_wall(threads, tmp / f"{tag}-warmup", env)
    walls = [_train_wall(threads, tmp / f"{tag}-{i}", env) for i in range(REPEATS)]
    return statistics.median(walls), min(walls), max(walls)


def section(device) -> str:  # noqa: ARG001 (CPU by construction)
    load = os.getloadavg()[0]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        env.update(DPGEN_CACHE_DIR=str(tmp / "cache"), WANDB_MODE="offline", WANDB_SILENT="true")
        alone = {t: _median_wall(t, tmp, env, f"alone-t{t}") for t in THREADS}
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            busy = {t: _median_wall(t, tmp, env, f"busy-t{t}") for t in THREADS}
        finally:
            hog.kill()
            hog.wait()
    for t in THREADS:
        (a, amin, amax), (b, bmin, bmax) = alone[t], busy[t]
        label = f"`trainer.threads={t}`" + (" (the default)" if t == "1" else " (torch's own default on 2 cores)")
        rows.append(f"| {label} | {a:.1f} s ({amin:.1f}–{amax:.1f}) | {b:.1f} s ({bmin:.1f}–{bmax:.1f}) | ×{b / a:.2f} |")
    return "\n".join([
        "## `make train` alone and beside a CPU-bound process\n",
        textwrap.fill(
        f"`dpgen bench --only threads` (`dpgen/bench/threads.py`): whole-process wall time of "
        f"`python train.py logger=local trainer.progress=false trainer.threads=T`, median (min–max) of {REPEATS} "
        "after a warm-up; competitor: one `python -c \"while True: pass\"`. Target: ratio ≤ 1.5 for the default. "
        f"{os.cpu_count()} CPU threads; load average {load:.1f} when the bench started.", 110,
        break_long_words=False, break_on_hyphens=False) + "\n",
        "| setting | alone | beside one CPU-bound process | ratio |",
        "|---|---|---|---|",
        *rows,
        "",
    ])
