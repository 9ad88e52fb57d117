"""One run on 1 vs N processes: steps per second of the same command, as a ratio measured in one bench run.

For each private family at the MNIST presets' sizes (the embedded digits beside), the same ``train.py`` command
(``trainer.max_steps`` private steps, no evaluation) runs as one process and through
``torchrun --standalone --nproc-per-node N`` (the ranks share the global batch: one run).  Steps/s = the
steady steps / their wall time (from the end of the first step, which holds the lazy state and the budget's one
accountant evaluation, to the end of the last; the final checkpoint is outside), read from the run folder's
``results.json`` and ``private_timings.json`` (the runs are of public benchmark data).  The commands alternate (1, N, 1, N, ...),
``REPEATS`` times each; the figure is the median.  Beside it, the whole run as a user's wall clock sees it: the
seconds of the whole command (start-up, the processes' launch and group, set-up, every step, the final
checkpoint), median of the same runs, so a row whose steps gain but whose run does not says so.  CPU: N = 2 (gloo).  GPU: every device count from
1 to the visible ones (NCCL), each as a ratio to one device.

The latent families (DPSWflow-r, DPSWgen) train their PUBLIC autoencoder before the first private step (5,000
steps in the MNIST presets: minutes per run); their rows shorten that public set-up only (``LATENT_SETUP``: a few
autoencoder steps, no cache written).  The private step works in the frozen latent space, so its cost (release,
directions, particle flow or generator update) is that of the preset; nothing that a private step computes is
changed.

``dpgen bench --only distributed --out docs/benchmarks.md`` (a few minutes on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ..paths import ROOT

REPEATS = 3
DA = ["model.start_align=0"]  # domain adaptation: every timed step aligns (a private step)
# latent families: the public autoencoder's pre-training shortened (it runs before the timed loop; the private step
# works in its latent space at the preset's sizes whatever its quality); no cache of it written
LATENT_SETUP = ["model.ae_steps=20", "model.ae_batch_size=50", "model.autoencoder_cache=null"]
# (family, preset, private steps, extra overrides, target ratio on 2 CPU processes): the MNIST presets' sizes, the
# embedded digits beside (the MNIST data come from DPGEN_DATA_ROOT)
CASES = (
    ("DP-SGD classifier", "mnist_dpsgd", 20, ["accountant.data_dependent_reports=false"], 1.8),
    ("DP-SGD classifier", "digits_dpsgd", 60, [], None),
    ("DP-SWD generator", "mnist_dpswd", 20, [], 1.8),
    ("DP-SWD generator", "digits_dpswd", 60, [], None),
    ("DP-SWD adapter", "mnist_usps_dpswd", 20, DA, 1.8),
    ("DP-SWD adapter", "digits_shift_dpswd", 60, DA, None),
    ("DP-DANN", "mnist_usps_dp_dann", 20, DA, 1.8),
    ("DP-DANN", "digits_shift_dp_dann", 60, DA, None),
    ("DPSWflow-r", "mnist_dpswflow_r", 20, LATENT_SETUP, 1.8),
    ("DPSWflow-r", "digits_dpswflow_r", 60, LATENT_SETUP, None),
    ("DPSWgen", "mnist_dpswgen", 20, LATENT_SETUP, 1.8),
    ("DP-Sinkhorn", "mnist_dpsinkhorn", 10, [], 1.5),
    ("DP-Sinkhorn", "digits_dpsinkhorn", 30, [], None),
)


def command(preset: str, steps: int, device: str, nproc: int, run_dir: Path, extra: list[str] = ()) -> list[str]:
    """``python train.py ...`` for one process, ``torchrun --standalone --nproc-per-node N train.py ...`` for N."""
    launcher = [sys.executable] if nproc == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                                    "--nproc-per-node", str(nproc)]
    return [*launcher, "train.py", f"experiment={preset}", "logger=local", "evaluator=none", "trainer.progress=false",
            f"trainer.device={device}", f"trainer.max_steps={steps}", "trainer.checkpoint_every=1000000",
            f"hydra.run.dir={run_dir}", *extra]


WHOLE_S: dict[Path, float] = {}  # run folder -> wall seconds of its whole command (filled by steps_per_s)


def steps_per_s(cmd: list[str], run_dir: Path, timeout_s: int = 600) -> float:
    """Run ``cmd``; steady steps / their wall seconds in its run folder (the whole command's wall seconds go to
    :data:`WHOLE_S`).  A failure raises with its last lines."""
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    WHOLE_S[run_dir] = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(failure_line(r))
    res = json.loads((run_dir / "results.json").read_text())
    timings = json.loads((run_dir / "private_timings.json").read_text())
    return (res["train"]["train_steps"] - 1) / timings["train.steady_time_s"]  # a fresh run: all steps but the first


def failure_line(r: subprocess.CompletedProcess) -> str:
    """Why a finished ``train.py`` / torchrun process failed, in one line: its ``error:`` line, else the last
    line naming an exception (torchrun's own report around it says only which rank failed)."""
    lines = [ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
    picked = ([ln for ln in lines if ln.startswith("error:")][:1] or
              [ln for ln in lines if re.match(r"^[\w.]*(Error|Exception)\b", ln)][-1:] or lines[-1:] or [""])
    # torchrun's report of a rank that died without a word: which rank, and its exit code (a signal when negative)
    died = [ln for ln in lines if re.match(r"^(rank|exitcode)\s*:", ln)][:2]
    extra = f" ({'; '.join(' '.join(d.split()) for d in died)})" if died and "ChildFailedError" in picked[0] else ""
    return f"exit {r.returncode}: {picked[0][:300]}{extra}"


def compare(preset: str, steps: int, device: str, nproc: int, tmp: Path, extra: list[str] = ()) -> tuple[float, float]:
    """Median steps/s of (1 process, ``nproc`` processes), alternating."""
    return compare_runs(preset, steps, device, nproc, tmp, extra)[:2]


def compare_runs(preset: str, steps: int, device: str, nproc: int, tmp: Path,
                 extra: list[str] = ()) -> tuple[float, float, float | None, float | None]:
    """Median steady steps/s and median whole-command wall seconds of (1 process, ``nproc`` processes), alternating
    (the seconds None when not timed)."""
    rates: dict[int, list[float]] = {1: [], nproc: []}
    whole: dict[int, list[float]] = {1: [], nproc: []}
    for i in range(REPEATS):
        for n in (1, nproc):
            run_dir = tmp / f"{preset}-{device}-n{n}-{i}"
            rates[n].append(steps_per_s(command(preset, steps, device, n, run_dir, extra), run_dir))
            if run_dir in WHOLE_S:
                whole[n].append(WHOLE_S.pop(run_dir))
    seconds = [statistics.median(whole[n]) if whole[n] else None for n in (1, nproc)]
    return statistics.median(rates[1]), statistics.median(rates[nproc]), *seconds


def collective_latency(device: str, nproc: int) -> dict:
    """The JSON line of :mod:`dpgen.bench.collectives` on ``nproc`` processes (what one collective costs here)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), "-m",
           "dpgen.bench.collectives", device]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(failure_line(r))
    return json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])


def latency_row(device: str, nproc: int, backend: str) -> tuple[str, str]:
    """One row: the median µs of each collective a private step makes, between ``nproc`` processes."""
    name = f"one collective between {nproc} processes on {device} ({backend}; `python -m dpgen.bench.collectives`)"
    try:
        got = collective_latency(device, nproc)
    except (RuntimeError, OSError, KeyError, ValueError, IndexError, subprocess.SubprocessError) as err:
        return name, f"not measured: {err}"
    return name, "; ".join(f"{k}: {v:,.0f} µs" for k, v in got["us"].items()) + " (median of 10 blocks of 30)"


def rows(device: torch.device, only: str | None = None) -> list[tuple[str, str]]:
    """One row per case (``only``: the cases whose preset contains it) and device count."""
    if device.type == "cuda":
        counts, dev, backend = list(range(2, torch.cuda.device_count() + 1)), "cuda", "NCCL"
    else:
        counts, dev, backend = [2], "cpu", "gloo"
    out = []
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPU threads at the start"
    if not counts:
        return [(f"1 vs N processes on {dev}", f"not measured: {torch.cuda.device_count()} CUDA device visible, "
                 "two or more needed")]
    out += [latency_row(dev, n, backend) for n in counts]
    with tempfile.TemporaryDirectory() as d:
        for label, preset, steps, extra, target in CASES:
            if only and only not in preset:
                continue
            for n in counts:
                name = (f"{label} (`{preset}`, {steps} steps), {dev}: 1 vs {n} "
                        f"{'processes' if dev == 'cpu' else 'devices'} ({backend}, `torchrun --nproc-per-node {n}`)")
                try:
                    one, many, one_s, many_s = compare_runs(preset, steps, dev, n, Path(d), extra)
                except (RuntimeError, OSError, KeyError, subprocess.SubprocessError) as err:
                    out.append((name, f"not measured: {err}"))
                    continue
                goal = f"; target ×{target}" if target and dev == "cpu" and n == 2 else ""
                # the whole command as a user's wall clock sees it: start-up, launch, set-up, steps, checkpoint
                whole = (f"; whole run {one_s:.1f} vs {many_s:.1f} s: ×{one_s / many_s:.2f}" if one_s and many_s else "")
                out.append((name, f"{one:.1f} vs {many:.1f} steps/s: ×{many / one:.2f} (median of {REPEATS}, "
                                  f"alternating, steady steps{goal}; {load}){whole}"))
    return out


if __name__ == "__main__":
    for a, b in rows(torch.device("cpu"), sys.argv[1] if len(sys.argv) > 1 else None):
        print(f"| {a} | {b} |")
