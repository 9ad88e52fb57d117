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
    batched_directions,
    class_moment_scores,
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
                             fidelity: dict | None = None, directions: str = "random") -> AuditResult:
    """One release ``X U + N(0, sigma^2)`` of DP-SWD / DPSWflow-r / DPSWgen / DPSWflow (one shot).

    Claimed: the ledger's epsilon of one Gaussian release (q = 1) with multiplier ``sigma / S``,
    ``delta_per_step`` reserved for the sensitivity bound ``||(x - x')U|| <= S`` (which holds with
    probability ``1 - beta`` over U: the audit uses the realised ``(x - x')U`` of every run).  ``directions``:
    how U is drawn, as the audited mechanism draws it (``random`` | ``orthogonal``: exact sensitivity, no beta).
    """
    t0 = time.perf_counter()
    nf = None if noise_fn is None else (lambda shape, like: noise_scale * noise_fn(shape, like))
    s_out, s_in, diffs = projection_release_scores(rows_out, rows_in, k, noise_scale * noise_std, runs,
                                                   generator=_generator(seed), chunk=chunk, noise_fn=nf,
                                                   directions=directions)
    b = epsilon_lower_bound(s_out, s_in, delta, seed=seed)
    mult = noise_std / sensitivity
    cl = claimed_epsilons(mult, 1.0, 1, delta, delta_per_step, sampling)
    claimed = float(cl["calibrating"])
    exact = _exact(mult, 1, 1.0, delta - delta_per_step)
    row_diff = float((rows_in.double() - rows_out.double()).norm())
    return AuditResult(mechanism, configuration, "replace_one", canary or f"row difference ||X' - X||_F = {row_diff:.3g}",
                       "exact log-likelihood ratio given the public directions U", runs, 1, 1.0, delta, mult,
                       b.epsilon_lower, b.confidence, claimed,
                       f"{cl['calibrating_accountant'].upper()} (ledger's calibrating accountant, {sampling}), one "
                       "release, q = 1", exact,
                       time.perf_counter() - t0, preset, b.asdict(),
                       {"k": k, "d": int(rows_out.shape[1]), "n_rows": int(rows_out.shape[0]),
                        "noise_std": noise_std, "noise_scale": noise_scale, "sensitivity_bound": sensitivity,
                        "row_difference": row_diff, "projected_difference_median": float(np.median(diffs)),
                        "projected_difference_max": float(np.max(diffs)),
                        "fraction_runs_above_bound": float(np.mean(diffs > sensitivity * (1 + 1e-9))),  # rounding is not a violation
                        "epsilon_rdp": cl["rdp"], "epsilon_pld": cl["pld"],
                        "calibrating_accountant": cl["calibrating_accountant"], "delta_per_step": delta_per_step,
                        "noise_source": "pure function" if noise_fn is None else "mechanism object's noise()",
                        "fidelity": fidelity, "directions": directions})


def audit_projection_boundary(mechanism: str, base_rows: torch.Tensor, row_radius: float, **kw) -> AuditResult:
    """Honest projection release: row 0 at the boundary of the ``row_radius`` ball, antipodal in D'."""
    d0, d1 = antipodal_rows(base_rows, 0, row_radius)
    kw.setdefault("canary", f"row at norm {row_radius:g} replaced by its antipode (||x - x'|| = {2 * row_radius:g})")
    return audit_projection_release(mechanism, d0, d1, **kw)


def audit_sanitizer(*, shape: tuple[int, int], clip_norm: float, sigma: float, delta: float, runs: int = 20000,
                    steps: int = 1, seed: int = 0, noise_scale: float = 1.0, configuration: str = "honest",
                    preset: str | None = None, chunk: int = 1024, noise_fn=None,
                    fidelity: dict | None = None, sampling: str = "poisson") -> AuditResult:
    """DP-Sinkhorn's whole-tensor sanitiser (sensitivity 2C, noise 2 C sigma): ``steps`` releases."""
    t0 = time.perf_counter()
    g0, g1 = sanitizer_canary(shape, clip_norm)
    nf = None if noise_fn is None else (lambda shp, like: noise_scale * noise_fn(shp, like))
    s_out, s_in = sanitizer_scores(g0, g1, clip_norm, noise_scale * sigma, runs, steps=steps,
                                   generator=_generator(seed), chunk=chunk, noise_fn=nf)
    b = epsilon_lower_bound(s_out, s_in, delta, seed=seed)
    cl = claimed_epsilons(sigma, 1.0, steps, delta, 0.0, sampling)
    claimed = float(cl["calibrating"])
    return AuditResult("DP-Sinkhorn image-gradient sanitiser (clip=whole)", configuration, "replace_one",
                       "cross-group gradients clipped to +C e and -C e (difference 2C)",
                       "exact log-likelihood ratio, summed over steps", runs, steps, 1.0, delta, sigma,
                       b.epsilon_lower, b.confidence, claimed,
                       f"{cl['calibrating_accountant'].upper()} (ledger's calibrating accountant, {sampling}), "
                       f"{steps} release(s), q = 1",
                       _exact(sigma, steps, 1.0, delta), time.perf_counter() - t0, preset, b.asdict(),
                       {"shape": list(shape), "clip_norm": clip_norm, "noise_scale": noise_scale,
                        "epsilon_rdp": cl["rdp"], "epsilon_pld": cl["pld"],
                        "calibrating_accountant": cl["calibrating_accountant"],
                        "noise_source": "pure function" if noise_fn is None else "mechanism object's noise()",
                        "fidelity": fidelity})


def audit_noisy_sum(grads: torch.Tensor, *, clip_norm: float, noise_multiplier: float, delta: float,
                    relation: str = "add_remove", sample_rate: float = 1.0, steps: int = 1, runs: int = 20000,
                    seed: int = 0, noise_scale: float = 1.0, configuration: str = "honest",
                    claimed_sensitivity: float | None = None, preset: str | None = None,
                    mechanism: str = "DP-SGD noisy sum", chunk: int = 2048, noise_fn=None,
                    fidelity: dict | None = None, sampling: str | None = None) -> AuditResult:
    """DP-SGD's clipped noisy sum: ``steps`` releases, canary sampled at rate q in each.

    The noise std is ``noise_multiplier * C`` (``noise_fn``: a ``NoisyGradientSum``'s own ``noise()``
    at that std).  The claim is the ledger's epsilon under its calibrating accountant (PLD for
    Poisson, RDP without replacement; ``sampling`` defaults to Poisson for add/remove and to without
    replacement for replace-one) with multiplier ``noise_multiplier * C / claimed_sensitivity``;
    ``claimed_sensitivity`` defaults to the true one (C for add/remove, 2C for replace-one).  Passing
    C for replace-one reproduces an accountant that forgets the factor 2 of replace-one adjacency.
    """
    t0 = time.perf_counter()
    canary = noisy_sum_canary(grads, clip_norm, relation)
    base = grads if relation == "add_remove" else replace_one_batch(grads, canary)
    nf = None if noise_fn is None else (lambda shp, like: noise_scale * noise_fn(shp, like))
    s_out, s_in = noisy_sum_scores(base, canary, clip_norm, noise_scale * noise_multiplier * clip_norm, runs,
                                   relation=relation, sample_rate=sample_rate, steps=steps,
                                   generator=_generator(seed), chunk=chunk, noise_fn=nf)
    b = epsilon_lower_bound(s_out, s_in, delta, seed=seed)
    true_sens = clip_norm * (1.0 if relation == "add_remove" else 2.0)
    sens = true_sens if claimed_sensitivity is None else claimed_sensitivity
    mult = noise_multiplier * clip_norm / sens
    sampling = sampling or ("poisson" if relation == "add_remove" else "without_replacement")
    cl = claimed_epsilons(mult, sample_rate, steps, delta, 0.0, sampling)
    return AuditResult(mechanism, configuration, relation,
                       "gradient canary of norm 10C (clipped to C) opposite to the mean gradient"
                       + ("" if relation == "add_remove" else "; D's record 0 is its antipode"),
                       "exact log-likelihood ratio (Poisson mixture), summed over steps", runs, steps, sample_rate,
                       delta, mult, b.epsilon_lower, b.confidence, float(cl["calibrating"]),
                       f"{cl['calibrating_accountant'].upper()} (ledger's calibrating accountant, {sampling}), "
                       f"{steps} release(s), q = {sample_rate:g}", _exact(mult, steps, sample_rate, delta),
                       time.perf_counter() - t0, preset, b.asdict(),
                       {"clip_norm": clip_norm, "noise_scale": noise_scale, "epsilon_rdp": cl["rdp"],
                        "epsilon_pld": cl["pld"], "calibrating_accountant": cl["calibrating_accountant"],
                        "sensitivity_true": true_sens, "sensitivity_claimed": sens, "batch": int(grads.shape[0]),
                        "params": int(grads.shape[1]),
                        "noise_source": "pure function" if noise_fn is None else "mechanism object's noise()",
                        "fidelity": fidelity})


def audit_gradient_sum_mechanism(mech, grads: torch.Tensor, *, runs: int, steps: int = 1, sample_rate: float = 1.0,
                                 relation: str | None = None, seed: int = 0, noise_scale: float = 1.0,
                                 configuration: str = "honest", preset: str | None = None,
                                 mechanism: str = "DP-SGD noisy sum", fidelity_reps: int = 32) -> AuditResult:
    """Audit the run's ``NoisyGradientSum``: its clip norm, calibrated std and relation are the claim,
    its ``noise()`` draws the vectorised noise, and its real ``release()`` (clip, noise on the sum,
    divide by the public q N) is called ``fidelity_reps`` times on ``grads`` to check that it adds
    exactly that noise.  ``relation`` defaults to the mechanism's (the run's ledger's)."""
    from ..privacy.dpsgd import clip_per_sample

    relation = relation or mech.relation
    clipped, _ = clip_per_sample({"w": grads.double()}, mech.clip_norm)
    qn = mech.expected_batch_size
    fid = release_fidelity(lambda: qn * mech.release([{"w": grads.double()}])["w"], clipped["w"].sum(0),
                           mech.noise_std, fidelity_reps)
    sens = mech.sensitivity_under(relation)
    r = audit_noisy_sum(grads, clip_norm=mech.clip_norm, noise_multiplier=mech.noise_std / mech.clip_norm,
                        delta=mech.ledger.delta, relation=relation, sample_rate=sample_rate, steps=steps, runs=runs,
                        seed=seed, noise_scale=noise_scale, configuration=configuration, claimed_sensitivity=sens,
                        preset=preset, mechanism=mechanism, noise_fn=mech.noise, fidelity=fid,
                        sampling="poisson" if relation == "add_remove" else "without_replacement")
    r.extra.update({"mechanism_relation": mech.relation, "mechanism_kind": mech.kind,
                    "mechanism_noise_multiplier": mech.noise_multiplier, "mechanism_sample_rate": mech.sample_rate})
    return r


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
    ``fidelity_reps`` times to check that it adds exactly that noise.  The directions are drawn as the
    mechanism draws them (``mech.directions``: random unit or orthonormal blocks)."""
    u = batched_directions(1, mech.dim, mech.k, _generator(seed + 1), mech.directions)[0]
    fid = release_fidelity(lambda: mech.release(rows_out.to(torch.float64), u), rows_out.double() @ u,
                           mech.noise_std, fidelity_reps)
    r = audit_projection_release(name, rows_out, rows_in, k=mech.k, noise_std=mech.noise_std,
                                 sensitivity=mech.sensitivity, delta=mech.ledger.delta, delta_per_step=mech.beta,
                                 runs=runs, seed=seed, noise_scale=noise_scale, configuration=configuration,
                                 canary=canary, preset=preset, chunk=chunk, sampling=mech.ledger.sampling,
                                 noise_fn=mech.noise, fidelity=fid, directions=mech.directions)
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
                        noise_fn=mech.noise, fidelity=fid, sampling=mech.ledger.sampling)
    r.extra.update({"mechanism_relation": mech.relation, "mechanism_kind": mech.kind})
    return r


# -- DP class-Gaussian (privacy.moments.ClassMomentRelease) ------------------------------------
def claimed_epsilons(noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                     delta_per_step: float = 0.0, sampling: str = "poisson") -> dict:
    """The ledger's epsilon under each accountant (``rdp``, ``pld``; PLD is None without replacement)
    and which one calibrates (``ledger.calibrating_accountant``: the run's reported guarantee)."""
    led = PrivacyLedger(None, delta, sampling)
    led.record(noise_multiplier, sample_rate, steps, delta_per_step)
    eps = {a: led.epsilon(delta, a) for a in ("rdp", "pld")}
    cal = led.calibrating_accountant
    return {"rdp": eps["rdp"], "pld": eps["pld"], "calibrating_accountant": cal, "calibrating": eps[cal]}


def audit_class_moments(mech, z: torch.Tensor, y: torch.Tensor, *, canary_class: int = 0, runs: int = 1_000_000,
                        seed: int = 0, noise_scale: float = 1.0, configuration: str = "honest",
                        preset: str | None = None, fidelity_reps: int = 32, canary: torch.Tensor | None = None,
                        name: str = "DP class-Gaussian moment release") -> AuditResult:
    """Audit the run's ``ClassMomentRelease`` (one Gaussian release, q = 1, add/remove, Delta = 1).

    D: the codes ``z: (n, K)`` (norm <= r) with labels ``y``; D' = D plus the canary, a code of norm
    exactly r (the direction of ``z[0]``) in class ``canary_class``: it moves that class's row by
    ``(w0, w1 z, w2 z z^T)``, of norm ``sqrt(a0^2 + a1^2 + a2^2) = 1`` = the sensitivity (worst case).
    ``canary``: the code of a canary RECORD put through the run's map (``rep.encode``; norm <= r) instead.
    Distinguisher: the exact LLR along the known mean difference (``releases.class_moment_scores``).
    Claimed: the ledger's calibrating accountant's epsilon for one release at the mechanism's
    multiplier (RDP and PLD beside it); exact: the Gaussian mechanism's epsilon at that multiplier.
    Fidelity: ``class_moment_vector + mech.noise(v.shape)`` is the release's own line; its noise std is
    compared with the declared one over ``fidelity_reps`` full vectors.
    """
    from ..privacy.moments import class_moment_vector

    if mech.relation != "add_remove":
        raise ValueError(f"the class-moment audit adds a canary (add/remove); this mechanism is {mech.relation}")
    t0 = time.perf_counter()
    z, y = z.double(), y.long()
    if canary is None:
        canary = mech.radius * z[0] / z[0].norm().clamp_min(1e-12)
    canary = canary.double().reshape(-1)
    v0 = class_moment_vector(z, y, mech.n_classes, mech.weights)
    v1 = class_moment_vector(torch.cat([z, canary[None]]), torch.cat([y, y.new_tensor([canary_class])]),
                             mech.n_classes, mech.weights)
    fid = release_fidelity(lambda: v0 + mech.noise(v0.shape, v0), v0, mech.noise_std, fidelity_reps)
    s_out, s_in = class_moment_scores(v0, v1, mech.noise_std, runs, noise_fn=mech.noise, noise_scale=noise_scale)
    b = epsilon_lower_bound(s_out, s_in, mech.ledger.delta, seed=seed)
    mult = mech.noise_multiplier
    cl = claimed_epsilons(mult, 1.0, 1, mech.ledger.delta, 0.0, mech.ledger.sampling)
    diff = float((v1 - v0).norm())
    return AuditResult(name, configuration, "add_remove",
                       f"code of norm {float(canary.norm()):.4g} (r = {mech.radius:g}) added to class {canary_class} "
                       f"(||v(D') - v(D)|| = {diff:.4g})",
                       "exact log-likelihood ratio along the known mean difference", runs, 1, 1.0,
                       mech.ledger.delta, mult, b.epsilon_lower, b.confidence, float(cl["calibrating"]),
                       f"{cl['calibrating_accountant'].upper()} (ledger's calibrating accountant), one release, q = 1",
                       _exact(mult, 1, 1.0, mech.ledger.delta), time.perf_counter() - t0, preset, b.asdict(),
                       {"noise_std": mech.noise_std, "noise_scale": noise_scale, "sensitivity": mech.sensitivity,
                        "moment_difference_norm": diff, "epsilon_rdp": cl["rdp"], "epsilon_pld": cl["pld"],
                        "calibrating_accountant": cl["calibrating_accountant"], "vector_size": int(v0.numel()),
                        "noise_source": "mechanism object's noise() (one coordinate along the mean difference)",
                        "mechanism_kind": mech.kind, "mechanism_relation": mech.relation, "fidelity": fid})
