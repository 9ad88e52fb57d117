"""docs/benchmark.md: dpgen's private families on DPImageBench's protocol beside the benchmark's published table.

``dpgen reproduce dpimagebench collect RUN_DIR...`` stores the evidence of finished ``evaluator=dpimagebench``
runs (the same fields as the scoreboard's store, :func:`dpgen.reproduce.evidence.evidence_from_run`) in
``evidence/dpimagebench/`` and re-renders the page; ``render`` rebuilds the block between
``<!-- benchmark:start -->`` and ``<!-- benchmark:end -->`` from the store alone; ``check`` exits 1 when the page
and the store disagree.  Nothing on the page is typed: the published rows are the benchmark's README (§7,
Gong, Li, Lin, Wang; CCS 2025), quoted as published numbers; every dpgen cell is a stored run (its command,
seed, run time, schedule and its "full protocol" / "shortened protocol: …" label) or "not run" with the
command that fills it.

A run belongs to a cell (family × dataset × ε) when its experiment is the family's preset for the dataset, its
overrides include the family's (a warm start, say), its resolved config has ``evaluator=dpimagebench``,
``dataset.validation_size=5000`` and the dataset, and its target ε is the cell's.  Any other override is shown with the run (evaluator.* shortenings are also in the
protocol label the evaluator wrote).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..paths import ROOT
from .evidence import collect, report_collected, stored_number
from .markers import between, replace_between, wrapped_prose
from .store import STORE, effective_overrides, load_store

BENCH_STORE = STORE / "dpimagebench"
PAGE = ROOT / "docs" / "benchmark.md"
START, END = "<!-- benchmark:start -->", "<!-- benchmark:end -->"
TARGET = "dpgen.eval.dpimagebench.DPImageBenchEvaluator"
VALIDATION_SIZE = 5000
EPSILONS = (1.0, 10.0)
DATASETS = {"mnist": ("MNIST", "dpgen.data.datasets.mnist"),
            "fashion_mnist": ("F-MNIST", "dpgen.data.datasets.fashion_mnist")}
SOURCE = ("DPImageBench (Gong, Li, Lin, Wang; CCS 2025), README §7 \"Main Results\": accuracy (%) under ε = 1 / 10 "
          "(δ = 1e-5), mean over ResNet, WRN and ResNeXt selected on the sensitive validation split; FID at ε = 10")

# (method, public data, MNIST ε=1, ε=10, F-MNIST ε=1, ε=10, FID MNIST, FID F-MNIST) as published
PUBLISHED = (
    ("DP-MERF", "ImageNet-32", 80.3, 81.3, 62.2, 62.2, 106.3, 106.4),
    ("DP-NTK", "ImageNet-32", 50.0, 91.3, 64.4, 76.3, 69.2, 120.5),
    ("DP-Kernel", "ImageNet-32", 94.0, 93.6, 68.4, 70.0, 38.9, 74.2),
    ("PE", "foundation model", 27.9, 32.7, 47.9, 57.8, 45.3, 23.1),
    ("GS-WGAN", "ImageNet-32", 72.4, 75.3, 52.7, 56.7, 47.7, 97.2),
    ("DP-GAN", "ImageNet-32", 92.4, 92.7, 71.8, 70.3, 30.3, 76.9),
    ("DPDM", "none", 89.2, 97.7, 76.4, 85.6, 4.4, 17.1),
    ("DP-FETA", "none", 95.6, 98.1, 81.7, 87.3, 3.4, 13.2),
    ("PDP-Diffusion", "ImageNet-32", 94.5, 97.4, 79.2, 85.4, 3.8, 6.2),
    ("DP-LDM (SD)", "ImageNet-32", 78.8, 94.4, 75.9, 81.6, 18.7, 20.1),
    ("DP-LDM", "ImageNet-32", 44.2, 95.5, 62.3, 86.3, 99.1, 53.2),
    ("DP-LoRA", "ImageNet-32", 82.2, 97.1, 63.5, 83.8, 95.4, 43.7),
    ("PrivImage", "ImageNet-32", 94.0, 97.8, 79.9, 87.1, 2.3, 5.3),
)


@dataclass(frozen=True)
class Family:
    """One dpgen family: its preset per dataset (``experiment`` + the overrides that pick the dataset)."""

    name: str
    presets: dict[str, tuple[str, tuple[str, ...]]]
    public_data: str

    def command(self, dataset: str, eps: float) -> str:
        experiment, extra = self.presets[dataset]
        return " ".join(["python train.py", f"experiment={experiment}", *extra, "evaluator=dpimagebench",
                         f"dataset.validation_size={VALIDATION_SIZE}", f"accountant.epsilon={eps:g}"])


# the DP-SWD generator warm-started from the class-Gaussian (the warm-start note, docs/research/): half of ε on the
# moment release, a 2000-step warm-up fit, one epoch of class-partitioned DP-SWD at lr 1e-4
WARM_DPSWD = ("model/warm_start=class_gaussian", "model.warm_start.representation.n_components=100",
              "model.warm_start.representation.center=0.0", "model.warm_start.epsilon_share=0.5",
              "model.warm_start.steps=2000", "model.epochs=1", "model.lr=1e-4")

FAMILIES = (
    Family("DP class-Gaussian (one release of class moments)",
           {"mnist": ("mnist_moments", ()), "fashion_mnist": ("mnist_moments", ("dataset=fashion_mnist",))}, "none"),
    Family("DP-SWD generator", {"mnist": ("mnist_dpswd", ()), "fashion_mnist": ("fmnist_dpswd", ())}, "none"),
    Family("DP-SWD generator, warm-started (share 0.5)",
           {"mnist": ("mnist_dpswd_partition", WARM_DPSWD),
            "fashion_mnist": ("mnist_dpswd_partition", ("dataset=fashion_mnist", *WARM_DPSWD))}, "none"),
    Family("DP-Sinkhorn", {"mnist": ("mnist_dpsinkhorn", ()), "fashion_mnist": ("fmnist_dpsinkhorn", ())}, "none"),
    Family("DPSWflow-r", {"mnist": ("mnist_dpswflow_r", ()), "fashion_mnist": ("fmnist_dpswflow_r", ())},
           "half of the training split (its autoencoder)"),
    Family("DPSWgen", {"mnist": ("mnist_dpswgen", ()), "fashion_mnist": ("fmnist_dpswgen", ())},
           "half of the training split (its autoencoder)"),
)


# ------------------------------------------------------------------------------------ matching
def cell_of(ev: dict) -> tuple[Family, str, float] | None:
    """The (family, dataset, ε) cell of a stored run, or None when it is not a run of this page."""
    cfg = ev.get("config") or {}
    if cfg.get("evaluator._target_") != TARGET or str(cfg.get("dataset.validation_size")) != str(VALIDATION_SIZE):
        return None
    eps = stored_number((ev.get("privacy") or {}).get("target_epsilon"))
    dataset = next((d for d, (_, target) in DATASETS.items() if cfg.get("dataset._target_") == target), None)
    if eps is None or dataset is None or eps not in EPSILONS:
        return None
    experiment = next((o.split("=", 1)[1] for o in ev.get("overrides") or [] if o.startswith("experiment=")),
                      ev.get("experiment"))
    overrides = set(effective_overrides(ev))
    for family in FAMILIES:
        preset, extra = family.presets[dataset]
        if preset == experiment and all(o in overrides for o in extra if not o.startswith("dataset=")):
            return family, dataset, eps
    return None


def extra_overrides(ev: dict, family: Family, dataset: str) -> list[str]:
    """The run's overrides beyond the cell's command (its shortenings and other changes)."""
    base = {"evaluator=dpimagebench", f"dataset.validation_size={VALIDATION_SIZE}", f"dataset={dataset}",
            *family.presets[dataset][1]}
    return [o for o in effective_overrides(ev) if o not in base and not o.startswith("accountant.epsilon=")]


def skip_reason(ev: dict) -> str | None:
    """None for a run of a cell of the page (what ``collect`` stores), else why not."""
    if cell_of(ev) is not None:
        return None
    return (f"not a DPImageBench cell (needs evaluator=dpimagebench, dataset.validation_size={VALIDATION_SIZE}, "
            "MNIST or F-MNIST, ε = 1 or 10, a family preset)")


# ------------------------------------------------------------------------------------ rendering
def _pct(v) -> str:
    x = stored_number(v)
    return "—" if x is None else f"{100 * x:.1f}"


def device_of(ev: dict) -> str:
    """Where a stored run ran: the GPU's name (``make gpu-bench`` records it), else cpu | cuda."""
    return str(ev.get("device_name") or {"cuda": "a GPU"}.get(str(ev.get("device")), "CPU"))


def _where(ev: dict) -> str:
    return "a shared 2-core CPU" if device_of(ev) == "CPU" else device_of(ev)


def _fid_text(m: dict) -> str:
    """``FID 260.0 (floor 3.1)``: every FID beside the real-vs-real FID of its reference set (runs stored before
    the floor was measured are marked ``†``: floor not measured)."""
    fid = stored_number(m.get("fid"))
    if fid is None:
        return ""
    floor = stored_number(m.get("fid_real_vs_real"))
    return f"; FID {fid:.1f}" + (f" (floor {floor:.1f})" if floor is not None else "†")


def _cell_text(ev: dict, ref: str) -> str:
    m = ev.get("metrics") or {}
    label = str(m.get("dpimagebench_protocol", ""))
    kind = "full" if label.endswith("full protocol") else ("shortened" if label.startswith("shortened")
                                                           else "other numerics")
    text = (f"{_pct(m.get('acc_dpimagebench_val_mean'))} ± {_pct(m.get('acc_dpimagebench_val_std'))} / "
            f"{_pct(m.get('acc_dpimagebench_syn_mean'))} ± {_pct(m.get('acc_dpimagebench_syn_std'))}"
            + _fid_text(m))
    where = "" if device_of(ev) == "CPU" else f"{device_of(ev)}, "  # the page says: the rest ran on a CPU
    return f"{text} ({kind}, {where}[{ref}])"


def _holdout_note(ev: dict) -> str | None:
    """For a cell stored with fewer than 60,000 synthetic images and a label that predates the statement: how its
    split differs from the benchmark's positional one (None: the label says it, or nothing differs)."""
    label = str((ev.get("metrics") or {}).get("dpimagebench_protocol", ""))
    n = (ev.get("config") or {}).get("evaluator.n_synthetic")
    if n is None or int(n) >= 60000 or "its split would train on" in label:
        return None
    n, theirs = int(n), "all of them, holding none out" if int(n) <= 55000 else "the first 55,000"
    return (f"hold-out: 1/12 of the {n} synthetic images held out for the synthetic selection; the benchmark's "
            f"positional split would train on {theirs}")


def _item(text: str, first: str, rest: str) -> list[str]:
    """A list item as lines of at most 110 characters (a code span may break across lines: it reads the same)."""
    return textwrap.wrap(text, 110, initial_indent=first, subsequent_indent=rest, break_long_words=False,
                         break_on_hyphens=False)


def render_block(evidence: list[dict]) -> str:
    lines = ["### Published (not run here)", "",
             f"Published numbers, quoted from {SOURCE}. No optimal-transport method is among them.", "",
             "| method | public data | MNIST ε = 1 / 10 | F-MNIST ε = 1 / 10 | FID ε = 10, MNIST / F-MNIST |",
             "|---|---|---|---|---|"]
    for name, pub, m1, m10, f1, f10, fm, ff in PUBLISHED:
        lines.append(f"| {name} | {pub} | {m1:.1f} / {m10:.1f} | {f1:.1f} / {f10:.1f} | {fm:.1f} / {ff:.1f} |")
    runs: list[tuple[str, dict, Family, str, float]] = []
    cells: dict[tuple[str, str, float], list[str]] = {}
    for ev in evidence:
        found = cell_of(ev)
        if found is None:
            continue
        family, dataset, eps = found
        ref = f"b{len(runs) + 1}"
        runs.append((ref, ev, family, dataset, eps))
        cells.setdefault((family.name, dataset, eps), []).append(_cell_text(ev, ref))
    lines += ["", "### dpgen on this protocol (measured here)", "",
              wrapped_prose(
                  "Each cell: ONE run; its test accuracy (%) as mean ± std over that run's classifiers (not over runs: "
                  "a shortened run's classifiers can disagree by many points, e.g. [b7]'s two, one of which had not "
                  "converged after its 2 epochs; a rerun of a cell can move by as much), selected on the **sensitive validation "
                  "split — not covered by the privacy guarantee** (as the benchmark reports it) / selected on the "
                  "**held-out synthetic images — covered** (post-processing); FID against the sensitive training "
                  "images (**reads sensitive data**); *full* protocol (the benchmark's sizes and numerics), "
                  "*shortened* (the run's label below says what was shortened) or *other numerics* (the "
                  "benchmark's sizes, numerics the label names); [bN] is the run below; a FID marked † was stored before its real-vs-real floor "
                  "was measured (floor not measured). Shortened numbers are not comparable with the "
                  "published rows."), "",
              "| family | public data | MNIST ε = 1 | MNIST ε = 10 | F-MNIST ε = 1 | F-MNIST ε = 10 |",
              "|---|---|---|---|---|---|"]
    not_run = []
    for family in FAMILIES:
        row = [family.name, family.public_data]
        for dataset in DATASETS:
            for eps in EPSILONS:
                got = cells.get((family.name, dataset, eps))
                row.append("<br>".join(got) if got else "not run")
                if not got:
                    not_run.append(family.command(dataset, eps))
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "### The runs", ""]
    if not runs:
        lines.append("None stored yet.")
    for ref, ev, family, dataset, eps in runs:
        m = ev.get("metrics") or {}
        runtime = stored_number(ev.get("runtime_s"))
        extra = extra_overrides(ev, family, dataset)
        item = [f"**[{ref}]** {family.name}, {DATASETS[dataset][0]}, ε = {eps:g} (δ = "
                f"{(ev.get('privacy') or {}).get('delta')}, {(ev.get('privacy') or {}).get('guarantee')}); "
                f"seed {ev.get('seed')}; run time {'—' if runtime is None else f'{runtime / 60:.0f} min'} "
                f"(wall clock, training and evaluation, on {_where(ev)}); code {ev.get('git_commit')}, "
                f"{ev.get('date_utc')}",
                f"command: `{ev.get('command')}`",
                f"schedule: {m.get('dpimagebench_protocol')}",
                *([holdout] if (holdout := _holdout_note(ev)) else []),
                *([f"FID: {m.get('fid_n_generated')} synthetic vs {m.get('fid_n_reference')} sensitive training "
                   f"images; real-vs-real floor {stored_number(m['fid_real_vs_real']):.1f} at "
                   f"{str(m.get('fid_real_vs_real_sizes', '')).split(' reference')[0]}"]
                  if stored_number(m.get("fid_real_vs_real")) is not None else []),
                f"selected epochs: {m.get('dpimagebench_val_selected_epochs')} (sensitive validation), "
                f"{m.get('dpimagebench_syn_selected_epochs')} (synthetic hold-out)",
                *([f"overrides beyond the cell's command: `{' '.join(extra)}`"] if extra else [])]
        lines += _item(item[0], "- ", "  ")
        for sub in item[1:]:
            lines += _item(sub, "    - ", "      ")
    lines += ["", "### Not run: the commands that fill the open cells (the full protocol, a GPU)", ""]
    lines += [*textwrap.wrap("Prepared, not measured: `make gpu-bench CELL=<family>:<dataset>:<eps>` runs one of them on "
                             "a GPU (the benchmark's numerics, fp32; as many of its classifiers as the lease fits by "
                             "the estimate above, all three being the full protocol), stores it with the GPU's "
                             "name and renders this page; `make gpu-bench ARGS=--dry-run` lists what it would run. The "
                             "first cells to fill: `class_gaussian:mnist:10` and `dpswd_warm:mnist:10`.", 110,
                             break_long_words=False, break_on_hyphens=False), ""]
    lines += [line for c in not_run for line in _item(f"`{c}`", "- ", "  ")] or ["Every cell holds a run."]
    return "\n".join(lines)


def render(page: Path = PAGE, store: Path = BENCH_STORE) -> bool:
    """Rewrite the generated block of ``page``; True when it changed."""
    text = page.read_text()
    new = replace_between(text, START, END, render_block(load_store(store)), page=page)
    if new != text:
        page.write_text(new)
        return True
    return False


def stale(page: Path = PAGE, store: Path = BENCH_STORE) -> bool:
    return between(page.read_text(), START, END) != render_block(load_store(store))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="store the evidence of finished evaluator=dpimagebench run folders, then render")
    c.add_argument("runs", nargs="+", type=Path)
    c.add_argument("--commit", help="git commit the runs were made with, when results.json records none")
    sub.add_parser("render", help="rebuild the generated block of docs/benchmark.md from the store")
    sub.add_parser("check", help="exit 1 when docs/benchmark.md differs from a render of the store")
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        report_collected(*collect(args.runs, BENCH_STORE, args.commit, skip_reason))
    if args.cmd in ("collect", "render"):
        print("updated docs/benchmark.md" if render() else "docs/benchmark.md unchanged")
        return 0
    if stale():
        print("docs/benchmark.md differs from the evidence store: run `dpgen reproduce dpimagebench render`",
              file=sys.stderr)
        return 1
    print("docs/benchmark.md matches the evidence store")
    return 0
