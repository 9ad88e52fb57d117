"""A prepared DPImageBench cell on one GPU (``make gpu-bench CELL=<family>:<dataset>:<eps>``).

    python -m dpgen.reproduce.gpu_bench --cell class_gaussian:mnist:10       # trains, evaluates, stores, renders
    python -m dpgen.reproduce.gpu_bench --dry-run                             # anywhere: what it would run, in what budget

For each cell it trains the family's preset with ``evaluator=dpimagebench`` in the benchmark's numerics
(``evaluator.precision=fp32``: float32 with PyTorch's default TF32 convolutions, NCHW, eager, one classifier after
the other) on ``trainer.device=cuda``, with every protocol size that fits the lease (``--budget-min``, 10 by
default): 60,000 synthetic images, FID of all of them against the 55,000 sensitive training images, and the
benchmark's classifiers in its order (ResNet-110, WRN-40-4, ResNeXt-29) for 50 epochs while the estimate of the
run stays within the budget.  All three fitting is the full protocol; fewer is a shortened protocol, labelled so
by the evaluator.  ``--full`` runs all three whatever the estimate (give it a lease as long as the estimate).  The
run is stopped at the budget (a stopped run stores nothing).  A finished run is stored in the evidence store with
the name of the GPU it ran on, and docs/benchmark.md is re-rendered from the store.  Without ``--cell`` it runs
:data:`FIRST_CELLS`.

The estimate (:func:`part_seconds`) is arithmetic on counts measured on a CPU, not a GPU measurement: the
classifiers' FLOPs per image (``torch.utils.flop_counter`` at 28 px: forward + backward for training, forward for
evaluation) and the operators each training step dispatches (``dpgen.bench.op_count``: about one kernel launch
each), times 55,000 images (215 steps of 256) for 50 epochs, plus each epoch's two evaluations of 5,000 images,
and the FID's Inception forwards; over 20–40 % of the dense TF32 peak of an H100 / H200 (the same compute) and 5–10
µs per eager launch.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from ..paths import ROOT
from . import dpimagebench as page

FIRST_CELLS = ("class_gaussian:mnist:10", "dpswd_warm:mnist:10")
KEYS = {"class_gaussian": 0, "dpswd": 1, "dpswd_warm": 2, "dpsinkhorn": 3, "dpswflow_r": 4, "dpswgen": 5}
BUDGET_MIN = 10.0
ORDER = ("resnet", "wrn", "resnext")  # the benchmark's classifiers, cheapest first (their seeds: seed + index)
# per 28 px image, 2 FLOPs per multiply-add (torch.utils.flop_counter on the CPU): forward + backward (training)
# and forward (evaluation)
TRAIN_GFLOP = {"resnet": 1.16, "wrn": 5.96, "resnext": 53.87}
EVAL_GFLOP = {"resnet": 0.39, "wrn": 1.99, "resnext": 8.25}
# operators one training step (forward, loss, backward, Adam, EMA) and one evaluation batch dispatch
# (dpgen.bench.op_count on the CPU): about one kernel launch each in eager mode
STEP_KERNELS = {"resnet": 1689, "wrn": 687, "resnext": 477}
INCEPTION_GFLOP = 11.5  # one forward at 299 px
TF32_TFLOPS = 494.7  # dense TF32 peak of an H100 SXM (an H200: the same compute)
UTILISATION = (0.4, 0.2)  # assumed share of that peak: optimistic, pessimistic
LAUNCH_US = (5.0, 10.0)  # assumed seconds per eager launch (x 1e-6): optimistic, pessimistic
STEPS = -(-55_000 // 256) * 50  # the classifiers' optimiser steps over 50 epochs
SET_UP_S = (60.0, 180.0)  # start-up, the preset's training (class-Gaussian: one release), 60,000 samples


def parse_cell(text: str) -> tuple[page.Family, str, float]:
    """``class_gaussian:mnist:10`` -> (family, dataset, ε); ValueError naming the choices."""
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in KEYS or parts[1] not in page.DATASETS:
        raise ValueError(f"CELL={text!r}: write <family>:<dataset>:<eps> with family one of {sorted(KEYS)}, dataset "
                         f"one of {sorted(page.DATASETS)}, eps one of {[f'{e:g}' for e in page.EPSILONS]}")
    eps = float(parts[2])
    if eps not in page.EPSILONS:
        raise ValueError(f"CELL={text!r}: eps must be one of {[f'{e:g}' for e in page.EPSILONS]} (the page's columns)")
    return page.FAMILIES[KEYS[parts[0]]], parts[1], eps


def command(family: page.Family, dataset: str, eps: float, run_dir: Path,
            classifiers: tuple[str, ...] = ORDER) -> list[str]:
    """The cell's command on the GPU in the benchmark's numerics, with ``classifiers`` (all three: the full
    protocol), into ``run_dir``."""
    cmd = family.command(dataset, eps).split()[2:]  # after "python train.py"
    subset = [] if tuple(classifiers) == ORDER else [f"evaluator.classifiers=[{','.join(classifiers)}]"]
    return [*cmd, *subset, "evaluator.precision=fp32", "trainer.device=cuda", "evaluator.device=cuda", "logger=local",
            "trainer.progress=false", f"hydra.run.dir={run_dir}"]


def part_seconds(part: str, optimistic: bool) -> float:
    """Estimated seconds of one part of a cell (a classifier's 50 epochs with its evaluations, ``fid``, or
    ``set-up``) on one H100 / H200 in float32: its FLOPs over the assumed utilisation and its launches."""
    i = 0 if optimistic else 1
    if part == "set-up":
        return SET_UP_S[i]
    if part == "fid":
        return INCEPTION_GFLOP * (60_000 + 55_000) * 1e9 / (UTILISATION[i] * TF32_TFLOPS * 1e12)
    flop = (TRAIN_GFLOP[part] * 55_000 * 50 + EVAL_GFLOP[part] * (10_000 * 50 + 20_000)) * 1e9
    compute = flop / (UTILISATION[i] * TF32_TFLOPS * 1e12)
    launches = STEP_KERNELS[part] * STEPS * LAUNCH_US[i] * 1e-6
    # optimistic: the launches overlap the compute; pessimistic: they add up
    return max(compute, launches) if optimistic else compute + launches


def size(budget_min: float, full: bool = False) -> tuple[str, ...]:
    """The benchmark's classifiers, in its order, whose pessimistic estimate (with the set-up and the FID) fits
    ``budget_min``; all three with ``full``."""
    if full:
        return ORDER
    used, chosen = part_seconds("set-up", False) + part_seconds("fid", False), []
    for name in ORDER:
        used += part_seconds(name, False)
        if used > budget_min * 60:
            break
        chosen.append(name)
    return tuple(chosen)


def plan(cells: list[str], budget_min: float, full: bool = False) -> list[str]:
    """What ``make gpu-bench`` runs, each part's estimate, and whether it is the full protocol."""
    chosen = size(budget_min, full)
    if not chosen:
        raise ValueError(f"--budget-min {budget_min:g}: not even ResNet-110 fits by the estimate below; give at least "
                         f"{(part_seconds('set-up', False) + part_seconds('fid', False) + part_seconds('resnet', False)) / 60:.0f} min")
    lines = []
    what = ("full protocol" if chosen == ORDER else
            f"shortened protocol: classifiers {', '.join(chosen)} only (ResNeXt-29 does not fit {budget_min:g} min)"
            if len(chosen) == 2 else f"shortened protocol: classifiers {', '.join(chosen)} only")
    for text in cells:
        family, dataset, eps = parse_cell(text)
        cmd = " ".join(command(family, dataset, eps, Path("<out>") / text.replace(":", "_"), chosen))
        lines.append(f"{text}: {family.name}, {page.DATASETS[dataset][0]}, ε = {eps:g}, {what}, the benchmark's "
                     f"numerics (fp32), at most {budget_min:g} min: python train.py {cmd}")
    names = {"set-up": "set-up and the preset's training (assumed)", "fid": "FID (115,000 Inception forwards)",
             "resnet": "ResNet-110", "wrn": "WRN-40-4", "resnext": "ResNeXt-29"}
    parts = ["set-up", "fid", *ORDER]
    lines.append("estimate, not a measurement (counts measured on a CPU; 40–20 % of the dense TF32 peak of an "
                 "H100 / H200, 5–10 µs per launch): " + "; ".join(
                     f"{names[p]} {part_seconds(p, True) / 60:.1f}–{part_seconds(p, False) / 60:.1f} min"
                     + ("" if p in ("set-up", "fid") or p in chosen else " (not run)") for p in parts))
    run_low = sum(part_seconds(p, True) for p in ("set-up", "fid", *chosen))
    run_high = sum(part_seconds(p, False) for p in ("set-up", "fid", *chosen))
    full_high = sum(part_seconds(p, False) for p in parts)
    lines.append(f"this run: {run_low / 60:.0f}–{run_high / 60:.0f} min of the {budget_min:g}-min budget"
                 + ("" if chosen == ORDER else f"; the full protocol: "
                    f"{sum(part_seconds(p, True) for p in parts) / 60:.0f}–{full_high / 60:.0f} min "
                    f"(--full --budget-min {int(full_high / 60) + 1} on a lease that long)"))
    return lines


def run_cell(text: str, out: Path, budget_min: float, full: bool = False) -> tuple[bool, str]:
    import torch

    family, dataset, eps = parse_cell(text)
    run_dir = out / text.replace(":", "_")
    t0 = time.time()
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "train.py"),
                               *command(family, dataset, eps, run_dir, size(budget_min, full))],
                              cwd=ROOT, timeout=budget_min * 60)
    except subprocess.TimeoutExpired:
        return False, f"{text}: stopped at the budget ({budget_min:g} min); nothing stored"
    if proc.returncode != 0:
        return False, f"{text}: the run failed (exit {proc.returncode}); nothing stored"
    written, skipped = page.collect([run_dir], page.BENCH_STORE, None, page.skip_reason)
    for path in written:  # the card that ran it, beside the run's own record of cpu | cuda
        ev = json.loads(path.read_text())
        ev["device_name"] = torch.cuda.get_device_name(0)
        path.write_text(json.dumps(ev, indent=2, sort_keys=True) + "\n")
    if not written:
        return False, f"{text}: not stored ({'; '.join(skipped)})"
    return True, f"{text}: stored in {time.time() - t0:.0f} s on {torch.cuda.get_device_name(0)}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cell", action="append", help="<family>:<dataset>:<eps> (repeatable); default: "
                    + ", ".join(FIRST_CELLS))
    ap.add_argument("--budget-min", type=float, default=BUDGET_MIN, help="wall-clock limit of each cell's run")
    ap.add_argument("--out", type=Path, default=Path("outputs") / "gpu-bench", help="where the run folders go")
    ap.add_argument("--full", action="store_true", help="all three classifiers whatever the estimate (a long lease)")
    ap.add_argument("--dry-run", action="store_true", help="list what would run and exit (no torch work)")
    args = ap.parse_args(argv)
    cells = args.cell or list(FIRST_CELLS)
    try:
        lines = plan(cells, args.budget_min, args.full)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        print("make gpu-bench would run, then store each finished cell and render docs/benchmark.md:")
        print("\n".join(f"  {line}" for line in lines))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("error: make gpu-bench runs the full protocol on a GPU and torch sees none; run it on a GPU machine, "
              "or `make gpu-bench ARGS=--dry-run` here", file=sys.stderr)
        return 2
    ok = True
    for text in cells:
        done, line = run_cell(text, args.out, args.budget_min, args.full)
        ok &= done
        print(f"[gpu-bench] {line}", flush=True)
    print("[gpu-bench] " + ("updated docs/benchmark.md" if page.render() else "docs/benchmark.md unchanged"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
