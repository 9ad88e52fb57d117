"""What OT adds to a warm start, every family, dataset and ε: the grid of the warm-start note, read from the evidence store.

    python scripts/warm_start_table.py [--doc docs/research/2026-11-warm-start.md]

Trains nothing.  Every cell is the stored runs (``evidence/``) of one claim of
``dpgen/reproduce/claims.py``: mean ± sample std over its runs (one run: its value), the number of runs and the
ε they spent (PLD, the largest), and how many ran on a GPU (the ``device`` its results.json records).  The CNN column reads a second claim, the same command with the CNN among the
classifiers.  A claim with no stored run prints "not run".  Writes the table between the
``<!-- warm-grid:begin -->`` / ``<!-- warm-grid:end -->`` markers of ``--doc``, and its summary (LogReg of the
class-Gaussian alone, the DP-SWD warm start at share 0.75 and OT alone) between the ``warm-summary`` markers of
docs/utility.md.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

from dpgen.paths import DOCS
from dpgen.reproduce.claims import CLAIMS, text
from dpgen.reproduce.evidence import match_reason
from dpgen.reproduce.markers import wrapped_command, write_between
from dpgen.reproduce.store import load_store

NOTE = DOCS / "research" / "2026-11-warm-start.md"  # the dated note that shows the grid
BEGIN, END = "<!-- warm-grid:begin -->", "<!-- warm-grid:end -->"


@dataclass(frozen=True)
class Row:
    label: str
    claim: str              # LogReg and MLP (and the ε spent) from this claim's runs
    cnn: str | None = None  # the CNN from this claim's runs (the same command with the CNN)


FIX = "mnist-dpswd-warm50-fit2000-lr1e-4"
SECTIONS: tuple[tuple[str, tuple[Row, ...]], ...] = (
    ("MNIST, ε = 10", (
        Row("(a) class-Gaussian alone", "mnist-moments", "mnist-moments-cnn"),
        Row("(b) DP-SWD generator, OT alone (1 epoch)", "mnist-dpswd-ot-short"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.25", "mnist-dpswd-warm25-fit2000-lr1e-4"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.5", FIX, f"{FIX}-cnn"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.75", "mnist-dpswd-warm75-fit2000-lr1e-4"),
        Row("DP-SWD generator, its warm-up alone (share 0.5: spends ε = 5)", f"{FIX}-ot0"),
        Row("(c) DP-Sinkhorn, warm-up + 200 OT steps, share 0.5", "mnist-dpsinkhorn-warm50-200"),
        Row("DP-Sinkhorn, its warm-up alone", "mnist-dpsinkhorn-warm50-200-ot0"),
        Row("(b) DP-Sinkhorn, OT alone (200 steps)", "mnist-dpsinkhorn-ot-200"),
        Row("DP-Sinkhorn, the same 200 steps without privacy (ε = ∞)", "mnist-sinkhorn-nonprivate-200"),
        *(Row(label, claim, claim) for label, claim in (
            ("(b) DPSWgen (public autoencoder), OT alone (35 epochs)", "mnist-dpswgen-ot-cnn"),
            ("(c) DPSWgen, warm-up + OT at the preset's lr 1e-3, share 0.5", "mnist-dpswgen-warm50-fit2000-cnn"),
            ("(c) DPSWgen, warm-up + OT at lr 1e-4, share 0.5", "mnist-dpswgen-warm50-fit2000-lr1e-4-cnn"),
            ("DPSWgen, its warm-up alone (spends ε = 5)", "mnist-dpswgen-warm50-fit2000-ot0-cnn"),
            ("(b) DPSWflow-r (public autoencoder), OT alone (4200 steps)", "mnist-dpswflow-r-ot-cnn"),
            ("(c) DPSWflow-r, warm-up + OT (4200 steps), share 0.5", "mnist-dpswflow-r-warm50-cnn"),
            ("DPSWflow-r, its warm-up alone (spends ε = 5)", "mnist-dpswflow-r-warm50-ot0-cnn"))),
    )),
    ("MNIST, ε = 1", (
        Row("(a) class-Gaussian alone", "mnist-moments-eps1", "mnist-moments-eps1-cnn"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.25", "mnist-dpswd-warm25-fit2000-lr1e-4-eps1-cnn",
            "mnist-dpswd-warm25-fit2000-lr1e-4-eps1-cnn"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.5", f"{FIX}-eps1"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.75", "mnist-dpswd-warm75-fit2000-lr1e-4-eps1-cnn",
            "mnist-dpswd-warm75-fit2000-lr1e-4-eps1-cnn"),
        Row("DP-SWD generator, its warm-up alone (spends ε = 0.5)", f"{FIX}-eps1-ot0"),
        Row("(c) DP-Sinkhorn, warm-up + 200 OT steps, share 0.5", "mnist-dpsinkhorn-warm50-200-eps1"),
        Row("(b) DP-Sinkhorn, OT alone (200 steps)", *["mnist-dpsinkhorn-ot-200-eps1-cnn"] * 2),
        Row("(b) DPSWgen (public autoencoder), OT alone (35 epochs)", *["mnist-dpswgen-ot-eps1-cnn"] * 2),
        Row("(c) DPSWgen, warm-up + OT at lr 1e-4, share 0.5", *["mnist-dpswgen-warm50-fit2000-lr1e-4-eps1-cnn"] * 2),
    )),
    *((f"Fashion-MNIST, ε = {eps}", (
        Row("(a) class-Gaussian alone", f"fmnist-moments-eps{eps}", f"fmnist-moments-eps{eps}-cnn"),
        Row("(b) DP-SWD generator, OT alone (1 epoch)", f"fmnist-dpswd-ot-short-eps{eps}"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.25", *[f"fmnist-dpswd-warm25-fit2000-lr1e-4-eps{eps}-cnn"] * 2),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.5", f"fmnist-dpswd-warm50-fit2000-lr1e-4-eps{eps}"),
        Row("(c) DP-SWD generator, warm-up + OT, share 0.75" + (" (preset `fmnist_dpswd_warm`)" if eps == 10 else ""),
            *[f"fmnist-dpswd-warm75-fit2000-lr1e-4-eps{eps}-cnn"] * 2),
        *((Row("DP-SWD generator, its warm-up alone at share 0.75 (spends ε = 7.5)",
               *["fmnist-dpswd-warm75-fit2000-lr1e-4-eps10-ot0-cnn"] * 2),
           Row("the same warm-ups (paired) + their 120 OT steps",
               *["fmnist-dpswd-warm75-fit2000-lr1e-4-eps10-ot120-cnn"] * 2)) if eps == 10 else ()),
        Row(f"DP-SWD generator, its warm-up alone (share 0.5: spends ε = {eps / 2:g})",
            *[f"fmnist-dpswd-warm50-fit2000-lr1e-4-eps{eps}-ot0-cnn"] * 2),
        *((Row("(b) DP-Sinkhorn (`fmnist_dpsinkhorn`), OT alone (200 steps)", "fmnist-dpsinkhorn-ot-200"),
           Row("(c) DP-Sinkhorn (`fmnist_dpsinkhorn`), warm-up + 200 OT steps, share 0.5",
               "fmnist-dpsinkhorn-warm50-200"),
           *(Row(label, claim, claim) for label, claim in (
               ("(b) DPSWgen (`fmnist_dpswgen`, public autoencoder), OT alone (35 epochs)", "fmnist-dpswgen-ot-cnn"),
               ("(c) DPSWgen, warm-up + OT at lr 1e-4, share 0.5", "fmnist-dpswgen-warm50-fit2000-lr1e-4-cnn"),
               ("DPSWgen, its warm-up alone (spends ε = 5)", "fmnist-dpswgen-warm50-fit2000-ot0-cnn")))) if eps == 10 else
          (Row("(b) DP-Sinkhorn (`fmnist_dpsinkhorn`), OT alone (200 steps)", *["fmnist-dpsinkhorn-ot-200-eps1-cnn"] * 2),
           Row("(c) DP-Sinkhorn (`fmnist_dpsinkhorn`), warm-up + 200 OT steps, share 0.5",
               *["fmnist-dpsinkhorn-warm50-200-eps1-cnn"] * 2))),
    )) for eps in (10, 1)),
)


def runs_of(claim_id: str, store: list[dict]) -> list[dict]:
    claim = next(c for c in CLAIMS if c.id == claim_id)
    return [ev for ev in store if match_reason(claim.cell, ev) is None]


def on_gpu(runs: list[dict]) -> str:
    """``"; all on a GPU"`` / ``"; <k> on a GPU"`` / ``""``: how many of ``runs`` ran on a GPU (the ``device``
    their results.json records)."""
    gpu = sum(str(ev.get("device", "")).startswith("cuda") for ev in runs)
    return "" if not gpu else "; all on a GPU" if gpu == len(runs) else f"; {gpu} on a GPU"


def cell(runs: list[dict], metric: str, count: bool = False) -> str:
    """mean ± std over the runs that measured ``metric`` (``count``: and how many, and how many on a GPU)."""
    runs = [ev for ev in runs if ev["metrics"].get(metric) is not None]
    if not runs:
        return "—"
    if not count:
        return text(runs, metric)
    return text(runs, metric) + f" ({len(runs)} run{'s' if len(runs) > 1 else ''}{on_gpu(runs)})"


def table(store: list[dict]) -> str:
    """The grid (one line per row, its run id wN in the first column), then every row's command in one code block
    below it, each under a ``# wN`` comment."""
    lines = ["| id | run | runs (seeds) | ε spent (PLD) | LogReg | MLP | CNN |", "|---|---|---|---|---|---|---|"]
    commands = []
    for title, rows in SECTIONS:
        lines.append(f"| | **{title}** | | | | | |")
        for row in rows:
            ref = f"w{len(commands) + 1}"
            runs = runs_of(row.claim, store)
            commands.append(f"# {ref}: {title}, {row.label}\n"
                            + wrapped_command(next(c for c in CLAIMS if c.id == row.claim).cell.command()))
            if not runs:
                lines.append(f"| {ref} | {row.label} | not run | | | | |")
                continue
            cnn = cell(runs_of(row.cnn, store), "acc_cnn", count=True) if row.cnn else "—"
            seeds = ", ".join(str(s) for s in sorted(int(ev["seed"]) for ev in runs)) + on_gpu(runs)
            eps = max(float(ev["privacy"]["epsilon_pld"]) for ev in runs)
            lines.append(f"| {ref} | {row.label} | {len(runs)} ({seeds}) | "
                         f"{'∞' if math.isinf(eps) else f'{eps:.2f}'} | {cell(runs, 'acc_logreg')} | "
                         f"{cell(runs, 'acc_mlp')} | {cnn} |")
    return "\n".join([*lines, "", "Commands (add `seed=<k>`):", "", "```bash", "\n\n".join(commands), "```"])


# the summary on docs/utility.md: per (dataset, ε), the class-Gaussian alone, the DP-SWD generator's warm start at
# share 0.75 (the share of the preset `fmnist_dpswd_warm`, fixed on MNIST) and its OT phase alone
SUMMARY_PAGE = DOCS / "utility.md"
SUMMARY_BEGIN, SUMMARY_END = "<!-- warm-summary:begin -->", "<!-- warm-summary:end -->"
SUMMARY = (("class-Gaussian alone", "(a) class-Gaussian alone"),
           ("DP-SWD warm start, share 0.75", "(c) DP-SWD generator, warm-up + OT, share 0.75"),
           ("DP-SWD, OT alone (1 epoch)", "(b) DP-SWD generator, OT alone (1 epoch)"))


def summary(store: list[dict]) -> str:
    """LogReg (mean ± std over the stored runs) of the three rows of every section that ``SUMMARY`` names."""
    lines = ["| (dataset, ε) | " + " | ".join(head for head, _ in SUMMARY) + " |", "|---" * (len(SUMMARY) + 1) + "|"]
    for title, rows in SECTIONS:
        values = []
        for _, label in SUMMARY:
            row = next((r for r in rows if r.label.startswith(label)), None)
            runs = runs_of(row.claim, store) if row else []
            values.append(cell(runs, "acc_logreg") if runs else "not run")
        lines.append(f"| {title} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def write_block(doc: Path, block: str) -> None:
    write_between(doc, BEGIN, END, block, append=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--doc", type=Path, default=NOTE, help="the page whose markers get the table")
    args = ap.parse_args(argv)
    store = load_store()
    block = table(store)
    write_block(args.doc, block)
    write_between(SUMMARY_PAGE, SUMMARY_BEGIN, SUMMARY_END, summary(store), append=False)
    print(block)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
