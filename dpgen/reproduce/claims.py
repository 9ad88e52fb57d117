"""dpgen's own utility numbers (README, docs/utility.md), each tied to the runs that measured it: data only.

A claim names how its runs were launched (a :class:`~dpgen.reproduce.registry.Cell`: preset + overrides), the
metric, how many runs it needs and the pages that print it.  ``dpgen reproduce collect`` stores a finished run
that matches a claim in the evidence store (``evidence/``) as it does for the papers' cells.
The check (``tests/tools/test_claims.py``) fails when

* a stored run's recorded configuration differs from what the preset composes NOW (a default it depends on
  changed: the number must be re-measured), or a claim has fewer stored runs than it needs;
* a page prints another number than its stored runs give (``text``: mean ± std over the runs, in %).
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from .registry import Cell
from .store import neutral

# the dated note that holds the warm-start grid and its investigation (docs/utility.md shows the summary)
WARM_NOTE = "docs/research/2026-11-warm-start.md"

# the evaluation every utility row of docs/utility.md uses (10,000 synthetic samples; LogReg / MLP; CPU budget)
EVAL = ("evaluator.n_synthetic=10000", "evaluator.classifiers=[logreg,mlp]", "evaluator.fid.enabled=false")
# the diagnostic rows' cheaper evaluation (LogReg only: the MLP took ~3 min of a shared core per run)
EVAL_LOGREG = ("evaluator.n_synthetic=10000", "evaluator.classifiers=[logreg]", "evaluator.fid.enabled=false")
# the same with the CNN (dpgen's small CNN, evaluator.cnn defaults)
EVAL_CNN = ("evaluator.n_synthetic=10000", "evaluator.classifiers=[logreg,mlp,cnn]", "evaluator.fid.enabled=false")
# settings such a run does not read (no FID, no CNN): a change there does not call for a re-measurement
NOT_READ = ("evaluator.fid.*", "evaluator.cnn.*")


@dataclass(frozen=True)
class Claim:
    id: str
    cell: Cell
    metric: str = "acc_logreg"
    docs: tuple[str, ...] = ()   # pages that print the number as ``text(runs)`` (headline claims)
    min_runs: int = 1
    not_read: tuple[str, ...] = NOT_READ  # config keys (fnmatch) the claim's runs do not depend on
    preset: str | None = None    # a preset that trains exactly the claim's command (its runs measured it)


def config_drift(claim: Claim, recorded: dict, now: dict) -> dict:
    """``{key: (recorded, now)}`` for every setting whose recorded value differs from the current composition:
    a changed value, a removed key, or a new key whose default is not off (null, false or ``off``: a new
    setting that is off by default changes nothing a run did).  Keys in ``claim.not_read`` and bookkeeping keys
    (:func:`~dpgen.reproduce.store.neutral`: where a run writes or computes, e.g. ``evaluator.workers``) are skipped."""
    out = {}
    for k in sorted(set(recorded) | set(now)):
        if neutral(k) or any(fnmatch.fnmatch(k, p) for p in claim.not_read):
            continue
        if k not in recorded and now[k] in (None, False, "off"):
            continue
        a, b = recorded.get(k, "<absent>"), now.get(k, "<absent>")
        if str(a) != str(b):
            out[k] = (a, b)
    return out


def text(runs: list[dict], metric: str) -> str:
    """How the pages print a claim: ``86.9 ± 0.4 %`` (sample std over the runs) or ``86.9 %`` for one run."""
    vals = [100.0 * float(r["metrics"][metric]) for r in runs]
    if len(vals) == 1:
        return f"{vals[0]:.1f} %"
    return f"{statistics.fmean(vals):.1f} ± {statistics.stdev(vals):.1f} %"


# warm-start measurements (the warm-start note, WARM_NOTE): the DP-SWD generator on MNIST at (10, 1e-5), OT phase
# shortened to one epoch (120 steps of B = 500; the preset runs 12)
_SHORT = ("model.epochs=1",)
_WARM = ("model/warm_start=class_gaussian", "model.warm_start.representation.n_components=100",
         "model.warm_start.representation.center=0.0")

# the DP-SWD generator's fix (a 2000-step warm-up fit, OT lr 1e-4), at a share of ε for the moment release
def _fix(share: float) -> tuple[str, ...]:
    return (*_SHORT, *_WARM, f"model.warm_start.epsilon_share={share}", "model.warm_start.steps=2000", "model.lr=1e-4")


_FMNIST = ("dataset=fashion_mnist",)  # the MNIST presets' settings on Fashion-MNIST (fixed a priori, not tuned)
_DPSINKHORN_WARM = ("model.steps=200", "model.noise_multiplier=null", *_WARM, "model.warm_start.epsilon_share=0.5",
                    "model.warm_start.batch_size=100")
_AE = ("model.ae_steps=1200", "model.ae_batch_size=64")  # the stored DPSWflow-family runs' public autoencoder

CLAIMS: tuple[Claim, ...] = (
    Claim("mnist-moments", Cell("mnist_moments", EVAL), docs=("README.md", "docs/utility.md"), min_runs=6),
    Claim("mnist-moments-eps5", Cell("mnist_moments", (*EVAL, "accountant.epsilon=5"))),
    Claim("mnist-dpswd-ot-short", Cell("mnist_dpswd_partition", (*EVAL, *_SHORT)), min_runs=3),
    *(Claim(f"mnist-dpswd-warm{int(100 * s)}-short",
            Cell("mnist_dpswd_partition", (*EVAL, *_SHORT, *_WARM, f"model.warm_start.epsilon_share={s}")))
      for s in (0.25, 0.5, 0.75)),
    *(Claim(f"mnist-dpswd-warm50-ot{n}",  # the same schedule (sigma) stopped after n of its 120 OT steps
            Cell("mnist_dpswd_partition", (*EVAL, *_SHORT, *_WARM, "model.warm_start.epsilon_share=0.5",
                                           f"trainer.max_steps={n}")))
      for n in (0, 60)),
    # the OT phase diagnosed: the warm-up fitted longer (2000 steps), a 10x smaller OT lr, and the same warm-up
    # continued by its OT steps (a resumed copy of the warm-up's run folder: a paired measurement); LogReg only
    Claim("mnist-dpswd-warm50-fit2000-ot0",
          Cell("mnist_dpswd_partition", (*EVAL_LOGREG, *_SHORT, *_WARM, "model.warm_start.epsilon_share=0.5",
                                         "model.warm_start.steps=2000", "trainer.max_steps=0"))),
    Claim("mnist-dpswd-warm50-fit2000-ot120-paired",
          Cell("mnist_dpswd_partition", (*EVAL_LOGREG, *_SHORT, *_WARM, "model.warm_start.epsilon_share=0.5",
                                         "model.warm_start.steps=2000"))),
    Claim("mnist-dpswd-warm50-lr1e-4",
          Cell("mnist_dpswd_partition", (*EVAL_LOGREG, *_SHORT, *_WARM, "model.warm_start.epsilon_share=0.5",
                                         "model.lr=1e-4"))),
    Claim("mnist-dpswd-warm50-fit2000-lr1e-4",  # the fix (README headline)
          Cell("mnist_dpswd_partition", (*EVAL, *_SHORT, *_WARM, "model.warm_start.epsilon_share=0.5",
                                         "model.warm_start.steps=2000", "model.lr=1e-4")),
          docs=("README.md", "docs/utility.md"), min_runs=3),
    # its warm-up alone (n = 0) and the same warm-up continued by n of its 120 OT steps (resumed copies of the
    # warm-up's run folder: paired; n = 120 is the whole schedule, stated so that it is told apart from a fresh run)
    *(Claim(f"mnist-dpswd-warm50-fit2000-lr1e-4-ot{n}",
            Cell("mnist_dpswd_partition", (*EVAL, *_SHORT, *_WARM, "model.warm_start.epsilon_share=0.5",
                                           "model.warm_start.steps=2000", "model.lr=1e-4", f"trainer.max_steps={n}")))
      for n in (0, 30, 60, 120)),
    # the same at epsilon = 1 (its warm-up alone, and a resumed copy of it run to the end: paired), beside the
    # class-Gaussian alone at epsilon = 1
    Claim("mnist-moments-eps1", Cell("mnist_moments", (*EVAL, "accountant.epsilon=1")), docs=("docs/utility.md",),
          min_runs=3),
    *(Claim(f"mnist-dpswd-warm50-fit2000-lr1e-4-eps1{tag}",
            Cell("mnist_dpswd_partition", (*EVAL, *_SHORT, *_WARM, "model.warm_start.epsilon_share=0.5",
                                           "model.warm_start.steps=2000", "model.lr=1e-4", "accountant.epsilon=1",
                                           *extra)), docs=(WARM_NOTE,), min_runs=3)
      for tag, extra in (("", ()), ("-ot0", ("trainer.max_steps=0",)))),
    # DP-Sinkhorn warm-started (share 0.5), shortened to 200 OT steps and a warm-up of 100 samples per fit step
    *(Claim(f"mnist-dpsinkhorn-warm50-200{tag}",
            Cell("mnist_dpsinkhorn", (*EVAL, "model.steps=200", "model.noise_multiplier=null", *_WARM,
                                      "model.warm_start.epsilon_share=0.5", "model.warm_start.batch_size=100", *extra)),
            **({"docs": ("README.md", "docs/utility.md"), "min_runs": 3} if not extra else {}))
      for tag, extra in (("", ()), *((f"-ot{n}", (f"trainer.max_steps={n}",)) for n in (0, 50, 100, 200)))),
    # DPSWgen warm-started (share 0.5, 2000 fit steps as the DP-SWD generator's fix, the preset's OT schedule and lr),
    # its autoencoder as the stored OT-alone run's (1200 steps, batch 64); the warm-up alone was evaluated by
    # `dpgen evaluate` with the FID off, the paired run (a copy of its folder resumed) with the FID off
    Claim("mnist-dpswgen-warm50-fit2000-ot0",
          Cell("mnist_dpswgen", ("model.ae_steps=1200", "model.ae_batch_size=64",
                                 "evaluator.classifiers=[logreg,mlp]", "evaluator.n_synthetic=10000", *_WARM,
                                 "model.warm_start.steps=2000", "trainer.max_steps=0"))),
    Claim("mnist-dpswgen-warm50-fit2000",
          Cell("mnist_dpswgen", ("model.ae_steps=1200", "model.ae_batch_size=64",
                                 "evaluator.classifiers=[logreg,mlp]", "evaluator.n_synthetic=10000", *_WARM,
                                 "model.warm_start.steps=2000", "evaluator.fid.enabled=false"))),
    # the grid of the warm-start note (scripts/warm_start_table.py): the fix at the other shares; the CNN beside
    # LogReg / MLP for the class-Gaussian and the fix; DP-Sinkhorn at epsilon = 1; DPSWflow-r; Fashion-MNIST
    *(Claim(f"mnist-dpswd-warm{int(100 * s)}-fit2000-lr1e-4", Cell("mnist_dpswd_partition", (*EVAL, *_fix(s))),
            min_runs=3, docs=("README.md",) if s == 0.75 else ()) for s in (0.25, 0.75)),
    Claim("mnist-moments-cnn", Cell("mnist_moments", EVAL_CNN), metric="acc_cnn", min_runs=3),
    Claim("mnist-dpswd-warm50-fit2000-lr1e-4-cnn", Cell("mnist_dpswd_partition", (*EVAL_CNN, *_fix(0.5))),
          metric="acc_cnn", min_runs=3),
    Claim("mnist-dpsinkhorn-warm50-200-eps1",
          Cell("mnist_dpsinkhorn", (*EVAL, *_DPSINKHORN_WARM, "accountant.epsilon=1")), min_runs=3),
    *(Claim(f"{ds}-dpsinkhorn-{tag}-200", Cell(f"{ds}_dpsinkhorn", (*EVAL, *extra)), min_runs=3)
      for ds in ("mnist", "fmnist")
      for tag, extra in (("ot", ("model.steps=200", "model.noise_multiplier=null")), ("warm50", _DPSINKHORN_WARM))
      if (ds, tag) != ("mnist", "warm50")),  # MNIST's warm start: mnist-dpsinkhorn-warm50-200 above
    # the same 200 DP-Sinkhorn steps without privacy: what the loss and lr reach in 200 steps (LogReg only)
    Claim("mnist-sinkhorn-nonprivate-200", Cell("mnist_dpsinkhorn", (*EVAL_LOGREG, "model.steps=200",
                                                                      "model.private=false", "accountant.epsilon=null"))),
    # DPSWflow-r's curve (CPU, seed 0): its warm-up alone and copies of it resumed for n of its 4200 OT steps (paired;
    # n = 4200 continues the n = 1000 folder)
    *(Claim(f"mnist-dpswflow-r-warm50-ot{n}", Cell("mnist_dpswflow_r", (*_AE, *EVAL, *_WARM, f"trainer.max_steps={n}")))
      for n in (0, 250, 1000, 4200)),
    # DPSWgen's curves: copies of a warm-up's folder (seed 0) resumed for n of its 4200 OT steps (paired), at the
    # preset's OT lr and at 1e-4
    *(Claim(f"mnist-dpswgen-warm50-fit2000{lr}-ot{n}",
            Cell("mnist_dpswgen", (*_AE, "evaluator.classifiers=[logreg,mlp]", "evaluator.n_synthetic=10000", *_WARM,
                                   "model.warm_start.steps=2000", "evaluator.fid.enabled=false", *extra,
                                   f"trainer.max_steps={n}")))
      for lr, extra, steps in (("", (), (500, 1000, 2000, 4200)),
                               ("-lr1e-4", ("model.lr=1e-4",), (0, 500, 1000, 2000, 4200)))
      for n in steps),
    *(Claim(f"fmnist-{name}-eps{eps}", Cell(preset, (*EVAL, *_FMNIST, *extra, f"accountant.epsilon={eps}")),
            min_runs=3, docs=("docs/utility.md",) if (name, eps) == ("moments", 10) else ())
      for eps in (10, 1)
      for name, preset, extra in (("moments", "mnist_moments", ()),
                                  ("dpswd-ot-short", "mnist_dpswd_partition", _SHORT),
                                  ("dpswd-warm50-fit2000-lr1e-4", "mnist_dpswd_partition", _fix(0.5)))),
    # with the CNN beside LogReg / MLP (one evaluation, three classifiers): the class-Gaussian at the other
    # (dataset, epsilon) cells, the fix's other shares at epsilon = 1, and the two autoencoder families in full
    # (each: its warm-up alone, the warm start run to the end of its schedule, OT alone)
    Claim("mnist-moments-eps1-cnn", Cell("mnist_moments", (*EVAL_CNN, "accountant.epsilon=1")), min_runs=3),
    *(Claim(f"fmnist-moments-eps{eps}-cnn", Cell("mnist_moments", (*EVAL_CNN, *_FMNIST, f"accountant.epsilon={eps}")),
            min_runs=3) for eps in (10, 1)),
    *(Claim(f"mnist-dpswd-warm{int(100 * s)}-fit2000-lr1e-4-eps1-cnn",
            Cell("mnist_dpswd_partition", (*EVAL_CNN, *_fix(s), "accountant.epsilon=1")), min_runs=3)
      for s in (0.25, 0.75)),
    *(Claim(f"mnist-dpswflow-r-{tag}-cnn", Cell("mnist_dpswflow_r", (*_AE, *EVAL_CNN, *extra)), min_runs=3)
      for tag, extra in (("ot", ()), ("warm50", _WARM), ("warm50-ot0", (*_WARM, "trainer.max_steps=0")))),
    *(Claim(f"mnist-dpswgen-{tag}-cnn", Cell("mnist_dpswgen", (*_AE, *EVAL_CNN, *extra)), min_runs=3, docs=docs)
      for tag, extra, docs in (
          ("ot", (), ()),
          ("warm50-fit2000", (*_WARM, "model.warm_start.steps=2000"), ("README.md", WARM_NOTE)),
          ("warm50-fit2000-lr1e-4", (*_WARM, "model.warm_start.steps=2000", "model.lr=1e-4"), ("README.md", WARM_NOTE)),
          ("warm50-fit2000-ot0", (*_WARM, "model.warm_start.steps=2000", "trainer.max_steps=0"), ()))),
    # Fashion-MNIST: the fix's other shares, its warm-ups alone and (share 0.75, epsilon = 10) their paired
    # continuations; DP-Sinkhorn at epsilon = 1
    *(Claim(f"fmnist-dpswd-warm{int(100 * s)}-fit2000-lr1e-4-eps{eps}{tag}-cnn",
            Cell("mnist_dpswd_partition", (*EVAL_CNN, *_FMNIST, *_fix(s), f"accountant.epsilon={eps}", *extra)),
            min_runs=3, docs=(WARM_NOTE,) if tag == "-ot120" else ())
      for eps, s, tag, extra in ((1, 0.25, "", ()), (1, 0.75, "", ()), (1, 0.5, "-ot0", ("trainer.max_steps=0",)),
                                 (10, 0.5, "-ot0", ("trainer.max_steps=0",)), (10, 0.25, "", ()),
                                 (10, 0.75, "-ot0", ("trainer.max_steps=0",)),
                                 # the same warm-ups continued by their 120 OT steps (resumed copies: paired)
                                 (10, 0.75, "-ot120", ("trainer.max_steps=120",)))),
    # share 0.75 at epsilon = 10: the one warm start above the class-Gaussian alone, trained by `fmnist_dpswd_warm`
    Claim("fmnist-dpswd-warm75-fit2000-lr1e-4-eps10-cnn",
          Cell("mnist_dpswd_partition", (*EVAL_CNN, *_FMNIST, *_fix(0.75), "accountant.epsilon=10")), min_runs=3,
          docs=("docs/utility.md",), preset="fmnist_dpswd_warm"),
    *(Claim(f"{ds}-dpsinkhorn-{tag}-200-eps1-cnn",
            Cell(f"{ds}_dpsinkhorn", (*EVAL_CNN, *extra, "accountant.epsilon=1")), min_runs=3)
      for ds, tag, extra in (("fmnist", "ot", ("model.steps=200", "model.noise_multiplier=null")),
                             ("fmnist", "warm50", _DPSINKHORN_WARM),
                             ("mnist", "ot", ("model.steps=200", "model.noise_multiplier=null")))),
    # DPSWgen on Fashion-MNIST at epsilon = 10 (its own preset) and on MNIST at epsilon = 1, the MNIST runs'
    # autoencoder settings: OT alone, the warm start at OT lr 1e-4 (the lr carried over from MNIST at epsilon = 10,
    # not chosen on these cells) and, on Fashion-MNIST, its warm-up alone
    *(Claim(f"{ds}-dpswgen-{tag}{'-eps1' if eps == 1 else ''}-cnn",
            Cell(f"{ds}_dpswgen", (*_AE, *EVAL_CNN, *extra, *(("accountant.epsilon=1",) if eps == 1 else ()))),
            min_runs=3)
      for ds, eps in (("fmnist", 10), ("mnist", 1))
      for tag, extra in (("ot", ()),
                         ("warm50-fit2000-lr1e-4", (*_WARM, "model.warm_start.steps=2000", "model.lr=1e-4")),
                         ("warm50-fit2000-ot0", (*_WARM, "model.warm_start.steps=2000", "trainer.max_steps=0")))
      if not (eps == 1 and tag == "warm50-fit2000-ot0")),
)


# ---------------------------------------------------------------------------------------------- comparisons
# A sentence that compares two commands ("A beats B", "adds nothing") is recomputed from EVERY stored run of both
# commands on one kind of device, with the test the design calls for: paired (a continuation and the warm-up it
# continues, matched by seed) or Welch's t-test (independent runs).  The page holds the sentence between
# ``<!-- compare:<id> -->`` and ``<!-- /compare -->``; the check (tests/tools/test_claims.py) fails when the
# region lacks the test's own summary (:func:`summary`) or words a direction or a null the test does not give.

ALPHA = 0.05  # two-sided level of every comparison
METRIC_NAMES = {"acc_logreg": "LogReg", "acc_mlp": "MLP", "acc_cnn": "CNN"}
# words that state a direction (A above B) or an absolute null; what each needs from the test
DIRECTION_WORDS = ("beats", "beat ", "outperform", "better than", "ahead of", "improves on", "gains over")
ABSOLUTE_NULL_WORDS = ("adds nothing", "no effect", "identical to", "the same as", "equal to")


@dataclass(frozen=True)
class Comparison:
    """``a`` against ``b`` (claim ids) on ``metric``: ``design`` paired | welch, runs on ``device`` (cpu | cuda |
    not recorded: runs stored before the device was) only, printed on ``docs`` between the markers."""

    id: str
    a: str
    b: str
    metric: str = "acc_logreg"
    design: str = "welch"
    device: str = "cpu"
    docs: tuple[str, ...] = ()
    min_runs: int = 3  # per side (pairs, for a paired design)


@dataclass(frozen=True)
class Result:
    comparison: Comparison
    a: list[float]         # the metric in % per run (paired: in seed order, one per pair)
    b: list[float]
    test: str              # "paired t-test" | "Welch t-test"
    p: float               # two-sided
    diff: float            # mean of a - b, points
    excluded: int          # runs of either command on another kind of device (not pooled)

    @property
    def verdict(self) -> str:
        """``above`` | ``below`` (a significant difference at :data:`ALPHA`) | ``no significant difference``."""
        if self.p < ALPHA:
            return "above" if self.diff > 0 else "below"
        return "no significant difference"


def device_kind(ev: dict) -> str:
    """Where a stored run ran: cpu | cuda | not recorded (stored before runs recorded it)."""
    dev = str(ev.get("device") or "")
    return "cuda" if dev.startswith("cuda") else ("cpu" if dev == "cpu" else "not recorded")


def _t_pvalue(t: float, df: float) -> float:
    from scipy import stats

    return float(2 * stats.t.sf(abs(t), df)) if math.isfinite(t) else (0.0 if t != 0 else 1.0)


def welch(a: list[float], b: list[float]) -> tuple[float, float]:
    """Welch's t statistic and its two-sided p-value (Welch–Satterthwaite degrees of freedom)."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    d = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0:
        return (math.inf if d else 0.0), (0.0 if d else 1.0)
    t = d / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t, _t_pvalue(t, df)


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    """The paired t statistic of ``a - b`` (one pair per index) and its two-sided p-value (n - 1 df)."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    sd = statistics.stdev(d)
    if sd == 0:
        return (math.inf if statistics.fmean(d) else 0.0), (0.0 if statistics.fmean(d) else 1.0)
    t = statistics.fmean(d) / (sd / math.sqrt(len(d)))
    return t, _t_pvalue(t, len(d) - 1)


def compare(cmp: Comparison, runs_of: Callable[[str], list[dict]]) -> Result:
    """The comparison over every stored run of both commands on ``cmp.device`` (ValueError: too few runs);
    ``runs_of(claim_id)``: the stored runs of that claim's command (``reproduce.evidence.claim_runs``)."""
    runs_a, runs_b = runs_of(cmp.a), runs_of(cmp.b)
    on = [[ev for ev in runs if device_kind(ev) == cmp.device] for runs in (runs_a, runs_b)]
    excluded = len(runs_a) + len(runs_b) - len(on[0]) - len(on[1])

    def value(ev: dict) -> float:
        return 100.0 * float(ev["metrics"][cmp.metric])

    if cmp.design == "paired":  # a continuation and the warm-up it continues carry the same seed
        by_seed = [{ev["seed"]: value(ev) for ev in side} for side in on]
        seeds = sorted(set(by_seed[0]) & set(by_seed[1]))
        a, b = [by_seed[0][s] for s in seeds], [by_seed[1][s] for s in seeds]
        if len(seeds) < max(2, cmp.min_runs):
            raise ValueError(f"{cmp.id}: {len(seeds)} pair(s) of {cmp.a} and {cmp.b} on {cmp.device}, "
                             f"{cmp.min_runs} needed")
        _, p = paired(a, b)
        test = "paired t-test"
    elif cmp.design == "welch":
        a, b = [value(ev) for ev in on[0]], [value(ev) for ev in on[1]]
        if min(len(a), len(b)) < max(2, cmp.min_runs):
            raise ValueError(f"{cmp.id}: {len(a)} run(s) of {cmp.a} and {len(b)} of {cmp.b} on {cmp.device}, "
                             f"{cmp.min_runs} a side needed")
        _, p = welch(a, b)
        test = "Welch t-test"
    else:
        raise ValueError(f"{cmp.id}: design {cmp.design!r} is paired or welch")
    return Result(cmp, a, b, test, p, statistics.fmean(a) - statistics.fmean(b), excluded)


def _device_words(kind: str) -> str:
    return {"cpu": "on a CPU", "cuda": "on a GPU", "not recorded": "stored without their device"}[kind]


def summary(r: Result) -> str:
    """The test's own words, which the page must print: e.g. ``LogReg 77.1 ± 0.6 vs 76.6 ± 0.4 % (6 vs 6 runs on a
    CPU; Welch t-test: +0.5 points, p = 0.21, no significant difference at the 5 % level)``."""
    name, cmp = METRIC_NAMES.get(r.comparison.metric, r.comparison.metric), r.comparison

    def ms(v: list[float]) -> str:
        return f"{statistics.fmean(v):.1f} ± {statistics.stdev(v):.1f}"

    runs = (f"{len(r.a)} paired seeds, {_device_words(cmp.device)}" if cmp.design == "paired"
            else f"{len(r.a)} vs {len(r.b)} runs {_device_words(cmp.device)}")
    verdict = {"above": "significant at the 5 % level", "below": "significant at the 5 % level",
               "no significant difference": "no significant difference at the 5 % level"}[r.verdict]
    sign = "+" if r.diff >= 0 else "−"
    return (f"{name} {ms(r.a)} vs {ms(r.b)} % ({runs}; {r.test}: {sign}{abs(r.diff):.1f} points, "
            f"p = {r.p:.2g}, {verdict})")


def region(page_text: str, cmp_id: str) -> str | None:
    """The text between ``<!-- compare:<id> -->`` and the next ``<!-- /compare -->`` (None: no such region)."""
    start = f"<!-- compare:{cmp_id} -->"
    i = page_text.find(start)
    if i < 0:
        return None
    j = page_text.find("<!-- /compare -->", i)
    return None if j < 0 else page_text[i + len(start):j]


def check_text(text: str | None, r: Result) -> list[str]:
    """What a page's region says beyond (or other than) the test ``r``: empty when it says no more."""
    cmp = r.comparison
    if text is None:
        return [f"no <!-- compare:{cmp.id} --> ... <!-- /compare --> region"]
    flat = " ".join(text.split())
    low = flat.lower()
    problems = []
    if summary(r) not in flat:
        problems.append(f"the region does not print the test over every stored run: {summary(r)}")
    direction = [w.strip() for w in DIRECTION_WORDS if w in low]
    if direction and r.verdict != "above":
        problems.append(f"it says {direction[0]!r} where the {r.test} gives p = {r.p:.2g} ({r.verdict})")
    null = [w for w in ABSOLUTE_NULL_WORDS if w in low]
    if null:
        problems.append(f"it says {null[0]!r}: a test that finds no significant difference does not show there is "
                        "none (write 'no significant difference', or 'no measurable gain')")
    return problems


# the comparisons the README and docs/utility.md print
COMPARISONS: tuple[Comparison, ...] = (
    # fmnist_dpswd_warm against the class-Gaussian alone: CPU runs only (the class-Gaussian's GPU runs are not pooled)
    *(Comparison(f"fmnist-warm75-vs-class-gaussian-{METRIC_NAMES[m].lower()}",
                 "fmnist-dpswd-warm75-fit2000-lr1e-4-eps10-cnn", "fmnist-moments-eps10-cnn", metric=m,
                 docs=("README.md", "docs/utility.md") if m == "acc_logreg" else ("docs/utility.md",), min_runs=3)
      for m in ("acc_logreg", "acc_mlp", "acc_cnn")),
    # the warm start (share 0.75) against OT alone on the same 1-epoch schedule (MNIST, epsilon = 10)
    Comparison("mnist-warm75-vs-ot-alone", "mnist-dpswd-warm75-fit2000-lr1e-4", "mnist-dpswd-ot-short",
               device="not recorded", docs=("docs/utility.md",)),
    # the OT phase against the warm-up it continues (resumed copies of the warm-up's folder: paired by seed)
    Comparison("mnist-fix-ot-phase", "mnist-dpswd-warm50-fit2000-lr1e-4-ot120", "mnist-dpswd-warm50-fit2000-lr1e-4-ot0",
               design="paired", device="not recorded", docs=("README.md",), min_runs=2),
    Comparison("fmnist-warm75-ot-phase", "fmnist-dpswd-warm75-fit2000-lr1e-4-eps10-ot120-cnn",
               "fmnist-dpswd-warm75-fit2000-lr1e-4-eps10-ot0-cnn", design="paired", docs=("docs/utility.md",)),
)

