"""Wasserstein differential privacy (Yang, Qi & Zhou, AAAI 2024) and its Wasserstein accountant (WA).

WDP paper.  Contents, in the paper's order:

* Table 1 — budgets of the Laplace and Gaussian mechanisms under DP, RDP of order alpha and
  WDP of order mu (``laplace_dp`` ... ``gaussian_wdp``);
* Props. 9-11 — conversions DP -> WDP, RDP -> WDP, WDP -> DP (the last one is [uncertain] in
  the spec and exposed with both readings);
* Lemma 1 — the raw absolute moment ``E|Z|^mu`` of ``Z ~ N(m, v)`` (Gamma and Kummer's 1F1);
* Theorem 2 — the per-step privacy loss ``W_t`` of a subsampled Gaussian DP-SGD step;
* Theorem 1 / 3 and Corollary 1 — composition ``L_T = sum_t W_t`` and the conversions
  ``delta = exp(beta (L_T - eps))`` / ``eps = L_T + log(1/delta) / beta``;
* :class:`WassersteinAccountant` — the stateful accountant (the authors' code, WDP paper, the authors' accountant code).

What the WA number is (read before using it): with the independent coupling of Theorem 2 the
per-step loss is ``W_t ~= sqrt(2 - 2q + 2q^2) * s * (P * E|N(0,1)|^mu)^{1/mu}``, i.e. it GROWS
with the noise std ``s`` and hardly depends on the gradients (WDP paper, the authors' accountant code).  It is therefore not
monotone in the noise the way a DP guarantee is: less noise gives a smaller "epsilon".  dpgen
reports it beside the RDP/PLD guarantees for comparison with the paper and never uses it to
calibrate noise or to stop training.

No Hydra import here: numpy/scipy only (torch tensors are accepted as inputs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from scipy.special import gammaln, hyp1f1

from .deferred import DeferredSteps
from .errors import PrivacySettingError

ArrayLike = float | Sequence[float] | np.ndarray

# ----------------------------------------------------------------------------------- Table 1
# DP and RDP entries: Mironov (2017) Table II, sensitivity 1.  WDP entries: WDP paper, Table 1 (the
# authors' notebook; sensitivity factor [uncertain] for sens != 1).


def laplace_dp(b: float) -> float:
    """epsilon-DP of the Laplace mechanism with scale ``b`` (sensitivity 1): ``1/b``."""
    _positive("b", b)
    return 1.0 / b


def gaussian_dp(sigma: float) -> float:
    """Pure epsilon-DP of the Gaussian mechanism: none (``inf``) for any sigma."""
    _positive("sigma", sigma)
    return math.inf


def laplace_rdp(alpha: ArrayLike, b: float) -> np.ndarray:
    """Rényi DP of order ``alpha >= 1`` of the Laplace mechanism with scale ``b`` (Table 1).

    alpha > 1: ``1/(alpha-1) log{ alpha/(2alpha-1) e^{(alpha-1)/b} + (alpha-1)/(2alpha-1) e^{-alpha/b} }``;
    alpha = 1 (KL): ``1/b + e^{-1/b} - 1``.  Evaluated with logaddexp (no overflow for small b).
    """
    _positive("b", b)
    a = np.asarray(alpha, dtype=np.float64)
    if np.any(a < 1):
        raise ValueError(f"Rényi order alpha must be >= 1, got {alpha}")
    one = np.isclose(a, 1.0)
    aa = np.where(one, 2.0, a)  # placeholder where alpha == 1 (branch chosen below)
    log_term = np.logaddexp(np.log(aa / (2 * aa - 1)) + (aa - 1) / b,
                            np.log((aa - 1) / (2 * aa - 1)) - aa / b)
    out = np.where(one, 1.0 / b + math.exp(-1.0 / b) - 1.0, log_term / (aa - 1))
    return out if out.ndim else out[()]


def gaussian_rdp(alpha: ArrayLike, sigma: float) -> np.ndarray:
    """Rényi DP of order ``alpha`` of the Gaussian mechanism (std sigma, sensitivity 1): ``alpha/(2 sigma^2)``."""
    _positive("sigma", sigma)
    return np.asarray(alpha, dtype=np.float64) / (2.0 * sigma**2)


def laplace_wdp(mu: ArrayLike, b: float, sens: float = 1.0) -> np.ndarray:
    """(mu, eps)-WDP of the Laplace mechanism (Table 1): ``1/2 sens (sqrt(2 KL))^{1/mu}``,
    KL = ``1/b + e^{-1/b} - 1``."""
    _positive("b", b)
    m = _order(mu)
    kl = 1.0 / b + math.exp(-1.0 / b) - 1.0
    return 0.5 * sens * math.sqrt(2.0 * kl) ** (1.0 / m)


def gaussian_wdp(mu: ArrayLike, sigma: float, sens: float = 1.0) -> np.ndarray:
    """(mu, eps)-WDP of the Gaussian mechanism (Table 1): ``1/2 (sens/sigma)^{1/mu}`` (as the notebook)."""
    _positive("sigma", sigma)
    m = _order(mu)
    return 0.5 * (sens / sigma) ** (1.0 / m)


# ------------------------------------------------------------------------ Props. 9-11 (WDP paper, Props. 9-11)
def dp_to_wdp(eps: float, mu: ArrayLike, sens: float = 1.0) -> np.ndarray:
    """Prop. 9: eps-DP with sensitivity ``sens`` => ``(mu, 1/2 sens (2 eps (e^eps - 1))^{1/(2mu)})``-WDP
    (KL <= eps (e^eps - 1), then Pinsker)."""
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return 0.5 * sens * (2.0 * eps * math.expm1(eps)) ** (1.0 / (2.0 * _order(mu)))


def rdp_to_wdp(eps: float, mu: ArrayLike, sens: float = 1.0) -> np.ndarray:
    """Prop. 10: (alpha, eps)-RDP (alpha >= 1) => ``(mu, 1/2 sens (2 eps)^{1/(2mu)})``-WDP (KL <= D_alpha)."""
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    return 0.5 * sens * (2.0 * eps) ** (1.0 / (2.0 * _order(mu)))


# -------------------------------------------------------------------------- Lemma 1 (WDP paper, Lemma 1)
def gaussian_abs_moment(mu: float, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
    """Lemma 1 (Winkelbauer 2012, eq. 17): ``E|Z|^mu`` for ``Z ~ N(mean, var)``, real ``mu > -1``.

    ``(2v)^{mu/2} Gamma((mu+1)/2) / sqrt(pi) * 1F1(-mu/2; 1/2; -m^2/(2v))``, in float64 with the
    prefactor in log space (with s ~ 1e-4 and mu = 16, (2v)^8 ~ 1e-59).  Broadcasts over mean/var.
    """
    if not mu > -1:
        raise ValueError(f"the moment order mu must be > -1, got {mu}")
    m = np.asarray(mean, dtype=np.float64)
    v = np.asarray(var, dtype=np.float64)
    if np.any(v <= 0):
        raise ValueError("the variance of Z must be > 0 (noise std s > 0)")
    log_pref = 0.5 * mu * np.log(2.0 * v) + gammaln(0.5 * (mu + 1.0)) - 0.5 * math.log(math.pi)
    return np.exp(log_pref) * hyp1f1(-0.5 * mu, 0.5, -(m**2) / (2.0 * v))


# ------------------------------------------------------------------------ Theorem 2 (WDP paper, Theorem 2)
def step_variance(noise_std: float, q: float) -> float:
    """Variance of Z in Theorem 2: ``(2 - 2q + 2q^2) s^2 = [(1-q)^2 + q^2 + 1] s^2``."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"sampling probability q must be in [0, 1], got {q}")
    _positive("noise std s", noise_std)
    return (2.0 - 2.0 * q + 2.0 * q * q) * noise_std**2


def wdp_step_loss(distances: ArrayLike, noise_std: float, q: float, mu: float) -> float:
    """Theorem 2: ``W_t = [ sum_j E|Z_j|^mu ]^{1/mu}``, ``Z_j ~ N(q d_j, (2 - 2q + 2q^2) s^2)``.

    ``distances``: (P,) the l2 distances ``d_j = ||g_j - g'_j||`` of P pairs of neighbouring
    gradient estimates; ``noise_std``: the ABSOLUTE noise std ``s = sigma C``; ``q``: sampling
    probability.  The sum runs over pairs, as the authors' code does (WDP paper, Theorem 2: the paper's
    "components i" could also mean coordinates; that reading is not what produced its numbers).
    The paper's "inf" has no numerical counterpart (nothing is optimised).
    """
    d = np.asarray(distances, dtype=np.float64).reshape(-1)
    if d.size == 0:
        raise ValueError("wdp_step_loss needs at least one gradient pair distance")
    if np.any(d < 0) or not np.all(np.isfinite(d)):
        raise ValueError("pair distances must be finite and >= 0")
    v = step_variance(noise_std, q)
    moments = gaussian_abs_moment(mu, q * d, v)  # Lemma 1 with mean q d_j
    return float(moments.sum() ** (1.0 / mu))


# ------------------------------------------------------- Theorems 1 / 3, Corollary 1 (WDP paper, Theorem 1)
def wdp_epsilon(total_loss: float, delta: float, beta: float) -> float:
    """Corollary 1: ``eps = L_T - log(delta)/beta`` (generalized (mu, eps, delta)-WDP)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    _positive("beta", beta)
    return float(total_loss - math.log(delta) / beta)


def wdp_delta(total_loss: float, epsilon: float, beta: float) -> float:
    """Theorem 3: ``delta = exp(beta (L_T - eps))`` (capped at 1).  NB: the authors' code returns
    ``beta exp(L_T - eps)``, inconsistent with its own eps(delta); this is the paper's form."""
    _positive("beta", beta)
    return float(min(1.0, math.exp(min(beta * (total_loss - epsilon), 0.0))))


class WassersteinAccountant:
    """The Wasserstein accountant (WDP paper, the authors' accountant code): ``L <- L + W_t`` per step, ``eps(delta) = L - log(delta)/beta``.

    ``order`` is mu (paper default 16), ``beta`` the fixed "customization" parameter (1 in the
    composition experiment, 32 in the deep-learning scripts).  beta is never optimised: eps is
    monotonically decreasing in beta (WDP paper, Theorem 1: the Jensen step of Theorem 1 is the direction
    Jensen does not permit, so a larger beta is not a tighter *bound*, only a smaller number).

    REPORTED ONLY.  The per-step loss grows with the noise std (WDP paper, the authors' accountant code), so this epsilon is not
    a DP guarantee and must not calibrate noise or stop training.
    """

    name = "wa"
    label = ("Wasserstein accountant (WDP, Yang et al. 2024); reported only, NOT a DP guarantee: it falls when "
             "noise falls; computed from un-noised private gradient statistics, so this number is itself not private")

    def __init__(self, order: float = 16.0, beta: float = 32.0) -> None:
        _order(order)
        _positive("beta", beta)
        self.order, self.beta = float(order), float(beta)
        self.total_loss = 0.0
        self.steps = 0
        self.history: list[float] = []  # cumulative L after each step (spec: the repo keeps it)
        self.deferred = DeferredSteps()  # device tensors of distances, accounted when read (privacy.deferred)

    def step(self, distances: ArrayLike | torch.Tensor, noise_std: float, q: float) -> float | None:
        """Account one DP-SGD step from its pair distances; returns ``W_t``.  A torch tensor of distances is kept
        where it is and accounted when the accountant is next read (``None`` returned; no host read now)."""
        if isinstance(distances, torch.Tensor):
            self.deferred.push(distances, noise_std, q)
            return None
        w = wdp_step_loss(distances, noise_std, q, self.order)
        self.total_loss += w
        self.steps += 1
        self.history.append(self.total_loss)
        return w

    def settle(self) -> None:
        """Account the steps kept on the device (in order)."""
        for d, (s, q) in self.deferred.drain():
            self.step(d, s, q)

    def epsilon(self, delta: float) -> float:
        self.settle()
        return wdp_epsilon(self.total_loss, delta, self.beta) if self.steps else 0.0

    def delta(self, epsilon: float) -> float:
        self.settle()
        return wdp_delta(self.total_loss, epsilon, self.beta)

    def state_dict(self) -> dict:
        self.settle()
        return {"name": self.name, "order": self.order, "beta": self.beta, "total_loss": self.total_loss,
                "steps": self.steps, "history": list(self.history)}

    def load_state_dict(self, state: dict) -> None:
        if (state["order"], state["beta"]) != (self.order, self.beta):
            raise PrivacySettingError("wa_order", f"cannot resume: the checkpoint's WA has order={state['order']}, "
                                                  f"beta={state['beta']} but this run has order={self.order}, "
                                                  f"beta={self.beta}; resume with the same order and beta")
        self.total_loss = float(state["total_loss"])
        self.steps = int(state["steps"])
        self.history = [float(v) for v in state["history"]]


# ------------------------------------------------------------------------------- helpers
def pairwise_distances(vectors) -> np.ndarray:
    """All ``P(P-1)/2`` l2 distances between the rows of ``vectors: (P, dim)`` (itertools.combinations
    order), in float64.  Accepts numpy arrays or torch tensors."""
    from scipy.spatial.distance import pdist

    a = vectors.detach().cpu().double().numpy() if hasattr(vectors, "detach") else np.asarray(vectors, np.float64)
    if a.ndim != 2 or a.shape[0] < 2:
        raise ValueError(f"need at least two row vectors (P, dim), got shape {a.shape}")
    return pdist(a)


def _positive(name: str, v: float) -> None:
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{name} must be a positive finite number, got {v}")


def _order(mu: ArrayLike) -> np.ndarray | float:
    m = np.asarray(mu, dtype=np.float64)
    if np.any(m < 1):
        raise ValueError(f"WDP order mu must be >= 1, got {mu}")
    return m if m.ndim else float(m)
