"""Empirical privacy audit of an experiment preset's private releases (dpgen.audit).

    dpgen audit experiment=digits_dpswd [--runs 200000] [--out outputs/audit]
    dpgen audit --conventions            # the paper conventions of DP-SWD paper, unit-norm assumption
    dpgen audit experiment=digits_dpswd --results RUN/results.json   # add an "audit" block
    dpgen audit --report A.json B.json ...  # docs/privacy/audit.md table + docs/figures/audit.png

The preset is composed with Hydra's compose API here (dpgen.audit has no Hydra).  The method object
is instantiated from the preset (no training) and its own schedule / calibration gives the noise,
sensitivity and beta a run would use; the audit then runs that release R times per side.
Every audit writes only its numbers (``AuditResult.asdict``): never a canary, an output or a record.
torch and the audit's maths are imported by the functions that run an audit (``--help`` needs neither).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from ..config import require_checkout
from ..errors import ConfigError
from ..paths import ROOT

DEFAULT_OUT = Path("outputs/audit")


def compose(overrides: list[str]):
    """The run's config (composed only: nothing is written to its output folder)."""
    from ..config import compose as compose_config

    return compose_config(overrides, data_root=os.environ.get("DPGEN_DATA_ROOT", "data"), output_dir="unused-output")


def _target(cfg) -> str:
    return str(cfg.model._target_).rsplit(".", 1)[-1]


def _scratch(fn, seed: int):
    """``fn(ctx)`` with a TrainContext whose run folder is a scratch folder, deleted afterwards."""
    import shutil
    import tempfile

    import torch

    from dpgen.logging import RunLogger
    from dpgen.methods.base import TrainContext

    DEFAULT_OUT.parent.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(dir=DEFAULT_OUT.parent))
    logger = RunLogger(run_dir)
    try:
        return fn(TrainContext(device=torch.device("cpu"), logger=logger, run_dir=run_dir, seed=seed, progress=False))
    finally:
        logger.finish()
        shutil.rmtree(run_dir, ignore_errors=True)


def _setup(method, data, ledger, seed: int) -> None:
    """The method's own ``setup`` (models, sampler, calibrated mechanisms; no release), in a scratch
    run folder that is deleted afterwards."""
    _scratch(lambda ctx: method.setup(data, ledger, ctx), seed)


def _replay_warm_start(method, data, ledger, seed: int):
    """A warm-started preset (``model.warm_start``): phase 1 as the run makes it, the DP class-Gaussian's
    moment release recorded in ``ledger`` (its output is discarded: the audit writes only numbers), so the
    method's mechanisms are calibrated on the run's ledger (phase 2: what phase 1 left).  Returns the
    DP class-Gaussian that made the release (its mechanism is audited), or None without a warm start."""
    warm = getattr(method, "warm_start", None)
    if warm is None:
        return None
    _scratch(lambda ctx: warm.release(data, ledger, ctx), seed)
    return warm.method


def _audit_class_moments(cg, data, runs: int, seed: int, preset: str, name: str) -> dict:
    """The class-moment release of a DP class-Gaussian ``cg`` (set up): 16 real private records and a canary
    RECORD, all through the run's public map (``cg.rep.encode``: centre, basis, clip to r).  The canary is
    the image at the corner of the value range along the first record's code, whose code the map clips to r
    when it can reach it (the worst case the map allows)."""
    from dpgen.audit import audit_class_moments

    mech = cg.mechanisms["moments"]
    real = data.private.read_outside_guarantee("the audit's canary codes", n=16, seed=seed)
    z = cg.rep.encode(real.x).double()  # 16 real private codes through the run's public map
    corner = cg.rep.decode(1e6 * z[:1] / z[0].norm().clamp_min(1e-12))  # an image in the value range
    canary = cg.rep.encode(corner).double()[0]
    return audit_class_moments(mech, z, real.y, canary_class=int(real.y[0]), runs=runs, seed=seed, preset=preset,
                               canary=canary, name=name).asdict()


def _audit_gradient_sum(out: list, mech, name: str, gen, runs: int, steps: int, compose_runs: int, seed: int,
                        preset: str) -> None:
    """DP-SGD's noisy gradient sum: one release and ``steps`` composed under the run's relation and the other one,
    then ``steps`` Poisson-sampled at the preset's q."""
    import torch

    from dpgen.audit import audit_gradient_sum_mechanism

    q = mech.sample_rate
    grads = torch.randn(max(2, round(mech.expected_batch_size)), 16, generator=gen, dtype=torch.float64)
    # the run's relation (the ledger's) and the other one: add/remove accounted with C, replace-one with 2C
    for rel in (mech.relation, "replace_one" if mech.relation == "add_remove" else "add_remove"):
        for t in sorted({1, steps}) if rel == mech.relation else (1,):
            out.append(audit_gradient_sum_mechanism(mech, grads, runs=runs if t == 1 else compose_runs, steps=t,
                                                    relation=rel, seed=seed, preset=preset, mechanism=name))
    out.append(audit_gradient_sum_mechanism(mech, grads, runs=compose_runs, steps=steps, sample_rate=q, seed=seed,
                                            preset=preset, mechanism=name))


def audit_preset(overrides: list[str], runs: int, seed: int, steps: int, compose_runs: int) -> list[dict]:
    """Audit every private release of one preset with the run's own mechanism objects: one release at
    the per-step noise (q = 1), and for the Gaussian releases also ``steps`` composed releases with the
    canary in every one (and, for DP-SGD, Poisson-sampled at the preset's q)."""
    import torch
    from hydra.utils import instantiate

    from dpgen.audit import audit_projection_mechanism, audit_sanitiser_mechanism
    from dpgen.privacy.mechanisms import GaussianProjectionRelease, OneShotProjectionRelease

    cfg = compose(overrides)
    preset = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "default")
    if not cfg.model.get("private", True):
        raise ConfigError(f"{preset}: model.private=false: the run adds no calibrated noise and claims no ε, so there "
                          "is nothing private to audit; audit a private preset (`dpgen presets` lists them)")
    data = instantiate(cfg.dataset)
    n_priv = len(data.private)
    ledger = instantiate(cfg.accountant, _convert_="all")  # a scratch ledger: the audit's releases go here
    method = instantiate(cfg.model, _convert_="all")
    kind = _target(cfg)
    out = []
    gen = torch.Generator().manual_seed(seed)
    phase_one = _replay_warm_start(method, data, ledger, seed)  # a warm start: the run's whole ledger, in order
    if phase_one is not None:
        out.append(_audit_class_moments(phase_one, data, runs, seed, preset,
                                        "DP class-Gaussian moment release (warm start, phase 1)"))

    if kind == "DPSWDGenerator":
        if method.make_feature_map is not None:
            raise SystemExit(f"{preset}: the feature-space DP-SWD generator releases learned features; audit the "
                             "pixel-space presets (digits_dpswd, mnist_dpswd)")
        _setup(method, data, ledger, seed)
        mech = method.mechanisms["projection"]
        real = data.private.read_outside_guarantee("the audit's canary rows", n=4, seed=seed)
        rows = method.rows(real.x, real.y).double()  # 4 real private rows through the run's row map
        from dpgen.audit.releases import antipodal_rows

        d0, d1 = antipodal_rows(rows, 0, 0.5)  # row 0 at norm 1/2, its antipode in D': ||x - x'|| = 1
        out.append(audit_projection_mechanism(mech, d0, d1, name="DP-SWD generator projection release", runs=runs,
                                              seed=seed, preset=preset, chunk=64,
                                              canary="row at norm 1/2 replaced by its antipode (||x - x'|| = 1)"))
    elif kind in ("DPSWFlowR", "DPSWGen", "DPSWFlow"):
        # the mechanism the method's setup builds (setup itself would first train the autoencoder)
        ae = cfg.model.get("autoencoder")
        d_lat = int(ae.latent_dim) if ae is not None else data.dim
        D = d_lat + (data.num_classes if method.latent.label_mode == "concat" else 0)
        if kind == "DPSWFlow":
            mech = OneShotProjectionRelease(ledger, dim=D, calibration=method.one_shot_settings.calibration,
                                            noise=method.noise,
                                            **method.privacy.dp.release_settings())
            name = "DPSWflow one-shot release (whole private set)"
        else:
            steps_run = method.steps_planned(n_priv)
            mech = GaussianProjectionRelease(ledger, dim=D, steps=steps_run,
                                             sample_rate=method.schedule.batch_size / n_priv,
                                             n_private=n_priv, row_diameter=2.0, noise=method.noise,
                                             **method.privacy.dp.release_settings())
            name = f"{'DPSWflow-r' if kind == 'DPSWFlowR' else 'DPSWgen'} per-step projection release"
        base = torch.randn(4, D, generator=gen, dtype=torch.float64)
        base = base / base.norm(dim=1, keepdim=True)  # latent rows on the unit sphere (what the flows release)
        from dpgen.audit.releases import antipodal_rows

        d0, d1 = antipodal_rows(base, 0, 1.0)
        out.append(audit_projection_mechanism(mech, d0, d1, name=name, runs=runs, seed=seed, preset=preset,
                                              canary="unit latent row replaced by its antipode (||x - x'|| = 2)"))
    elif kind == "DPSinkhorn":
        _setup(method, data, ledger, seed)
        mech = method.mechanisms["image_gradient"]
        shape = (method.schedule.batch_size, data.dim)
        for t in sorted({1, steps}):
            out.append(audit_sanitiser_mechanism(mech, shape=shape, runs=runs if t == 1 else compose_runs, steps=t,
                                                 seed=seed, preset=preset))
    elif kind in ("DPSGDClassifier", "DomainAdaptation"):
        # the run's own mechanism (DP-SGD's NoisyGradientSum; DP-SWD's projection release for the dpswd alignment),
        # built and calibrated by the method's setup (scratch ledger)
        _setup(method, data, ledger, seed)
        if kind == "DPSGDClassifier":
            mech, name = method.mechanisms["gradient"], "DP-SGD noisy sum (classifier)"
        else:
            mech, name = method.mechanisms["alignment"], "DP-SGD noisy sum (DP-DANN alignment)"
        if kind == "DomainAdaptation" and mech.kind == "gaussian_projection":  # the DP-SWD alignment: a Gaussian release of the target rows' projections
            from dpgen.audit.releases import antipodal_rows

            base = torch.randn(4, mech.dim, generator=gen, dtype=torch.float64)
            d0, d1 = antipodal_rows(base, 0, 0.5)  # rows of norm <= 1/2 (the alignment's clip): ||x - x'|| = 1
            out.append(audit_projection_mechanism(mech, d0, d1, name="DP-SWD alignment projection release (DA)",
                                                  runs=runs, seed=seed, preset=preset, chunk=64,
                                                  canary="target row at norm 1/2 replaced by its antipode (||x - x'|| = 1)"))
        elif mech.kind != "noisy_gradient_sum":
            what = "gradient" if kind == "DPSGDClassifier" else "alignment"
            raise SystemExit(f"{preset}: the preset's {what} release is {mech.kind} (not private); nothing to audit")
        else:
            _audit_gradient_sum(out, mech, name, gen, runs, steps, compose_runs, seed, preset)
    elif kind == "DPClassGaussian":
        _setup(method, data, ledger, seed)  # builds the representation and calibrates ClassMomentRelease
        if method.mechanisms["moments"].kind != "class_moments":
            raise SystemExit(f"{preset}: model.release={method.release_kind}: the audit covers release=moments")
        out.append(_audit_class_moments(method, data, runs, seed, preset, "DP class-Gaussian moment release"))
    else:
        raise SystemExit(f"{preset}: no audit for {kind} yet (audited: DPSWDGenerator, DPSWFlow, DPSWFlowR, DPSWGen, "
                         "DPSinkhorn, DPSGDClassifier, DomainAdaptation, DPClassGaussian)")
    rows = [r if isinstance(r, dict) else r.asdict() for r in out]
    for r in rows[1:] if phase_one is not None else []:  # the method's own releases: calibrated for what was left
        r["mechanism"] += " (warm start, phase 2)"
    return rows


CONVENTIONS = ("dpdann", "da_clt", "da_bernstein", "raw_pixels")


def audit_conventions(runs: int, seed: int, only: tuple[str, ...] = CONVENTIONS) -> list[dict]:
    """The paper conventions (DP-SWD paper), each at the paper's own noise and sensitivity bound.

    One release (q = 1); claimed: the paper's accounting corrected to reserve beta = delta/2 (2023 fix)."""
    import torch

    from dpgen.audit import audit_noisy_sum, audit_projection_release
    from dpgen.audit.conventions import batch_max_worst_case, raw_pixel_worst_case
    from dpgen.privacy.sensitivity import l2_sensitivity

    delta = 1e-5
    res = []
    # DA M-U (Table 2.2): B = 128, k = 200, 320-dim Sigmoid features, accountant with d = 784 at delta/2
    for bound, sigma in (("bernstein_code", 5.34), ("clt", 1.02)):
        if {"bernstein_code": "da_bernstein", "clt": "da_clt"}[bound] not in only:
            continue
        s = l2_sensitivity(200, 784, delta / 2, bound)
        d0, d1 = batch_max_worst_case(128, 320)
        r = audit_projection_release("DP-SWD DA projection release (M-U)", d0, d1, k=200, noise_std=sigma, sensitivity=s,
                                     delta=delta, delta_per_step=delta / 2, runs=runs, seed=seed, chunk=16,
                                     configuration=f"paper convention: rows / (2 max_batch ||g(x)||), sigma={sigma} "
                                                   f"({bound})",
                                     canary="D: 128 records with features 0.001*1; D': one replaced by features 1 "
                                            "(rescales every row)", preset="DA released code (M-U)")
        res.append(r.asdict())
    # DP-SWD generator on MNIST (Table 2 / DP-SWD paper, MNIST / F-MNIST generator): raw [0,1] pixels, k = 1000, d = 784
    # ("DP-SWD-b", sigma = 2.94; the CLT variant sigma = 0.84 has the same multiplier and a 3.5x larger violation).
    # Its claimed one-release epsilon is 8.25: certifying more than that needs >= 3.69 e^8.25 = 14,000
    # evaluation runs per side even at perfect separation (R >= 30,000); a smaller R (CPU budget) still gives a
    # valid, weaker bound: at most about log(R / 2 / 3.69) even at perfect separation.
    for bound, sigma in (("bernstein_code", 2.94),):
        if "raw_pixels" not in only:
            continue
        s = l2_sensitivity(1000, 784, delta / 2, bound)
        d0, d1 = raw_pixel_worst_case(2, 784)
        r = audit_projection_release("DP-SWD generator projection release (MNIST)", d0, d1, k=1000, noise_std=sigma,
                                     sensitivity=s, delta=delta, delta_per_step=delta / 2, runs=runs,
                                     seed=seed, chunk=32,
                                     configuration=f"paper convention: raw [0,1] pixels, no normalisation, sigma={sigma} "
                                                   f"({bound})",
                                     canary="all-black image replaced by all-white (||x - x'|| = 28)",
                                     preset="DP-SWD paper (MNIST)")
        res.append(r.asdict())
    # DP-SGD sum under replace-one adjacency accounted with sensitivity C (instead of 2C): what DP-DANN's
    # alignment does on main with accountant.sampling=without_replacement (calibrate(..., accountant="rdp")
    # with the multiplier of an add/remove sum); sigma = 2 so the claim is moderate.
    grads = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    for claimed_sens, label in () if "dpdann" not in only else ((2.0, "honest: replace-one accounted with 2C"),
                                (1.0, "mis-accounted: replace-one with sensitivity C (DP-DANN, sampling="
                                      "without_replacement, before the NoisyGradientSum migration)")):
        r = audit_noisy_sum(grads, clip_norm=1.0, noise_multiplier=2.0, delta=delta, relation="replace_one",
                            runs=max(runs, 200_000), seed=seed, claimed_sensitivity=claimed_sens, configuration=label,
                            mechanism="DP-SGD noisy sum (DP-DANN alignment)", preset="replace-one, C = 1, sigma = 2")
        res.append(r.asdict())
    return res


def audit_blackbox(overrides: list[str], runs: int, n_samples: int = 2000) -> list[dict]:
    """Train the preset's generator ``runs`` times without and ``runs`` times with one canary image
    (checkerboard, label 0) in the private set; score each trained generator by the nearest-neighbour
    distance of its label-0 samples to the canary.  Every run folder (logger files, checkpoint) lives
    in a temporary directory under outputs/audit/e2e and is deleted right after sampling."""
    import dataclasses
    import shutil
    import tempfile

    import torch
    from hydra.utils import instantiate

    from dpgen.audit.blackbox import blackbox_generator_audit
    from dpgen.data.base import PrivateSplit
    from dpgen.logging import RunLogger
    from dpgen.methods import loop
    from dpgen.methods.base import TrainContext

    cfg = compose(overrides)
    preset = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), "default")
    data = instantiate(cfg.dataset)
    private = data.private.read_outside_guarantee("the black-box audit: the private set with and without a canary")
    x, y, n = private.x, private.y, len(private)
    lo, hi = data.value_range
    c, h, w = data.image_shape
    canary = torch.full((c, h, w), lo)
    canary[:, ::2, ::2] = hi
    canary[:, 1::2, 1::2] = hi  # checkerboard: far from every digit
    with_canary = dataclasses.replace(data, private=PrivateSplit(torch.cat([x, canary[None].to(x.dtype)]),
                                                                 torch.cat([y, torch.zeros(1, dtype=y.dtype)])))
    scratch = DEFAULT_OUT / "e2e"
    scratch.mkdir(parents=True, exist_ok=True)

    def train_and_sample(include: bool, i: int):
        d = with_canary if include else data
        ledger = instantiate(cfg.accountant, _convert_="all")
        method = instantiate(cfg.model, _convert_="all")
        run_dir = Path(tempfile.mkdtemp(dir=scratch))
        logger = RunLogger(run_dir)
        try:
            ctx = TrainContext(device=torch.device("cpu"), logger=logger, run_dir=run_dir, seed=1000 + i,
                               log_every=10**9, checkpoint_every=10**9, progress=False)
            loop.train(method, d, ledger, ctx)
            samples, _ = method.sample(n_samples, labels=torch.zeros(n_samples, dtype=torch.long))
            return samples, float(ledger.epsilon())
        finally:
            logger.finish()
            shutil.rmtree(run_dir, ignore_errors=True)

    r = blackbox_generator_audit(train_and_sample, canary, runs, float(cfg.accountant.delta),
                                 mechanism=f"trained generator ({_target(cfg)}), end to end", preset=preset)
    r.extra.update({"overrides": " ".join(overrides), "n_samples": n_samples, "n_private": n})
    return [r.asdict()]


def add_to_results(results_path: Path, audits: list[dict]) -> None:
    res = json.loads(results_path.read_text())
    res["audit"] = {"note": "empirical 95% lower bounds on epsilon of this preset's releases (dpgen/audit/cli.py); "
                            "epsilon_claimed is the ledger's epsilon for the same audited releases",
                    "audits": audits}
    tmp = results_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(res, indent=2))
    tmp.replace(results_path)


def _fmt(x, nd=2):
    return "—" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) and math.isfinite(x) else str(x))


def _realised(r: dict) -> float | None:
    """Projection releases: the exact epsilon of a Gaussian whose sensitivity is the median realised
    projected difference (instead of the tail bound sqrt(w)): how much of the gap to the claim is the
    bound's slack rather than the audit's power."""
    e = r.get("extra", {})
    if e.get("projected_difference_median") is None:
        return None
    from dpgen.audit import gaussian_epsilon

    return gaussian_epsilon(e["projected_difference_median"] / (e["noise_scale"] * e["noise_std"]), r["delta"])


def _accountant(r: dict) -> str:
    """Which accountant the row's claim is under (the ledger's calibrating one: PLD for Poisson)."""
    cb = str(r.get("claimed_by", "RDP"))
    for a in ("PLD", "RDP"):
        if cb.upper().startswith(a) or cb.startswith(f"ledger {a}"):
            return a
    return "calibrating"


def _rdp(r: dict) -> float | None:
    rdp = r.get("extra", {}).get("epsilon_rdp")
    return r["epsilon_claimed"] if rdp is None and _accountant(r) == "RDP" else rdp


def report(paths: list[Path], md: Path, png: Path) -> None:
    rows = []
    for p in paths:
        rows += json.loads(p.read_text())["audits"]
    lines = ["| mechanism | preset | configuration | relation | steps | q | δ | claimed ε (calibrating accountant) | "
             "RDP ε | exact ε | exact ε at the median realised ‖(x−x′)U‖ | ε_lower (95 %) | ε_lower / claimed | "
             "ε_lower / exact | R | time (s) |", "|" + "---|" * 16]
    for r in rows:
        conf = r["configuration"].replace("|", "\\|")  # pipes would break the markdown table
        steps = "whole run" if r["steps"] < 0 else r["steps"]
        q = "—" if r["sample_rate"] != r["sample_rate"] else f"{r['sample_rate']:.3g}"
        lines.append(f"| {r['mechanism']} | {r['preset']} | {conf} | {r['relation']} | {steps} | "
                     f"{q} | {r['delta']:.0e} | {_fmt(r['epsilon_claimed'])} ({_accountant(r)}) | {_fmt(_rdp(r))} | "
                     f"{_fmt(r['epsilon_exact'])} | {_fmt(_realised(r))} | {_fmt(r['epsilon_lower'])} | {_fmt(r['ratio'])} | "
                     f"{_fmt(r['epsilon_lower'] / r['epsilon_exact'] if r['epsilon_exact'] else None)} | {r['runs']} | "
                     f"{r['seconds']:.0f} |")
    table = "\n".join(lines) + "\n"
    start, end = "<!-- audit-table:start -->", "<!-- audit-table:end -->"
    text = md.read_text() if md.exists() else f"{start}\n{end}\n"
    if start not in text or end not in text:
        raise SystemExit(f"{md} has no {start} ... {end} markers for the table")
    md.write_text(text[: text.index(start) + len(start)] + "\n" + table + text[text.index(end):])

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def flagged(r: dict) -> bool:
        return r["configuration"].startswith(("paper convention", "mis-accounted", "halved"))

    def label(r: dict) -> str:
        where = "whole run" if r["steps"] < 0 else f"T={r['steps']} q={r['sample_rate']:.2g}"
        name = r["mechanism"].replace(" image-gradient sanitiser (clip=whole)", " sanitiser").replace(
            " projection release", "").replace(" (whole private set)", "")
        rel = "" if r["steps"] < 0 else f" {r['relation'].replace('_', '-')}"
        return f"{name} [{r['preset'] or ''}] {where}{rel}" + (" *" if flagged(r) else "")

    floor = 0.05
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.6))
    ys = list(range(len(rows)))
    claimed = [r["epsilon_claimed"] for r in rows]
    lower = [max(r["epsilon_lower"], floor) for r in rows]
    ax.barh([y + 0.2 for y in ys], claimed, height=0.4, color="#bbbbbb", label="claimed ε (calibrating accountant)")
    ax.barh([y - 0.2 for y in ys], lower, height=0.4,
            color=["#c0392b" if r["epsilon_lower"] > r["epsilon_claimed"] else "#2e86c1" for r in rows],
            label="ε_lower, 95 % (red: exceeds the claim)")
    for y, r in zip(ys, rows, strict=True):
        ax.text(max(r["epsilon_lower"], floor) * 1.05, y - 0.2, f"{r['epsilon_lower']:.2f}", va="center", fontsize=6)
        ax.text(r["epsilon_claimed"] * 1.05, y + 0.2, f"{r['epsilon_claimed']:.2f}", va="center", fontsize=6,
                color="#555555")
    ax.set_xscale("log")
    ax.set_xlim(floor, 2.5 * max(claimed + lower))
    ax.set_yticks(ys, [label(r) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ε at the run's δ (log scale; ε_lower = 0 drawn at 0.05)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    ax.set_title("Empirical privacy audit (* = paper convention / mis-accounted setting)", fontsize=9)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=130)


MIN_RUNS = 4  # dpgen.audit.bounds.epsilon_lower_bound: two per side to select a threshold, two to evaluate it


def check_runs(a: argparse.Namespace) -> None:
    """Each count of runs the audit uses gives its bound enough runs per side (one ``error:`` line otherwise)."""
    counts = [("--runs", a.runs), ("--compose-runs", a.compose_runs)] + ([("--blackbox", a.blackbox)] if a.blackbox else [])
    for flag, value in counts:
        if value < MIN_RUNS:
            raise ConfigError(f"{flag} {value}: the audit's lower bound needs at least {MIN_RUNS} runs per side (half "
                              f"select a threshold, half evaluate it); e.g. {flag} 2000")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. experiment=digits_dpswd")
    ap.add_argument("--runs", type=int, default=200_000, help="R: releases per side (half select, half evaluate)")
    ap.add_argument("--steps", type=int, default=20, help="composed releases for the Gaussian audits")
    ap.add_argument("--compose-runs", type=int, default=50_000, help="R for the composed (steps > 1) audits")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="where the audit JSON goes (outside the repo)")
    ap.add_argument("--conventions", nargs="*", default=None, choices=CONVENTIONS,
                    help="audit the paper conventions (no preset); optionally only some of them")
    ap.add_argument("--blackbox", type=int, default=0, metavar="RUNS",
                    help="end-to-end audit: train the preset RUNS times without and RUNS times with a canary")
    ap.add_argument("--results", type=Path, default=None, help="a run's results.json to add the audit block to")
    ap.add_argument("--report", type=Path, nargs="+", default=None, help="audit JSON files -> docs table + plot")
    a = ap.parse_args(argv)
    check_runs(a)
    import torch

    torch.set_num_threads(1)
    if a.report:
        require_checkout("dpgen audit --report")  # writes docs/privacy/audit.md and its figure
        report(a.report, ROOT / "docs" / "privacy" / "audit.md", ROOT / "docs" / "figures" / "audit.png")
        return
    t0 = time.time()
    name = next((o.split("=", 1)[1] for o in a.overrides if o.startswith("experiment=")), "default")
    if a.conventions is not None:
        only = tuple(a.conventions) or CONVENTIONS
        audits, name = audit_conventions(a.runs, a.seed, only), "conventions_" + "_".join(only)
    elif a.blackbox:
        audits, name = audit_blackbox(a.overrides, a.blackbox), f"blackbox_{name}"
    else:
        audits = audit_preset(a.overrides, a.runs, a.seed, a.steps, a.compose_runs)
    blob = {"command": "dpgen audit " + " ".join(sys.argv[1:]), "seconds": time.time() - t0,
            "audits": audits}
    out = a.out or DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(blob, indent=2))
    if a.results is not None:
        add_to_results(a.results, audits)
    for r in audits:
        fid = r.get("extra", {}).get("fidelity")
        if fid is not None and not fid["ok"]:
            print(f"WARNING: {r['mechanism']}: release() adds noise of std {fid['measured_noise_std']:.4g}, the "
                  f"mechanism declares {fid['declared_noise_std']:.4g}")
        print(f"{r['mechanism']} [{r['configuration']}] T={r['steps']} q={r['sample_rate']:.3g}: "
              f"eps_lower={r['epsilon_lower']:.3f} claimed={r['epsilon_claimed']:.3f} "
              f"exact={_fmt(r['epsilon_exact'], 3)} ratio={r['ratio']:.2f} R={r['runs']} ({r['seconds']:.0f}s)")
    print(f"wrote {out / f'{name}.json'}")


if __name__ == "__main__":
    main()
