"""A sweep's jobs per hour: one job at a time against several at once (Hydra's joblib launcher).

The same 4-job sweep (``seed=0,1,2,3`` of a DP-SWD run of 1,000 steps on the embedded 8x8 digits, one thread
per job, a small evaluation, ``logger=local``) runs through ``hydra/launcher=joblib`` with
``hydra.launcher.n_jobs=1`` (one after another, in the launching process) and with ``n_jobs=N`` (N at a time,
each job in a worker process with its own run folder and lock).  The figure is the whole command's wall time
(interpreter, imports, every job's set-up, training and evaluation) as jobs per hour, and the ratio of the two;
every job must leave its results.json.  Beside it, the cores the sweep got: the CPU seconds of the command
and its workers over its wall time (on a shared machine a niced sweep may get less than one core, and then
no ``n_jobs`` can help).  Each process pays its start-up once (imports and first-use caches,
seconds on 2 cores), so the jobs are long beside it: a sweep of 1-second jobs would time start-up only.
CPU: N = 2.  CUDA (``--device cuda``): N = 4 jobs on the one device, ``trainer.device=cuda``.  The runs are of
the embedded digits, a public benchmark: their times are reported (a private run's never are).

``dpgen bench --only sweep --out docs/benchmarks.md`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..paths import ROOT
from .distributed import failure_line

SEEDS = (0, 1, 2, 3)
PRESET = "digits_dpswd"
# a short job (~10 s of training on one core): 1,000 private steps, 1,000 samples scored by logistic regression,
# no FID and no grids
STEPS = 1000
SHORT = [f"trainer.max_steps={STEPS}", "evaluator.n_synthetic=1000", "evaluator.classifiers=[logreg]",
         "evaluator.fid.enabled=false", "evaluator.class_grids=false"]


def command(n_jobs: int, device: str, sweep_dir: Path) -> list[str]:
    """``python train.py -m ...``: the 4-job sweep, ``n_jobs`` at a time."""
    return [sys.executable, "train.py", "-m", f"experiment={PRESET}", f"seed={','.join(map(str, SEEDS))}",
            "hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}", "logger=local", "trainer.progress=false",
            "trainer.threads=1", f"trainer.device={device}", *SHORT, f"hydra.sweep.dir={sweep_dir}",
            "hydra.sweep.subdir=${hydra.job.num}"]


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished (waited-for) children and their descendants."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def jobs_per_hour(n_jobs: int, device: str, sweep_dir: Path, timeout_s: int = 1800) -> tuple[float, float]:
    """Run the sweep: (its jobs per hour from the whole command's wall time, the cores it got: CPU seconds / wall
    seconds).  A failed or incomplete sweep raises."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    r = subprocess.run(command(n_jobs, device, sweep_dir), cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=timeout_s)
    wall, cpu = time.perf_counter() - t0, _children_cpu_s() - cpu0
    if r.returncode != 0:
        raise RuntimeError(failure_line(r))
    done = len(list(sweep_dir.glob("*/results.json")))
    if done != len(SEEDS):
        raise RuntimeError(f"{done} of {len(SEEDS)} jobs left a results.json")
    return len(SEEDS) * 3600.0 / wall, cpu / wall


def rows(device: torch.device) -> list[tuple[str, str]]:
    dev = device.type  # the sweep's trainer.device
    many = 2 if dev == "cpu" else 4
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPU threads at the start"
    name = (f"{len(SEEDS)}-job sweep (`{PRESET}`, {STEPS} steps, `trainer.threads=1`) on {dev}: jobs per hour, "
            f"`hydra.launcher.n_jobs=1` vs `{many}`")
    with tempfile.TemporaryDirectory() as d:
        try:
            one, cores_one = jobs_per_hour(1, dev, Path(d) / "n1")
            several, cores_several = jobs_per_hour(many, dev, Path(d) / f"n{many}")
        except (RuntimeError, OSError, subprocess.SubprocessError) as err:
            return [(name, f"not measured: {err}")]
    return [(name, f"{one:.0f} vs {several:.0f} jobs/h: ×{several / one:.2f}; the sweep got {cores_one:.2f} vs "
                   f"{cores_several:.2f} cores (CPU / wall) (whole command, once each; {load})")]


if __name__ == "__main__":
    for a, b in rows(torch.device(sys.argv[1] if len(sys.argv) > 1 else "cpu")):
        print(f"| {a} | {b} |")
