"""Noise-utility curves of every private generator: downstream accuracy vs epsilon and vs the noise std
per released coordinate (normalised units), with the non-private ceiling of each design.

    dpgen reproduce utility-curves --out outputs/utility            # digits, all methods (~30 min on 2 cores)
    dpgen reproduce utility-curves --out outputs/utility --only moments,moments_proj --datasets digits,mnist
    dpgen reproduce utility-curves --out outputs/utility --report-only   # re-plot from the results already there

Caching: a point whose run folder ``<out>/<dataset>/<design>/<tag>`` already holds ``results.json`` is read,
not re-run, so after changing one design only its points train (``--only`` restricts the sweep; delete or
move a design's folder to re-run it).  Folders of an earlier ``--out`` can be linked in
(``ln -s <old>/<dataset>/<design> <out>/<dataset>/<design>``) to reuse unchanged rows.

Each point is ONE run of ``train.py`` (logger=local, FID off, LogReg + MLP on ``--n-synthetic`` samples)
with the run folder ``<out>/<dataset>/<design>/eps<eps>``; the non-private ceiling is the same design with
``model.private=false accountant.epsilon=null``.  Schedules are deliberately SMALL (see ``DESIGNS``) so the
whole sweep runs in about half an hour: the iterative methods are therefore below their full-schedule
accuracy, and the table says so.

Normalised noise: the Gaussian noise std on one released coordinate divided by the largest L2 change one
record can make to the released vector's *rows* (the row diameter: 1 for DP-SWD rows of norm <= 1/2,
2 for the unit-norm latents of DPSWflow, 1 for the class-moment vector, ``2C`` for DP-Sinkhorn's clipped
gradient).  It is the noise a single record has to hide behind, in the record's own units.

Writes ``<out>/utility_curves.json``, ``docs/figures/utility_curves.png`` (``--figure``) and the table
between the ``<!-- curves:begin -->`` / ``<!-- curves:end -->`` markers of ``docs/utility.md`` (``--doc``).
Hyper-parameters are the presets' (docs/research/2026-11-utility-designs.md says how each was fixed), never tuned
on these runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from dpgen.logging.timings import load_results

from ..paths import ROOT

EPSILONS = (1.0, 10.0, 100.0)

# design -> (dataset -> experiment), extra overrides, row diameter (normalised noise = noise_std / diameter)
DESIGNS: dict[str, dict] = {
    "moments": {"label": "DP class-Gaussian (moments, DCT)",
                "experiments": {"digits": "digits_moments", "mnist": "mnist_moments"},
                "overrides": [], "diameter": 1.0},
    "moments_proj": {"label": "one-release orthonormal class blocks -> moments (DCT)",
                     "experiments": {"digits": "digits_moments", "mnist": "mnist_moments"},
                     "overrides": ["model.release=projections"], "diameter": "radius2"},
    "dpswd": {"label": "DP-SWD generator (digits_dpswd, 50 epochs)",
              "experiments": {"digits": "digits_dpswd"},
              "overrides": ["model.epochs=50"], "diameter": 1.0},
    "dpswflow_r": {"label": "DPSWflow-r (digits_dpswflow_r, AE on public half)",
                   "experiments": {"digits": "digits_dpswflow_r"},
                   "overrides": ["model.label_mode=concat"], "diameter": 2.0},  # partition is the default now
    "dpswflow_r_partition": {"label": "DPSWflow-r, class-partitioned (AE on public half)",
                             "experiments": {"digits": "digits_dpswflow_r"},
                             "overrides": ["model.label_mode=partition"], "diameter": 2.0},
    "dpsinkhorn": {"label": "DP-Sinkhorn (digits_dpsinkhorn, its 3000 steps)",
                   "experiments": {"digits": "digits_dpsinkhorn"},
                   "overrides": [], "diameter": "sinkhorn"},
    # the ~30-minute MNIST schedules (no public data); only their eps = 10 points were run
    "dpswd_partition": {"label": "DP-SWD generator (mnist_dpswd_partition, 12 epochs)",
                        "experiments": {"mnist": "mnist_dpswd_partition"}, "overrides": [], "diameter": 1.0},
    "dpsinkhorn_long": {"label": "DP-Sinkhorn (mnist_dpsinkhorn_long, 8000 steps)",
                        "experiments": {"mnist": "mnist_dpsinkhorn_long"}, "overrides": [], "diameter": "sinkhorn"},
    # the DP-SWD domain adapter (Algorithm 2): private TARGET domain, metric = accuracy on the target test set;
    # rows of the released projections are clip_{1/2}(g(x)/(2R)) (diameter 1).  Its non-private ceiling is the
    # non-private SWD adapter preset (same data, schedule and networks; its own alignment weight 0.1 on raw
    # features): DPSWDAlignment has no sigma = 0 mode.
    "dpswd_da": {"label": "DP-SWD adapter (digits_shift_dpswd, target acc.)",
                 "experiments": {"digits": "digits_shift_dpswd"},
                 "overrides": [], "diameter": 1.0, "metric": "acc_target", "task": "da",
                 "nonprivate": ["experiment=digits_shift_swd"],
                 "nonprivate_label": "non-private SWD adapter (digits_shift_swd, target acc.)"},
}

# evaluator overrides per task: generators (downstream LogReg + MLP on synthetic data), adapters (target test)
EVAL = {"gen": lambda n: ["evaluator.fid.enabled=false", "evaluator.class_grids=false",
                          "evaluator.classifiers=[logreg,mlp]", f"evaluator.n_synthetic={n}"],
        "da": lambda n: ["evaluator.plot=false"]}


def point_command(design: str, dataset: str, eps: float | None) -> list[str]:
    """The ``train.py`` overrides of one point (experiment, design overrides, privacy)."""
    spec = DESIGNS[design]
    exp = spec["experiments"][dataset]
    if eps is not None:
        return [f"experiment={exp}", *spec["overrides"], f"accountant.epsilon={eps:g}"]
    if "nonprivate" in spec:  # a separate non-private preset (no sigma = 0 mode in the private one)
        return list(spec["nonprivate"])
    return [f"experiment={exp}", *spec["overrides"], "model.private=false", "accountant.epsilon=null"]


def run_point(out: Path, dataset: str, design: str, eps: float | None, n_synthetic: int, python: str) -> dict | None:
    spec = DESIGNS[design]
    exp = spec["experiments"].get(dataset)
    if exp is None:
        return None
    tag = "nonprivate" if eps is None else f"eps{eps:g}"
    run_dir = out / dataset / design / tag
    res_path = run_dir / "results.json"
    point = point_command(design, dataset, eps)
    if not res_path.is_file():
        cmd = [python, str(ROOT / "train.py"), *point, "logger=local", *EVAL[spec.get("task", "gen")](n_synthetic),
               "trainer.progress=false", f"hydra.run.dir={run_dir}"]
        t0 = time.time()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        if proc.returncode != 0 or not res_path.is_file():
            print(f"FAILED {dataset}/{design}/{tag}:\n{proc.stderr[-2000:]}", file=sys.stderr)
            return None
        print(f"{dataset}/{design}/{tag}: {time.time() - t0:.0f} s", flush=True)
    res = load_results(run_dir)  # + the private run time (the operator's own benchmark runs)
    train = res.get("train", {})
    diam = spec["diameter"]
    if diam == "radius2":  # projections: one record moves one row by <= 2r (and one count by r)
        diam = 2.0 * float(train.get("radius", 1.0))
    elif diam == "sinkhorn":
        diam = 2.0 * float(train.get("clip_norm", 1.0))
    std = train.get("noise_std") if eps is not None else 0.0
    metrics = res["metrics"]
    label = spec.get("nonprivate_label", spec["label"]) if eps is None else spec["label"]
    return {"dataset": dataset, "design": design, "label": label, "epsilon": eps,
            "epsilon_rdp": res["privacy"].get("epsilon_rdp"), "epsilon_pld": res["privacy"].get("epsilon_pld"),
            # acc: the design's metric (LogReg on synthetic -> real test; adapters: accuracy on the target test)
            "acc": metrics.get(spec.get("metric", "acc_logreg")),
            "acc_logreg": metrics.get("acc_logreg"), "acc_mlp": metrics.get("acc_mlp"),
            "noise_std": std, "noise_normalised": None if std is None else float(std) / float(diam),
            "runtime_s": res.get("runtime_s"), "command": " ".join(["python train.py", *point])}


def _f(v, fmt="{:.3f}") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    return fmt.format(v) if isinstance(v, (int, float)) else str(v)


def table(rows: list[dict]) -> str:
    lines = ["| dataset | design | target eps | eps RDP / PLD | noise std / row diameter | LogReg (adapter: target acc.) "
             "| MLP | run time (s) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eps = "∞ (non-private ceiling)" if r["epsilon"] is None else f"{r['epsilon']:g}"
        lines.append(f"| {r['dataset']} | {r['label']} | {eps} | {_f(r['epsilon_rdp'], '{:.2f}')} / "
                     f"{_f(r['epsilon_pld'], '{:.2f}')} | {_f(r['noise_normalised'], '{:.3g}')} | {_f(r.get('acc', r['acc_logreg']))} | "
                     f"{_f(r['acc_mlp'])} | {_f(r['runtime_s'], '{:.0f}')} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = sorted({r["dataset"] for r in rows})
    fig, axes = plt.subplots(len(datasets), 2, figsize=(15, 4 * len(datasets)), squeeze=False)
    for i, ds in enumerate(datasets):
        for design in DESIGNS:
            pts = [r for r in rows if r["dataset"] == ds and r["design"] == design and r.get("acc") is not None]
            priv = sorted([r for r in pts if r["epsilon"] is not None], key=lambda r: r["epsilon"])
            if not priv:
                continue
            style = "s--" if DESIGNS[design].get("task") == "da" else "o-"
            line, = axes[i, 0].plot([r["epsilon"] for r in priv], [r["acc"] for r in priv], style,
                                    label=DESIGNS[design]["label"])
            axes[i, 1].plot([r["noise_normalised"] for r in priv], [r["acc"] for r in priv], style,
                            color=line.get_color())
            ceil = [r for r in pts if r["epsilon"] is None]
            if ceil:
                axes[i, 0].axhline(ceil[0]["acc"], color=line.get_color(), ls=":", lw=1)
        axes[i, 0].set(xscale="log", xlabel="target ε", ylabel="LogReg acc. (real test); adapter: target acc.",
                       title=f"{ds}: vs ε (dotted: non-private ceiling)")
        axes[i, 1].set(xscale="log", xlabel="noise std per released coordinate / row diameter",
                       ylabel="accuracy", title=f"{ds}: vs normalised noise")
        for ax in axes[i]:
            ax.axhline(0.1, color="grey", lw=0.5)  # chance (10 classes)
            ax.set_ylim(0.0, 1.0)
        axes[i, 1].legend(*axes[i, 0].get_legend_handles_labels(), fontsize=7, loc="upper left",
                          bbox_to_anchor=(1.02, 1.0), title="dashed: domain adapter", title_fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def write_doc(doc: Path, rows: list[dict], figure: Path) -> None:
    begin, end = "<!-- curves:begin -->", "<!-- curves:end -->"
    block = (f"{begin}\n![utility curves]({os.path.relpath(figure, doc.parent)})\n\n{table(rows)}\n\n"
             f"Generated by `dpgen reproduce utility-curves` (one run per point; small schedules).\n{end}")
    text = doc.read_text() if doc.is_file() else f"# Utility\n\n{begin}\n{end}\n"
    if begin not in text:
        text += f"\n{begin}\n{end}\n"
    pre, rest = text.split(begin, 1)
    post = rest.split(end, 1)[1]
    doc.write_text(pre + block + post)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the runs and utility_curves.json")
    ap.add_argument("--datasets", default="digits", help="comma list: digits,mnist")
    ap.add_argument("--only", default=",".join(DESIGNS), help=f"comma list of designs ({', '.join(DESIGNS)})")
    ap.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    ap.add_argument("--n-synthetic", type=int, default=5000)
    ap.add_argument("--no-ceiling", action="store_true", help="skip the non-private runs")
    ap.add_argument("--report-only", action="store_true", help="do not train; read the runs already in --out")
    ap.add_argument("--figure", type=Path, default=ROOT / "docs" / "figures" / "utility_curves.png")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "utility.md")
    args = ap.parse_args(argv)
    designs = [d for d in args.only.split(",") if d]
    bad = [d for d in designs if d not in DESIGNS]
    if bad:
        ap.error(f"unknown design(s) {bad}; choose from {', '.join(DESIGNS)}")
    epsilons: list[float | None] = [float(e) for e in args.epsilons.split(",") if e]
    if not args.no_ceiling:
        epsilons.append(None)
    rows = []
    for ds in args.datasets.split(","):
        for design in designs:
            for eps in epsilons:
                if args.report_only and not (args.out / ds / design /
                                             ("nonprivate" if eps is None else f"eps{eps:g}") / "results.json").is_file():
                    continue
                r = run_point(args.out, ds, design, eps, args.n_synthetic, sys.executable)
                if r is not None:
                    rows.append(r)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "utility_curves.json").write_text(json.dumps(rows, indent=1))
    if rows:
        plot(rows, args.figure)
        write_doc(args.doc, rows, args.figure)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
