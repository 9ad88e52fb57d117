"""Utility against training steps for one run: train in segments, evaluate each segment, plot the curve.

A run is trained to ``trainer.max_steps = s₁``, evaluated, resumed to ``s₂`` (the loop's resume: the
same ledger, sampler, noise generators and RNG continue, so the final segment is the run a single
command would have made), evaluated, and so on.  After each segment ``results.json`` is kept as
``results_step<s>.json``; ``plot`` reads them back::

    dpgen reproduce steps-curve run outputs/dpsinkhorn_paper 3000 6000 9000 12000 -- \\
        experiment=mnist_dpsinkhorn_paper seed=0 logger=local trainer.progress=false \\
        'evaluator.classifiers=[logreg,mlp]' evaluator.n_synthetic=10000
    dpgen reproduce steps-curve plot outputs/dpsinkhorn_paper      # table (markdown) + curve.png

Every point is a released model evaluated on public data (the real test split), so the curve is
post-processing: it spends no privacy.  It is for reading how utility grows with the steps (and the
ε they cost); choosing the step count from it on private data would be tuning on private data.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from dpgen.logging.summary import to_float  # noqa: E402

from ..paths import ROOT

# the columns of the table, when the runs report them: (results.json section, key, header, scale)
COLUMNS = (("privacy", "epsilon_rdp", "ε (RDP)", 1.0), ("privacy", "epsilon_pld", "ε (PLD)", 1.0),
           ("metrics", "acc_logreg", "LogReg %", 100.0), ("metrics", "acc_mlp", "MLP %", 100.0),
           ("metrics", "acc_cnn", "CNN %", 100.0), ("metrics", "test_accuracy", "test acc. %", 100.0),
           ("metrics", "fid", "FID", 1.0))


def run_segments(run_dir: Path, steps: list[int], overrides: list[str]) -> None:
    """Train ``run_dir`` to each of ``steps`` in turn (resuming), keeping each segment's results.json."""
    if steps != sorted(set(steps)) or steps[0] <= 0:
        raise SystemExit(f"steps must be positive and increasing, got {steps}")
    bad = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in ("trainer.max_steps", "trainer.resume",
                                                                       "hydra.run.dir")]
    if bad:
        raise SystemExit(f"{bad}: set by this script (one segment per step count, resumed in {run_dir})")
    for i, s in enumerate(steps):
        if (run_dir / f"results_step{s}.json").is_file():
            print(f"step {s}: results_step{s}.json exists, skipped")
            continue
        resume = ["trainer.resume=true"] if (run_dir / "checkpoints" / "last.pt").is_file() else []
        cmd = [sys.executable, str(ROOT / "train.py"), *overrides, f"trainer.max_steps={s}", *resume,
               f"hydra.run.dir={run_dir}"]
        print(f"[{i + 1}/{len(steps)}] training to step {s}: {' '.join(cmd[1:])}", flush=True)
        subprocess.run(cmd, check=True, env=os.environ.copy())
        res = run_dir / "results.json"
        (run_dir / f"results_step{s}.json").write_text(res.read_text())


def load_points(run_dir: Path) -> list[tuple[int, dict]]:
    pts = []
    for p in run_dir.glob("results_step*.json"):
        m = re.fullmatch(r"results_step(\d+)\.json", p.name)
        if m:
            pts.append((int(m.group(1)), json.loads(p.read_text())))
    if not pts:
        raise SystemExit(f"{run_dir}: no results_step<s>.json (run `steps_curve.py run` first)")
    return sorted(pts, key=lambda t: t[0])


def table(points: list[tuple[int, dict]]) -> str:
    """A markdown table: one row per segment, the columns any point reports."""
    cols = [c for c in COLUMNS if any(to_float((r.get(c[0]) or {}).get(c[1])) is not None for _, r in points)]
    head = "| steps | " + " | ".join(c[2] for c in cols) + " | wall (s) |"
    lines = [head, "|" + "---|" * (len(cols) + 2)]
    for s, r in points:
        vals = []
        for sec, key, _, scale in cols:
            v = to_float((r.get(sec) or {}).get(key))
            vals.append("—" if v is None else f"{v * scale:.2f}" if scale == 1.0 else f"{v * scale:.1f}")
        lines.append(f"| {s:,} | " + " | ".join(vals) + f" | {to_float(r.get('runtime_s')) or 0:.0f} |")
    return "\n".join(lines)


def plot(points: list[tuple[int, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s, _ in points]
    fig, ax = plt.subplots(figsize=(6, 4))
    for sec, key, label, scale in COLUMNS:
        if sec != "metrics" or key == "fid":
            continue
        ys = [to_float((r.get(sec) or {}).get(key)) for _, r in points]
        if any(y is not None for y in ys):
            ax.plot(steps, [None if y is None else y * scale for y in ys], "o-", label=label)
    ax.set_xlabel("training steps")
    ax.set_ylabel("accuracy on the real test set (%)")
    eps = [to_float((r.get("privacy") or {}).get("epsilon_rdp")) for _, r in points]
    if all(e is not None for e in eps):
        top = ax.secondary_xaxis("top")
        top.set_xticks(steps)
        top.set_xticklabels([f"{e:.2f}" for e in eps], fontsize=7)
        top.set_xlabel("ε (RDP) spent")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train in segments; train.py overrides after --")
    r.add_argument("run_dir", type=Path)
    r.add_argument("steps", nargs="+", type=int)
    p = sub.add_parser("plot", help="markdown table on stdout and <run_dir>/curve.png")
    p.add_argument("run_dir", type=Path)
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    args = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.cmd == "run":
        if not any(o.startswith("experiment=") for o in overrides):
            raise SystemExit("name the experiment after --, e.g. -- experiment=mnist_dpsinkhorn_paper")
        run_segments(args.run_dir.resolve(), args.steps, overrides)
    points = load_points(args.run_dir)
    print(table(points))
    plot(points, args.run_dir / "curve.png")
    print(f"\nwrote {args.run_dir / 'curve.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
