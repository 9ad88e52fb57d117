"""Audits of single releases and of their composition: run, score, bound, compare with the claim.

Each ``audit_*`` function takes the mechanism's public parameters (noise, sensitivity, clipping
norm, sample rate, steps: what the run's ledger was told) and returns an :class:`AuditResult` with
the empirical 95 % lower bound ``epsilon_lower`` next to the accountant's ``epsilon_claimed`` for the
same releases at the same delta.

Composition ("how published audits do it", Nasr et al. 2021/2023): the canary is in every one of
``steps`` releases and the distinguisher sums the per-step log-likelihood ratios (the optimal test
for the composed Gaussian); the claim it is compared with is the accountant's epsilon of those
``steps`` releases.  ``steps = 1, sample_rate = 1`` is the single-release audit at the per-step noise.

``noise_scale`` multiplies the noise actually added while the claim keeps the nominal noise: 0.5 is
the "halved noise" check that the audit can fail.  Results carry only scalars and strings: no
canary, no output, no data (the audit's only product is a number).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..privacy.image_gradient import clip_whole
from ..privacy.ledger import PrivacyLedger
from .bounds import epsilon_lower_bound, gaussian_epsilon
from .releases import (
    antipodal_rows,
    noisy_sum_canary,
    noisy_sum_scores,
    projection_release_scores,
    replace_one_batch,
    sanitizer_canary,
    sanitizer_scores,
)


@dataclass
class AuditResult:
    mechanism: str
    configuration: str  # "honest", "paper convention: ...", "halved noise", ...
    relation: str
    canary: str
    distinguisher: str
    runs: int  # R per side (half selects the threshold, half evaluates it)
    steps: int
    sample_rate: float
    delta: float
    noise_multiplier_claimed: float
    epsilon_lower: float
    confidence: float
    epsilon_claimed: float
    claimed_by: str
    epsilon_exact: float | None  # exact epsilon of the claimed Gaussian (q = 1) where known
    seconds: float
    preset: str | None = None
    bound: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.epsilon_lower / self.epsilon_claimed if self.epsilon_claimed > 0 else math.inf

    def asdict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}


def claimed_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                    delta_per_step: float = 0.0, accountant: str = "rdp", sampling: str = "poisson") -> float:
    """The ledger's epsilon at ``delta`` for ``steps`` releases (what a run would report)."""
    led = PrivacyLedger(None, delta, sampling)
    led.record(noise_multiplier, sample_rate, steps, delta_per_step)
    eps = led.epsilon(delta, accountant)
    if eps is None:
        raise ValueError(f"accountant {accountant!r} has no epsilon for sampling {sampling!r}")
    return float(eps)


def _exact(noise_multiplier: float, steps: int, sample_rate: float, delta: float) -> float | None:
    """T-fold Gaussian with multiplier m is the Gaussian with mu = sqrt(T)/m (q = 1 only)."""
    if sample_rate < 1.0 or delta <= 0:
        return None
    return gaussian_epsilon(math.sqrt(steps) / noise_multiplier, delta)


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def audit_projection_release(mechanism: str, rows_out: torch.Tensor, rows_in: torch.Tensor, *, k: int,
                             noise_std: float, sensitivity: float, delta: float, delta_per_step: float = 0.0,
                             runs: int = 20000, seed: int = 0, noise_scale: float = 1.0,
                             configuration: str = "honest", canary: str = "", preset: str | None = None,
                             chunk: int = 256, sampling: str = "poisson", noise_fn=None,
                             fidelity: dict | None = None) -> AuditResult:
    """One release ``X U + N(0, sigma^2)`` of DP-SWD / DPSWflow-r / DPSWgen / DPSWflow (one shot).

    Claimed: the ledger's epsilon of one Gaussian release (q = 1) with multiplier ``sigma / S``,
    ``delta_per_step`` reserved for the sensitivity bound ``||(x - x')U|| <= S`` (which holds with
    probability ``1 - beta`` over U: the audit uses the realised ``(x - x')U`` of every run).
    """
    t0 = time.perf_counter()
    nf = None if noise_fn is None else (lambda shape, like: noise_scale * noise_fn(shape, like))
    s_out, s_in, diffs = projection_release_scores(rows_out, rows_in, k, noise_scale * noise_std, runs,
                                                   generator=_generator(seed), chunk=chunk, noise_fn=nf)
    b = epsilon_lower_bound(s_out, s_in, delta, seed=seed)
    mult = noise_std / sensitivity
    claimed = claimed_epsilon(mult, 1.0, 1, delta, delta_per_step, "rdp", sampling)
    exact = _exact(mult, 1, 1.0, delta - delta_per_step)
    row_diff = float((rows_in.double() - rows_out.double()).norm())
    return AuditResult(mechanism, configuration, "replace_one", canary or f"row difference ||X' - X||_F = {row_diff:.3g}",
                       "exact log-likelihood ratio given the public directions U", runs, 1, 1.0, delta, mult,
                       b.epsilon_lower, b.confidence, claimed, "RDP (ledger), one release, q = 1", exact,
                       time.perf_counter() - t0, preset, b.asdict(),
                       {"k": k, "d": int(rows_out.shape[1]), "n_rows": int(rows_out.shape[0]),
                        "noise_std": noise_std, "noise_scale": noise_scale, "sensitivity_bound": sensitivity,
                        "row_difference": row_diff, "projected_difference_median": float(np.median(diffs)),
                        "projected_difference_max": float(np.max(diffs)),
                        "fraction_runs_above_bound": float(np.mean(diffs > sensitivity)),
                        "noise_source": "pure function" if noise_fn is None else "mechanism object's noise()",
                        "fidelity": fidelity})


def audit_projection_boundary(mechanism: str, base_rows: torch.Tensor, row_radius: float, **kw) -> AuditResult:
    """Honest projection release: row 0 at the boundary of the ``row_radius`` ball, antipodal in D'."""
    d0, d1 = antipodal_rows(base_rows, 0, row_radius)
    kw.setdefault("canary", f"row at norm {row_radius:g} replaced by its antipode (||x - x'|| = {2 * row_radius:g})")
    return audit_projection_release(mechanism, d0, d1, **kw)


def audit_sanitizer(*, shape: tuple[int, int], clip_norm: float, sigma: float, delta: float, runs: int = 20000,
                    steps: int = 1, seed: int = 0, noise_scale: float = 1.0, configuration: str = "honest",
                    preset: str | None = None, chunk: int = 1024, noise_fn=None,
                    fidelity: dict | None = None) -> AuditResult:
    """DP-Sinkhorn's whole-tensor sanitiser (sensitivity 2C, noise 2 C sigma): ``steps`` releases."""
    t0 = time.perf_counter()
    g0, g1 = sanitizer_canary(shape, clip_norm)
    nf = None if noise_fn is None else (lambda shp, like: noise_scale * noise_fn(shp, like))
    s_out, s_in = sanitizer_scores(g0, g1, clip_norm, noise_scale * sigma, runs, steps=steps,
                                   generator=_generator(seed), chunk=chunk, noise_fn=nf)
    b = epsilon_lower_bound(s_out, s_in, delta, seed=seed)
    claimed = claimed_epsilon(sigma, 1.0, steps, delta)
    return AuditResult("DP-Sinkhorn image-gradient sanitiser (clip=whole)", configuration, "replace_one",
                       "cross-group gradients clipped to +C e and -C e (difference 2C)",
                       "exact log-likelihood ratio, summed over steps", runs, steps, 1.0, delta, sigma,
                       b.epsilon_lower, b.confidence, claimed, f"RDP (ledger), {steps} release(s), q = 1",
                       _exact(sigma, steps, 1.0, delta), time.perf_counter() - t0, preset, b.asdict(),
                       {"shape": list(shape), "clip_norm": clip_norm, "noise_scale": noise_scale,
                        "noise_source": "pure function" if noise_fn is None else "mechanism object's noise()",
                        "fidelity": fidelity})


def audit_noisy_sum(grads: torch.Tensor, *, clip_norm: float, noise_multiplier: float, delta: float,
                    relation: str = "add_remove", sample_rate: float = 1.0, steps: int = 1, runs: int = 20000,
                    seed: int = 0, noise_scale: float = 1.0, configuration: str = "honest",
                    claimed_sensitivity: float | None = None, preset: str | None = None,
                    mechanism: str = "DP-SGD noisy sum", chunk: int = 2048) -> AuditResult:
    """DP-SGD's clipped noisy sum: ``steps`` releases, canary sampled at rate q in each.

    The claim is the ledger's (Poisson, add/remove) epsilon with multiplier
    ``noise_multiplier * C / claimed_sensitivity``; ``claimed_sensitivity`` defaults to the true one
    (C for add/remove, 2C for replace-one).  Passing C for replace-one reproduces an accountant that
    forgets the factor 2 of replace-one adjacency.
    """
    t0 = time.perf_counter()
    canary = noisy_sum_canary(grads, clip_norm, relation)
    base = grads if relation == "add_remove" else replace_one_batch(grads, canary)
    s_out, s_in = noisy_sum_scores(base, canary, clip_norm, noise_scale * noise_multiplier, runs,
                                   relation=relation, sample_rate=sample_rate, steps=steps,
                                   generator=_generator(seed), chunk=chunk)
    b = epsilon_lower_bound(s_out, s_in, delta, seed=seed)
    true_sens = clip_norm * (1.0 if relation == "add_remove" else 2.0)
    sens = true_sens if claimed_sensitivity is None else claimed_sensitivity
    mult = noise_multiplier * clip_norm / sens
    claimed = claimed_epsilon(mult, sample_rate, steps, delta, accountant="rdp")
    try:
        pld = claimed_epsilon(mult, sample_rate, steps, delta, accountant="pld")
    except Exception:  # noqa: BLE001 - PLD is only a comparison column
        pld = None
    return AuditResult(mechanism, configuration, relation,
                       "gradient canary of norm 10C (clipped to C) opposite to the mean gradient"
                       + ("" if relation == "add_remove" else "; D's record 0 is its antipode"),
                       "exact log-likelihood ratio (Poisson mixture), summed over steps", runs, steps, sample_rate,
                       delta, mult, b.epsilon_lower, b.confidence, claimed,
                       f"RDP (ledger), {steps} release(s), q = {sample_rate:g}", _exact(mult, steps, sample_rate, delta),
                       time.perf_counter() - t0, preset, b.asdict(),
                       {"clip_norm": clip_norm, "noise_scale": noise_scale, "epsilon_pld": pld,
                        "sensitivity_true": true_sens, "sensitivity_claimed": sens, "batch": int(grads.shape[0]),
                        "params": int(grads.shape[1])})


# -- the run's own mechanism objects (dpgen.privacy.mechanisms) --------------------------------
def release_fidelity(release, expected: torch.Tensor, noise_std: float, reps: int = 32) -> dict:
    """Call a mechanism's real ``release`` ``reps`` times and compare the std of ``output - expected``
    (its noise) with the std the mechanism declares (and the audit uses).  ``ratio`` should be 1 within
    ``tolerance`` (5 standard errors of a sample std)."""
    resid = torch.stack([release().double() - expected.double() for _ in range(reps)])
    n = resid.numel()
    measured = float(resid.std())
    tol = 5.0 / math.sqrt(2.0 * n)
    return {"declared_noise_std": float(noise_std), "measured_noise_std": measured,
            "ratio": measured / noise_std if noise_std > 0 else math.inf, "tolerance": tol,
            "entries": int(n), "ok": abs(measured / noise_std - 1.0) <= tol if noise_std > 0 else False}


def audit_projection_mechanism(mech, rows_out: torch.Tensor, rows_in: torch.Tensor, *, name: str, runs: int,
                               seed: int = 0, noise_scale: float = 1.0, configuration: str = "honest",
                               canary: str = "", preset: str | None = None, chunk: int = 256,
                               fidelity_reps: int = 32) -> AuditResult:
    """Audit a ``GaussianProjectionRelease`` / ``OneShotProjectionRelease`` built by the run's code.

    Its calibrated ``noise_std``, ``sensitivity`` (under its relation) and ``beta`` are the claim; the
    vectorised runs draw the noise with its own ``noise()``; ``release()`` itself is called
    ``fidelity_reps`` times to check that it adds exactly that noise."""
    u = torch.randn(mech.dim, mech.k, generator=_generator(seed + 1), dtype=torch.float64)
    u = u / u.norm(dim=0, keepdim=True)
    fid = release_fidelity(lambda: mech.release(rows_out.to(torch.float64), u), rows_out.double() @ u,
                           mech.noise_std, fidelity_reps)
    r = audit_projection_release(name, rows_out, rows_in, k=mech.k, noise_std=mech.noise_std,
                                 sensitivity=mech.sensitivity, delta=mech.ledger.delta, delta_per_step=mech.beta,
                                 runs=runs, seed=seed, noise_scale=noise_scale, configuration=configuration,
                                 canary=canary, preset=preset, chunk=chunk, sampling=mech.ledger.sampling,
                                 noise_fn=mech.noise, fidelity=fid)
    r.extra.update({"mechanism_relation": mech.relation, "mechanism_kind": mech.kind, "beta": mech.beta})
    return r


def audit_sanitiser_mechanism(mech, *, shape: tuple[int, int], runs: int, steps: int = 1, seed: int = 0,
                              noise_scale: float = 1.0, configuration: str = "honest", preset: str | None = None,
                              fidelity_reps: int = 32) -> AuditResult:
    """Audit the run's ``ImageGradientSanitiser`` (clip=whole): its clip norm and sigma are the claim,
    its ``noise()`` draws the vectorised noise, its ``release()`` is checked for fidelity."""
    if mech.clip != "whole":
        raise ValueError("the sanitiser audit covers model.clip=whole")
    g0, _ = sanitizer_canary(shape, mech.clip_norm)
    fid = release_fidelity(lambda: mech.release(g0.clone()), clip_whole(g0, mech.clip_norm), mech.noise_std,
                           fidelity_reps)
    r = audit_sanitizer(shape=shape, clip_norm=mech.clip_norm, sigma=mech.sigma, delta=mech.ledger.delta, runs=runs,
                        steps=steps, seed=seed, noise_scale=noise_scale, configuration=configuration, preset=preset,
                        noise_fn=mech.noise, fidelity=fid)
    r.extra.update({"mechanism_relation": mech.relation, "mechanism_kind": mech.kind})
    return r
