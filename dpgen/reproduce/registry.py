"""The papers' numbers and the scoreboard's table layout: data only, plus its validation.

The registry declares every row once: the paper's number and where the paper prints it, the
tolerance, and which experiment (+ overrides, + resolved-config values) defines each of the three
cells "paper setting (ours)", "honest (ours)", "non-private (ours)".  How runs are matched to the
cells and how a row's verdict is computed: ``dpgen/reproduce/scoreboard.py`` (module docstring).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    """One number of the paper: ``key`` in results.json ``metrics``; ours × ``scale`` is in the paper's unit."""

    key: str
    paper: float
    label: str
    tolerance: float = 3.0          # in the paper's unit (points for accuracies)
    higher_is_better: bool = True   # accuracy: ours >= paper - tol; FID: ours <= paper + tol
    scale: float = 100.0
    requires: tuple[tuple[str, str], ...] = ()  # (metrics key, value) the run must report to be comparable
    not_comparable: str = ""        # why a run without ``requires`` is not judged
    text: str = ""                  # the number as the paper prints it (e.g. "94.0 ± 0"); default: ``paper``

    def within(self, ours: float) -> bool:
        return ours >= self.paper - self.tolerance if self.higher_is_better else ours <= self.paper + self.tolerance


ACC_DA = "acc_target"


def _fid(paper: float, tol: float) -> Metric:
    return Metric("fid", paper, "FID", tolerance=tol, higher_is_better=False, scale=1.0,
                  requires=(("fid_extractor", "inception"),),
                  not_comparable="domain-extractor FID: another scale than the paper's Inception FID")


@dataclass(frozen=True)
class Cell:
    """How a run of one cell is launched: ``python train.py experiment=<experiment> <overrides>``."""

    experiment: str
    overrides: tuple[str, ...] = ()
    vary: tuple[str, ...] = ()                  # override keys (fnmatch) allowed with any value
    config: tuple[tuple[str, str], ...] = ()    # resolved-config values the run must have

    def command(self) -> str:
        return " ".join(["python train.py", f"experiment={self.experiment}", *self.overrides])


@dataclass(frozen=True)
class FidRatio:
    """Judge a domain-FID row by its ratio to a reference cell (e.g. private / non-private of the same method)."""

    ref: Cell                       # the runs whose mean domain FID is the denominator
    paper_ref: float                # the paper's FID of the same reference
    ref_label: str                  # e.g. "DPSWflow-r ε = ∞ (ours)"
    # override keys the two groups must share: the same autoencoder, and FIDs of the same sample size (a FID's
    # small-sample bias grows as n_fid shrinks, so a ratio of FIDs of different n would measure that bias)
    pair: tuple[str, ...] = ("model.ae_*", "evaluator.fid.n_fid")


@dataclass(frozen=True)
class Explained:
    """A measured number (with its command) that accounts for the gap to the paper."""

    text: str
    command: str


@dataclass(frozen=True)
class Row:
    id: str
    table: str
    name: str
    metrics: tuple[Metric, ...]
    source: str                     # where the spec quotes the paper's number
    paper_private: bool
    paper: Cell | str               # a str says why the cell has no run definition
    honest: Cell | str
    nonprivate: Cell | str
    explained: Explained | None = None
    ratio: FidRatio | None = None


@dataclass(frozen=True)
class Table:
    id: str
    title: str
    note: str


CELLS = ("paper", "honest", "nonprivate")
VERDICTS = ("reproduced (within tolerance)", "explained by measurement", "open")
HEADERS = {"paper": "paper setting (ours)", "honest": "honest (ours)", "nonprivate": "non-private (ours)"}

TABLES = (
    Table("dpswd-t1", "DP-SWD (Rakotomamonjy & Ralaivola), Table 1 — digits domain adaptation, target accuracy (%)",
          "ε = 10, δ = 1e-5; 100 epochs; tolerance −3 points; ours: dpgen's held-out target test split "
          "(USPS test / MNIST test), one seed per run unless stated; paper: mean of 10 runs."),
    Table("dpswd-t2", "DP-SWD, Table 2 — MNIST / F-MNIST generator, downstream accuracy MLP / LogReg (%)",
          "ε = 10, δ = 1e-5; 60,000 balanced synthetic samples, real MNIST test set; tolerance −3 points."),
    Table("dpsinkhorn-t1", "DP-Sinkhorn (Cao et al.), Table 1 — FID / LogReg / MLP / CNN",
          "(10, 1e-5)-DP; accuracies in %, tolerance −3 points; FID is judged only when measured with "
          "Inception (tolerance +10), the offline domain FID is shown but not comparable. LogReg / MLP: "
          "scikit-learn fits on 10,000 samples unless the cell says `evaluator.protocol=torch`, the paper's own "
          "protocol (its `finalize_result.py`: 60,000 samples, generated pixels below 0 set to −1 on the [−1, 1] "
          "scale, early-stopped torch LogReg / MLP); that protocol on the REAL training images gives LogReg / MLP "
          "92.3 / 97.7 on MNIST and 84.0 / 88.4 on F-MNIST against the paper's real-data rows 92.2 / 97.5 and "
          "84.5 / 88.2 (`python scripts/real_data_protocol.py --dataset mnist --dataset fashion_mnist`)."),
    Table("dpswflow-t1", "DPSWflow (Sebag et al.), Table 1 — FID at ε = ∞ / 10 / 5",
          "FID of 10,000 samples (paper: Inception, unconditional, mean of 5 runs); tolerance +10; "
          "the offline domain FID is shown but not comparable, so each row is judged by its domain-FID ratio "
          "to the paired ε = ∞ run (same autoencoder). Caveat, measured: the runs so far use "
          "a short public autoencoder (`model.ae_steps=1200 model.ae_batch_size=64`; the paper trains 10⁶ "
          "steps), whose reconstructions of the real test set already have domain FID 82.8 on MNIST and 54.6 on F-MNIST "
          "(`python scripts/ae_fid_floor.py <run folder>`; the ε = ∞ DPSWflow-r runs are at 97.3 and 55.8). That "
          "floor is shared by both sides of a ratio and pulls it toward 1, i.e. it favours a \"reproduced\" "
          "verdict; the ratios are evidence about the flow, not a measurement of the paper's Inception FIDs. "
          "DPSWgen's paper cells run the released trainer's 35 generator steps (20 at ε = 5) and are shown with "
          "the released code's 25-image FID beside the 10,000-image one (docs/reproduction/dpswflow.md)."),
    Table("wdp-t2", "WDP (Yang, Qi & Zhou), Table 2 — DP-SGD CNN test accuracy (%)",
          "Paper ε (DP column) 2.2 MNIST / 2.9 F-MNIST, δ = 1e-5; tolerance −3 points."),
)

# one page per paper: docs/reproduction/<slug>.md holds the tables of that paper
PAGES = {"dp-swd": ("dpswd-t1", "dpswd-t2"), "dp-sinkhorn": ("dpsinkhorn-t1",), "dpswflow": ("dpswflow-t1",),
         "wdp": ("wdp-t2",)}
PAGE_TITLES = {"dp-swd": "DP-SWD (Rakotomamonjy & Ralaivola, ICML 2021)", "dp-sinkhorn": "DP-Sinkhorn (Cao et al., NeurIPS 2021)",
               "dpswflow": "DPSWflow (Sebag et al., TMLR)", "wdp": "Wasserstein DP (Yang, Qi & Zhou, AAAI 2024)"}

_BOX_T = (("dataset.target.layout", "mnist_box"),)   # M→U: USPS target in MNIST's 20×20 box geometry
_BOX_S = (("dataset.source.layout", "mnist_box"),)   # U→M: USPS source
_DPSWD_SPEC = "DP-SWD paper, Table 1"
_NOPAPER_NP = "— (non-private row: the non-private cell is the paper's setting)"
_NOHONEST_NP = "— (non-private row)"
_NO_DANN_PAPER = ("no paper preset: the released DP-DANN's fixed σ gives ε = 14.2 (M-U) / 12.5 (U-M) under its "
                  "own accounting (see below)")
_DA_VARY = ("model.epoch_length",)
_SHORT = ("trainer.max_steps", "model.steps", "model.epochs", "model.lr", "evaluator.*")


def _da_rows() -> list[Row]:
    rows = []
    for task, src, box, table in (("M→U", "mnist_usps", _BOX_T, {"dann": (93.9, 0), "swd": (95.5, 1),
                                                                    "dp_dann": (87.1, 2), "dpswd": (94.0, 0)}),
                                  ("U→M", "usps_mnist", _BOX_S, {"dann": (86.2, 2), "swd": (84.8, 2),
                                                                    "dp_dann": (73.5, 2), "dpswd": (83.4, 2)})):
        acc = {k: Metric(ACC_DA, v, "target acc.", text=f"{v:.1f} ± {sd}") for k, (v, sd) in table.items()}
        tid = task.replace("→", "").lower()
        explained = None
        if task == "M→U":
            explained = Explained(
                "under the paper's protocol (accuracy on the USPS training images the model adapted to, "
                "released `evaluate_data_classifier(target_loader)`) the same saved model scores 93.8 %, within "
                "the tolerance; on dpgen's held-out USPS test split 92.2 % (0.3 points short)",
                "dpgen reproduce da-layout <mnist_usps_swd run folder>/da_model.pt")
        rows += [
            Row(f"dpswd-t1-{tid}-swd", "dpswd-t1", f"{task} SWD", (acc["swd"],),
                _DPSWD_SPEC, False, _NOPAPER_NP, _NOHONEST_NP, Cell(f"{src}_swd", vary=_DA_VARY, config=box),
                explained=explained),
            Row(f"dpswd-t1-{tid}-dann", "dpswd-t1", f"{task} DANN", (acc["dann"],),
                _DPSWD_SPEC, False, _NOPAPER_NP, _NOHONEST_NP, Cell(f"{src}_dann", vary=_DA_VARY, config=box)),
            Row(f"dpswd-t1-{tid}-dpswd", "dpswd-t1", f"{task} DP-SWD",
                (acc["dpswd"],), _DPSWD_SPEC, True,
                Cell(f"{src}_dpswd_paper", vary=_DA_VARY, config=box),
                Cell(f"{src}_dpswd", vary=_DA_VARY, config=box),
                Cell(f"{src}_swd", vary=_DA_VARY, config=box)),
            Row(f"dpswd-t1-{tid}-dp-dann", "dpswd-t1", f"{task} DP-DANN",
                (acc["dp_dann"],), _DPSWD_SPEC, True, _NO_DANN_PAPER,
                Cell(f"{src}_dp_dann", vary=_DA_VARY, config=box),
                Cell(f"{src}_dann", vary=_DA_VARY, config=box)),
        ]
    return rows


def _t2(mlp: float, logreg: float) -> tuple[Metric, ...]:
    return (Metric("acc_mlp", mlp, "MLP"), Metric("acc_logreg", logreg, "LogReg"))


def _sinkhorn(fid: float, logreg: float, mlp: float, cnn: float) -> tuple[Metric, ...]:
    return (_fid(fid, 10.0), Metric("acc_logreg", logreg, "LogReg", text=f"{logreg:.1f}"),
            Metric("acc_mlp", mlp, "MLP", text=f"{mlp:.1f}"), Metric("acc_cnn", cnn, "CNN", text=f"{cnn:.1f}"))


_SINK_SPEC = "DP-Sinkhorn paper, Table 1"
# model.scaling: the ε-annealing factor; the released code runs GeomLoss' default 0.5, dpgen's default is 0.9
_SINK_VARY = (*_SHORT, "model.scaling")
_FLOW_SPEC = "DPSWflow paper, Table 1"
_FLOW_PAPER = {  # (dataset, method): FID at eps inf / 10 / 5
    ("mnist", "dpswflow_r"): (21, 70, 114), ("mnist", "dpswflow"): (73, 118, 171), ("mnist", "dpswgen"): (114, 124, 198),
    ("fmnist", "dpswflow_r"): (42, 88, 98), ("fmnist", "dpswflow"): (96, 98, 129), ("fmnist", "dpswgen"): (138, 170, 199),
}
_FLOW_NAMES = {"dpswflow_r": "DPSWflow-r", "dpswflow": "DPSWflow", "dpswgen": "DPSWgen"}


_FLOW_VARY = (*_SHORT, "model.ae_*")  # the autoencoder's schedule (shown in the cell; pairs the FID ratios)
# eps = 5 as the released configs run it (DPSWflow paper, the particle flow): flow-r / gen sigma 0.8 for 20 epochs;
# the one-shot DPSWflow the classical c S / eps at eps = 5
# DPSWgen's released latent trainer runs optim.iters generator steps of one batch each (35; 20 at eps = 5), not
# epochs (docs/reproduction/dpswflow.md): its paper cells pin the step count, so runs of the older 35-epoch
# presets (4,200 steps) stay out of them
_FLOW_EPS5 = {"dpswflow_r": ("privacy.paper_sigma=0.8", "privacy.paper_epsilon=5", "model.epochs=20"),
              "dpswgen": ("privacy.paper_sigma=0.8", "privacy.paper_epsilon=5", "model.steps=20"),
              "dpswflow": ("privacy.paper_epsilon=5",)}
_FLOW_PAPER_STEPS = {"dpswgen": (("model.steps", "35"),)}


def _flow_np_cell(ds: str, m: str) -> Cell:
    """ε = ∞ as the paper runs it: σ = 0, the unlabelled latent (unconditional FID); DPSWgen with the released
    generator's 64-d Gaussian input and its 35 generator steps, as its paper presets (so the FID ratio compares
    the noise alone)."""
    return Cell(f"{ds}_{m}", ("model.label_mode=none", "accountant.epsilon=null", "model.private=false",
                              *(("model.d_code=64", "model.steps=35") if m == "dpswgen" else ())), vary=_FLOW_VARY)


def _flow_rows() -> list[Row]:
    rows = []
    for (ds, m), fids in _FLOW_PAPER.items():
        dsn = {"mnist": "MNIST", "fmnist": "F-MNIST"}[ds]
        np_cell = _flow_np_cell(ds, m)
        inf_ref = FidRatio(_flow_np_cell(ds, "dpswflow_r"), _FLOW_PAPER[(ds, "dpswflow_r")][0],
                           f"{dsn} DPSWflow-r ε = ∞")
        own_ref = FidRatio(np_cell, fids[0], f"{dsn} {_FLOW_NAMES[m]} ε = ∞")
        for eps, fid in zip(("inf", "10", "5"), fids, strict=True):
            name = f"{dsn} {_FLOW_NAMES[m]}, ε = {'∞' if eps == 'inf' else eps}"
            metric = (_fid(fid, 10.0),)
            if eps == "inf":
                rows.append(Row(f"dpswflow-t1-{ds}-{m}-inf", "dpswflow-t1", name, metric, _FLOW_SPEC, False,
                                _NOPAPER_NP, _NOHONEST_NP, np_cell, ratio=None if m == "dpswflow_r" else inf_ref))
                continue
            paper_extra = _FLOW_EPS5[m] if eps == "5" else ()
            honest_extra = ("accountant.epsilon=5",) if eps == "5" else ()
            rows.append(Row(f"dpswflow-t1-{ds}-{m}-eps{eps}", "dpswflow-t1", name, metric, _FLOW_SPEC, True,
                            Cell(f"{ds}_{m}_paper", paper_extra, vary=_FLOW_VARY,
                                 config=_FLOW_PAPER_STEPS.get(m, ()) if eps == "10" else ()),
                            Cell(f"{ds}_{m}", honest_extra, vary=_FLOW_VARY), np_cell, ratio=own_ref))
    return rows


_WDP_SPEC = "WDP paper, Table 2"
_WDP_PAPER = ("the authors' recipe (batch-mean clipping, σ = 0.01, sparsified updates) is not implemented: "
              "dpgen trains per-example DP-SGD only (see below)")
_WDP_VARY = ("model.epochs", "model.batch_size", "model.lr", "accountant.data_dependent_reports")


def _wdp_rows() -> list[Row]:
    rows = []
    for ds, dsn, (nonpriv, priv) in (("mnist", "MNIST", (99, 96)), ("fmnist", "F-MNIST", (92, 90))):
        # the authors' plain SGD step (lr 0.01, WDP paper, Table 2); the preset's DP-SGD step (lr 1.0) diverges without noise
        np_cell = Cell(f"{ds}_dpsgd", ("model.private=false", "model.lr=0.01"), vary=_WDP_VARY)
        rows += [
            Row(f"wdp-t2-{ds}-dpsgd", "wdp-t2", f"{dsn} DP-SGD (private)",
                (Metric("test_accuracy", priv, "test acc."),), _WDP_SPEC, True, _WDP_PAPER,
                Cell(f"{ds}_dpsgd", vary=_WDP_VARY), np_cell),
            Row(f"wdp-t2-{ds}-sgd", "wdp-t2", f"{dsn} non-private", (Metric("test_accuracy", nonpriv, "test acc."),),
                _WDP_SPEC, False, _NOPAPER_NP, _NOHONEST_NP, np_cell),
        ]
    return rows


REGISTRY: tuple[Row, ...] = tuple(
    _da_rows()
    + [
        Row("dpswd-t2-b", "dpswd-t2", "DP-SWD-b (Bernstein)", _t2(76, 77), "DP-SWD paper, Table 2", True,
            Cell("mnist_dpswd_paper", vary=_SHORT),
            Cell("mnist_dpswd_partition", vary=_SHORT),  # the best honest DP-SWD preset (partition + orthogonal)
            Cell("mnist_swd", vary=_SHORT)),
        Row("dpswd-t2-c", "dpswd-t2", "DP-SWD-c (CLT)", _t2(77, 78), "DP-SWD paper, Table 2", True,
            Cell("mnist_dpswd_clt_paper", vary=_SHORT),
            Cell("mnist_dpswd_chernoff", vary=_SHORT),  # the CLT bound is not a guarantee; Chernoff is, at a close σ
            Cell("mnist_swd", vary=_SHORT)),
        Row("dpswd-t2-swd", "dpswd-t2", "SWD (non-private)", _t2(87, 82), "DP-SWD paper, Table 2", False,
            _NOPAPER_NP, _NOHONEST_NP, Cell("mnist_swd", vary=_SHORT),
            explained=Explained(
                "MLP 84.2 is within the tolerance; LogReg is 78.3 when fitted on all 60,000 synthetic samples but "
                "81.4 ± 0.5 (81.4 / 81.7 / 81.6 / 81.7 / 80.5, five draws of labels and classifier seed) when "
                "fitted on a balanced 10 % subsample (6,000), the LogReg protocol of DP-MERF's benchmark script "
                "that Table 2 cites (DP-SWD paper, Table 2) — within the tolerance of 82; the same saved "
                "generator (r4), evaluation only",
                "python train.py experiment=mnist_swd seed=S logger=local evaluator.fid.enabled=false "
                "'evaluator.classifiers=[logreg]' evaluator.n_synthetic=6000 "
                "trainer.resume=<mnist_swd run folder>/checkpoints/last.pt  # S = 0..4")),
        Row("dpswd-t2-fmnist-b", "dpswd-t2", "F-MNIST DP-SWD-b (Bernstein)", _t2(67, 66), "DP-SWD paper, Table 2",
            True, Cell("fmnist_dpswd_paper", vary=_SHORT), Cell("fmnist_dpswd", vary=_SHORT),
            Cell("fmnist_swd", vary=_SHORT)),
        Row("dpswd-t2-fmnist-c", "dpswd-t2", "F-MNIST DP-SWD-c (CLT)", _t2(67, 66), "DP-SWD paper, Table 2",
            True, Cell("fmnist_dpswd_clt_paper", vary=_SHORT), Cell("fmnist_dpswd", vary=_SHORT),
            Cell("fmnist_swd", vary=_SHORT)),
        Row("dpswd-t2-fmnist-swd", "dpswd-t2", "F-MNIST SWD (non-private)", _t2(77, 76), "DP-SWD paper, Table 2",
            False, _NOPAPER_NP, _NOHONEST_NP, Cell("fmnist_swd", vary=_SHORT)),
        Row("dpsinkhorn-t1-mnist", "dpsinkhorn-t1", "MNIST DP-Sinkhorn (m = 1)", _sinkhorn(48.4, 82.8, 82.7, 83.2),
            _SINK_SPEC, True, Cell("mnist_dpsinkhorn_paper", vary=_SINK_VARY),
            Cell("mnist_dpsinkhorn_long", vary=_SINK_VARY),  # the best honest DP-Sinkhorn preset (B = 16, 8000 steps)
            Cell("mnist_sinkhorn", vary=_SINK_VARY)),
        Row("dpsinkhorn-t1-fmnist", "dpsinkhorn-t1", "F-MNIST DP-Sinkhorn (m = 3)",
            _sinkhorn(128.3, 75.1, 74.6, 71.1), _SINK_SPEC, True, Cell("fmnist_dpsinkhorn_paper", vary=_SINK_VARY),
            Cell("fmnist_dpsinkhorn_long", vary=_SINK_VARY),  # the MNIST honest recipe, unchanged
            Cell("fmnist_sinkhorn", vary=_SINK_VARY)),
        Row("dpsinkhorn-t1-mnist-np", "dpsinkhorn-t1", "MNIST Sinkhorn non-private (m = 1)",
            _sinkhorn(54.2, 89.0, 89.0, 91.0), _SINK_SPEC, False, _NOPAPER_NP, _NOHONEST_NP,
            Cell("mnist_sinkhorn", vary=_SINK_VARY)),
        Row("dpsinkhorn-t1-fmnist-np", "dpsinkhorn-t1", "F-MNIST Sinkhorn non-private (m = 3)",
            _sinkhorn(63.8, 78.4, 78.4, 73.3), _SINK_SPEC, False, _NOPAPER_NP, _NOHONEST_NP,
            Cell("fmnist_sinkhorn", vary=_SINK_VARY)),
    ]
    + _flow_rows()
    + _wdp_rows()
)


def validate_registry(registry: tuple[Row, ...] = REGISTRY, tables: tuple[Table, ...] = TABLES) -> None:
    """Fails early on a malformed registry: unique ids, known tables, explanations that cite a number."""
    ids = [r.id for r in registry]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"scoreboard registry: duplicate row ids {sorted(dup)}")
    known = {t.id for t in tables}
    for r in registry:
        if r.table not in known:
            raise ValueError(f"scoreboard row {r.id}: unknown table {r.table!r} (one of {sorted(known)})")
        if r.explained is not None and (not re.search(r"\d", r.explained.text) or not r.explained.command.strip()):
            raise ValueError(f"scoreboard row {r.id}: an 'explained by measurement' note must cite a measured "
                             "number and the command that measured it")


def page_registry(slug: str, registry: tuple[Row, ...] = REGISTRY) -> tuple[Row, ...]:
    """The rows of one paper's page."""
    return tuple(r for r in registry if r.table in PAGES[slug])

