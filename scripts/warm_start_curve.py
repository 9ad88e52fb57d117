"""What the OT phase adds to a warm start: accuracy against the OT phase's steps, read from the evidence store.

    python scripts/warm_start_curve.py [--out docs/img/warm_start_curve.png] [--doc docs/research/2026-11-warm-start.md]

Trains nothing.  Every point is a stored run (``evidence/``) of a claim of
``dpgen/reproduce/claims.py``: a warm-up alone (``trainer.max_steps=0``) and copies of its run folder resumed
for n OT steps (``trainer.max_steps=n``), so the points of one seed share the moment release and the warm-up
fit and differ only in their OT steps (a point before the end of the schedule is a run stopped early: it spends
less than the target ε, stated in the table).  Draws LogReg and MLP (real test split) against the OT steps per
family, the warm-up's level (its n = 0 point) as a dotted line and the class-Gaussian alone at the full ε (mean
of its stored runs) as a dashed line, and writes the table between the ``<!-- warm-curve:begin -->`` /
``<!-- warm-curve:end -->`` markers of ``--doc``.
"""

from __future__ import annotations

import argparse
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from dpgen.paths import DOCS
from dpgen.reproduce.claims import CLAIMS
from dpgen.reproduce.evidence import match_reason
from dpgen.reproduce.markers import write_between
from dpgen.reproduce.store import load_store


@dataclass(frozen=True)
class Curve:
    family: str
    claim: str                 # the claims' id without its ``-ot<n>`` tail
    steps: tuple[int, ...]     # OT steps of the points (0: the warm-up alone; the last: the whole schedule)


CURVES = (Curve("DP-SWD generator", "mnist-dpswd-warm50-fit2000-lr1e-4", (0, 30, 60, 120)),
          Curve("DP-Sinkhorn", "mnist-dpsinkhorn-warm50-200", (0, 50, 100, 200)),
          Curve("DPSWgen (OT lr 1e-3)", "mnist-dpswgen-warm50-fit2000", (0, 500, 1000, 2000, 4200)),
          Curve("DPSWgen (OT lr 1e-4)", "mnist-dpswgen-warm50-fit2000-lr1e-4", (0, 500, 1000, 2000, 4200)),
          Curve("DPSWflow-r", "mnist-dpswflow-r-warm50", (0, 250, 1000, 4200)))
REFERENCE = "mnist-moments"    # the class-Gaussian alone at the same total ε
METRICS = (("acc_logreg", "LogReg"), ("acc_mlp", "MLP"))
BEGIN, END = "<!-- warm-curve:begin -->", "<!-- warm-curve:end -->"
FIGURE = DOCS / "img" / "warm_start_curve.png"
NOTE = DOCS / "research" / "2026-11-warm-start.md"  # the dated note that shows the curve


def runs_of(claim_id: str, store: list[dict]) -> list[dict]:
    claim = next(c for c in CLAIMS if c.id == claim_id)
    return [ev for ev in store if match_reason(claim.cell, ev) is None]


def points(curve: Curve, store: list[dict]) -> dict[int, list[tuple[int, dict]]]:
    """``{seed: [(OT steps, evidence), ...]}`` for every seed whose warm-up alone (n = 0) and at least one of its
    continuations are stored."""
    by_seed: dict[int, dict[int, dict]] = {}
    for n in curve.steps:
        for ev in runs_of(f"{curve.claim}-ot{n}", store):
            by_seed.setdefault(int(ev["seed"]), {})[n] = ev
    return {s: sorted(pts.items()) for s, pts in sorted(by_seed.items()) if 0 in pts and len(pts) > 1}


def reference(store: list[dict]) -> dict[str, tuple[float, int]]:
    """``{metric: (mean in %, number of runs)}`` of the class-Gaussian alone."""
    runs = runs_of(REFERENCE, store)
    out = {}
    for key, _ in METRICS:
        vals = [100.0 * float(ev["metrics"][key]) for ev in runs if ev["metrics"].get(key) is not None]
        if vals:
            out[key] = (statistics.fmean(vals), len(vals))
    return out


def _pct(ev: dict, key: str) -> str:
    v = ev["metrics"].get(key)
    return "—" if v is None else f"{100.0 * float(v):.1f} %"


def table(store: list[dict]) -> str:
    """The markdown table of every point: one row per family, seed and OT steps."""
    lines = ["| family | seed | OT steps | ε PLD / RDP spent | σ/Δ OT | LogReg | MLP |", "|---|---|---|---|---|---|---|"]
    for curve in CURVES:
        for seed, pts in points(curve, store).items():
            for n, ev in pts:
                p = ev["privacy"]
                sigma = ev.get("mechanism", {}).get("noise_multiplier")
                lines.append(f"| {curve.family} | {seed} | {n} of {curve.steps[-1]} | "
                             f"{float(p['epsilon_pld']):.3f} / {float(p['epsilon_rdp']):.2f} | "
                             f"{'—' if sigma is None else f'{float(sigma):.3f}'} | "
                             f"{_pct(ev, 'acc_logreg')} | {_pct(ev, 'acc_mlp')} |")
    ref = reference(store)
    if ref:
        n = max(k for _, k in ref.values())
        preset = next(c for c in CLAIMS if c.id == REFERENCE).cell.experiment
        lines.append(f"| class-Gaussian alone (`{preset}`), mean of {n} runs | — | — | full ε | — | "
                     + " | ".join(f"{ref[k][0]:.1f} %" if k in ref else "—" for k, _ in METRICS) + " |")
    return "\n".join(lines)


def block(store: list[dict], figure: str = "../img/warm_start_curve.png") -> str:
    """What the page shows between the markers: the figure and the table."""
    return f"![accuracy against the OT phase's steps]({figure})\n\n{table(store)}"


def plot(store: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = reference(store)
    colours = {"acc_logreg": "tab:blue", "acc_mlp": "tab:orange"}
    markers = "osD^v"
    cols = min(2, len(CURVES))
    rows = -(-len(CURVES) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 5.6 * rows), squeeze=False)
    for ax in axes.flat[len(CURVES):]:
        ax.set_visible(False)
    for ax, curve in zip(list(axes.flat)[:len(CURVES)], CURVES, strict=True):
        by_seed = points(curve, store)
        for i, (seed, pts) in enumerate(by_seed.items()):
            xs = [n for n, _ in pts]
            for key, name in METRICS:
                ys = [ev["metrics"].get(key) for _, ev in pts]
                if any(y is None for y in ys):
                    continue
                ys = [100.0 * float(y) for y in ys]
                ax.plot(xs, ys, marker=markers[i % len(markers)], color=colours[key], label=f"{name}, seed {seed}")
                ax.axhline(ys[0], color=colours[key], linestyle=":", linewidth=1, alpha=0.7)
        for key, name in METRICS:
            if key in ref:
                mean, k = ref[key]
                ax.axhline(mean, color=colours[key], linestyle="--", linewidth=1.2,
                           label=f"{name}, class-Gaussian alone (full ε, mean of {k})")
        ax.set_title(f"MNIST, (10, 1e-5): {curve.family} warm-started (share 0.5)", fontsize=10)
        ax.set_xlabel(f"OT steps (of {curve.steps[-1]}); dotted: the warm-up's level (0 steps)")
        ax.set_ylabel("accuracy on the real MNIST test set (%)")
        if by_seed:
            first = next(iter(by_seed.values()))
            top = ax.secondary_xaxis("top")
            top.set_xticks([n for n, _ in first])
            top.set_xticklabels([f"{float(ev['privacy']['epsilon_pld']):.2f}" for _, ev in first], fontsize=7)
            top.set_xlabel("ε (PLD) spent", fontsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def write_block(doc: Path, text: str) -> None:
    write_between(doc, BEGIN, END, text, append=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=FIGURE, help="the figure (PNG)")
    ap.add_argument("--doc", type=Path, default=NOTE, help="the page whose markers get the table")
    args = ap.parse_args(argv)
    store = load_store()
    plot(store, args.out)
    write_block(args.doc, block(store, Path(os.path.relpath(args.out.resolve(), args.doc.resolve().parent)).as_posix()))
    print(table(store))
    print(f"\nwrote {args.out} and the table of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
