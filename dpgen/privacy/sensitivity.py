"""Sensitivity bounds of the DP-SWD mechanism (DP-SWD paper, Lemma 2 and the CLT bound).

Neighbouring datasets differ in one row ``i`` with ``||x_i - x'_i||_2 <= 1``.  For ``k`` unit
directions ``U`` drawn uniformly on the sphere ``S^{d-1}``, ``H = ||XU - X'U||_F^2`` has mean
``k/d`` and variance ``k v_d`` with ``v_d = 2(d-1) / (d^2 (d+2))``.  Each function returns a
bound ``w(k, delta)`` such that ``P(H > w) <= delta``; the L2 sensitivity handed to the Gaussian
mechanism is ``sqrt(w)`` (Prop. 2 writes the RDP as ``alpha w / (2 sigma^2)``, i.e. S^2 = w).

Pure functions, numpy/scipy only.
"""

from __future__ import annotations

import math
from typing import Literal

from scipy.optimize import minimize_scalar
from scipy.stats import norm

from .errors import PrivacySettingError

Bound = Literal["bernstein", "bernstein_code", "clt", "chernoff"]
BOUNDS: tuple[str, ...] = ("bernstein", "bernstein_code", "clt", "chernoff")


def _check(k: int, d: int, delta: float) -> None:
    if k < 1:
        raise ValueError(f"number of projections k must be >= 1, got {k}")
    if d < 2:
        raise ValueError(f"data dimension d must be >= 2, got {d}")
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")


def beta_variance(d: int) -> float:
    """Variance of ``(z^T u)^2 ~ Beta(1/2, (d-1)/2)``: ``v_d = 2(d-1) / (d^2 (d+2))``."""
    return 2.0 * (d - 1) / (d**2 * (d + 2))


def w_bernstein(k: int, d: int, delta: float) -> float:
    """Lemma 2 (paper): ``k/d + (2/3) ln(1/delta) + sqrt(2 k v_d ln(1/delta))``."""
    _check(k, d, delta)
    log_term = math.log(1.0 / delta)
    return k / d + (2.0 / 3.0) * log_term + math.sqrt(2.0 * k * beta_variance(d) * log_term)


def w_bernstein_code(k: int, d: int, delta: float) -> float:
    """Lemma 2 as evaluated in the released code (``da_dp_analysis.py``).

    The code sets ``v = k v_d`` and then writes ``sqrt(2 k v ln(1/delta))``, i.e.
    ``k/d + (2/3) ln(1/delta) + k sqrt(2 v_d ln(1/delta))``: larger than the paper's bound by
    ``sqrt(k)`` in the last term, so still a valid (more conservative) bound.  Table 4's
    Bernstein sigmas reproduce only with this variant.
    """
    _check(k, d, delta)
    log_term = math.log(1.0 / delta)
    return k / d + (2.0 / 3.0) * log_term + k * math.sqrt(2.0 * beta_variance(d) * log_term)


def w_clt(k: int, d: int, delta: float) -> float:
    """CLT bound (asymptotic, "k > 30"): ``k/d + (z_{1-delta}/d) sqrt(2k(d-1)/(d+2))``."""
    _check(k, d, delta)
    z = float(norm.isf(delta))
    return k / d + (z / d) * math.sqrt(2.0 * k * (d - 1) / (d + 2))


def log_mgf_beta_projection(t: float, d: int) -> float:
    """``log E[exp(t (z^T u)^2)]`` for ``(z^T u)^2 ~ Beta(1/2, (d-1)/2)``: ``log 1F1(1/2; d/2; t)``."""
    import mpmath

    return float(mpmath.log(mpmath.hyp1f1(0.5, d / 2.0, t)))


def w_chernoff(k: int, d: int, delta: float) -> float:
    """Chernoff bound with the exact moment generating function (dpgen; rigorous, not in the paper).

    ``H = sum_j (z^T u_j)^2`` is a sum of k i.i.d. ``Beta(1/2, (d-1)/2)`` variables, so for every
    ``t > 0``: ``P(H >= w) <= exp(-t w) 1F1(1/2; d/2; t)^k``.  Setting the right side to delta and
    minimising over t gives ``w = min_t (k log 1F1(1/2; d/2; t) + ln(1/delta)) / t``.  Unlike Lemma 2,
    whose ``(2/3) ln(1/delta)`` term comes from the range bound (z^T u)^2 <= 1, this uses the actual
    tail (scale ~2/d), and is about as small as the (non-rigorous) CLT value.  Never above k.
    """
    _check(k, d, delta)
    log_inv = math.log(1.0 / delta)

    def objective(s: float) -> float:
        t = math.exp(s)
        return (k * log_mgf_beta_projection(t, d) + log_inv) / t

    res = minimize_scalar(objective, bounds=(math.log(1e-6), math.log(1e7)), method="bounded",
                          options={"xatol": 1e-7})
    return min(float(res.fun), float(k))


_W = {"bernstein": w_bernstein, "bernstein_code": w_bernstein_code, "clt": w_clt, "chernoff": w_chernoff}


def check_bound(bound: str) -> str:
    """``bound`` when it is one of :data:`BOUNDS`, else the setting's error."""
    if bound not in BOUNDS:
        raise PrivacySettingError("bound", f"sensitivity bound {bound!r} is unknown; choose one of {', '.join(BOUNDS)}")
    return bound


def check_sensitivity_fraction(fraction: float) -> float:
    """The share f of delta reserved for a probabilistic sensitivity bound (beta = f delta, split over the
    releases), as a float in (0, 1), else the setting's error."""
    if not 0.0 < float(fraction) < 1.0:
        raise PrivacySettingError("sensitivity_fraction", f"the sensitivity share of delta must be in (0, 1), got "
                                                          f"{fraction}")
    return float(fraction)


def squared_sensitivity_bound(k: int, d: int, delta: float, bound: str = "bernstein") -> float:
    """``w(k, delta)``: a ``1-delta`` bound on ``||XU - X'U||_F^2`` for unit-distance neighbours."""
    return _W[check_bound(bound)](k, d, delta)


def l2_sensitivity(k: int, d: int, delta: float, bound: str = "bernstein", row_diameter: float = 1.0) -> float:
    """L2 sensitivity ``S = row_diameter * sqrt(w(k, delta))`` of ``X -> XU``.

    ``row_diameter`` is the public bound on ``||x_i - x'_i||_2`` enforced by the caller
    (1 when every private row is clipped to norm <= 1/2; 2 for unit-normalised rows).
    """
    if row_diameter <= 0:
        raise ValueError(f"row_diameter must be > 0, got {row_diameter}")
    return row_diameter * math.sqrt(squared_sensitivity_bound(k, d, delta, bound))


def split_delta(delta: float, sensitivity_fraction: float = 0.5) -> tuple[float, float]:
    """Prop. 2: split the total ``delta`` into (delta_sensitivity, delta_conversion).

    The sensitivity bound fails with probability ``delta_sensitivity``; the RDP -> (eps, delta)
    conversion is done at ``delta_conversion``; the two add up to ``delta``.
    """
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not 0.0 < sensitivity_fraction < 1.0:
        raise ValueError(f"sensitivity_fraction must be in (0, 1), got {sensitivity_fraction}")
    d_sens = delta * sensitivity_fraction
    return d_sens, delta - d_sens
