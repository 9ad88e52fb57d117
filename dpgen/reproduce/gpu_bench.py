"""A prepared DPImageBench cell on one GPU (``make gpu-bench CELL=<family>:<dataset>:<eps>``).

    python -m dpgen.reproduce.gpu_bench --cell class_gaussian:mnist:10       # trains, evaluates, stores, renders
    python -m dpgen.reproduce.gpu_bench --dry-run                             # anywhere: what it would run, in what budget

For each cell it trains the family's preset with ``evaluator=dpimagebench`` and every protocol setting at the
benchmark's value (the full protocol: 60,000 synthetic images, ResNet-110, WRN-40-4 and ResNeXt-29 for 50
epochs each, FID of all 60,000 against the 55,000 sensitive training images) on ``trainer.device=cuda`` with
the evaluator's fast path, within ``--budget-min`` minutes (the run is stopped at the limit: a stopped run
stores nothing).  A finished run is stored in the evidence store with the name of the GPU it ran on, and
docs/benchmark.md is re-rendered from the store.  Without ``--cell`` it runs :data:`FIRST_CELLS`, the cells to
fill first when a GPU is lent.

The budget's estimate (:func:`estimate`) is arithmetic, not a measurement: the classifiers' training FLOPs
(counted by ``torch.utils.flop_counter`` on the three networks at 28 px: forward + backward per image, times
55,000 images and 50 epochs), their per-epoch evaluations and the Inception forwards, over an assumed fraction
of the GPU's dense bfloat16 peak.
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
BUDGET_MIN = 12.0
# forward + backward GFLOP per 28 px image (torch.utils.flop_counter, 2 FLOPs per multiply-add)
TRAIN_GFLOP = {"resnet": 1.16, "wrn": 5.96, "resnext": 53.87}
INCEPTION_GFLOP = 11.5  # one forward at 299 px
H100_BF16_TFLOPS = 989.0  # dense bfloat16 peak of an H100 SXM


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


def command(family: page.Family, dataset: str, eps: float, run_dir: Path) -> list[str]:
    """The cell's command (the page's, full protocol) on the GPU, into ``run_dir``."""
    cmd = family.command(dataset, eps).split()[2:]  # after "python train.py"
    return [*cmd, "trainer.device=cuda", "evaluator.device=cuda", "logger=local", "trainer.progress=false",
            f"hydra.run.dir={run_dir}"]


def estimate(mfu: float) -> dict:
    """Seconds of the full protocol's evaluation at ``mfu`` of an H100's dense bfloat16 peak (an estimate)."""
    train = sum(TRAIN_GFLOP.values()) * 55_000 * 50
    evals = sum(TRAIN_GFLOP.values()) / 3 * (10_000 * 50 + 20_000)  # val + hold-out each epoch, test twice
    fid = INCEPTION_GFLOP * (60_000 + 55_000)
    total = (train + evals + fid) * 1e9
    return {"pflop": total / 1e15, "seconds": total / (mfu * H100_BF16_TFLOPS * 1e12)}


def plan(cells: list[str], budget_min: float) -> list[str]:
    lines = []
    for text in cells:
        family, dataset, eps = parse_cell(text)
        cmd = " ".join(command(family, dataset, eps, Path("<out>") / text.replace(":", "_")))
        lines.append(f"{text}: {family.name}, {page.DATASETS[dataset][0]}, ε = {eps:g}, full protocol, at most "
                     f"{budget_min:g} min: python train.py {cmd}")
    low, high = estimate(0.35), estimate(0.2)
    lines.append(f"estimate, not a measurement: the evaluation is {low['pflop']:.0f} PFLOP a cell, "
                 f"{low['seconds'] / 60:.0f}–{high['seconds'] / 60:.0f} min on one H100 at 35–20 % of its dense "
                 "bfloat16 peak (plus the preset's training)")
    return lines


def run_cell(text: str, out: Path, budget_min: float) -> tuple[bool, str]:
    import torch

    family, dataset, eps = parse_cell(text)
    run_dir = out / text.replace(":", "_")
    t0 = time.time()
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "train.py"), *command(family, dataset, eps, run_dir)],
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
    ap.add_argument("--dry-run", action="store_true", help="list what would run and exit (no torch work)")
    args = ap.parse_args(argv)
    cells = args.cell or list(FIRST_CELLS)
    try:
        lines = plan(cells, args.budget_min)
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
        done, line = run_cell(text, args.out, args.budget_min)
        ok &= done
        print(f"[gpu-bench] {line}", flush=True)
    print("[gpu-bench] " + ("updated docs/benchmark.md" if page.render() else "docs/benchmark.md unchanged"))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
