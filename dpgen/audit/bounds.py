"""From distinguisher scores to a lower bound on epsilon (Jagielski et al. 2020; Nasr et al. 2021).

A run of a mechanism M on D (canary out) or D' (canary in) gives a score s; the attack "guess D' iff
s >= t" has, at threshold t,

    TPR(t) = P[s >= t | D'],     FPR(t) = P[s >= t | D].

If M is (eps, delta)-DP for the pair (D, D') (both orders), every set S of outputs obeys
P[M(D') in S] <= e^eps P[M(D) in S] + delta and the same with D, D' swapped.  Taking S = {s >= t}
and its complement gives the four inequalities

    eps >= log((TPR - delta) / FPR)            eps >= log((1 - FPR - delta) / (1 - TPR))
    eps >= log((FPR - delta) / TPR)            eps >= log((1 - TPR - delta) / (1 - FPR))

(the last two: the attack with the opposite sign).  With R runs per side the rates are binomial; the
Clopper-Pearson interval at confidence 1 - alpha/2 for each of the two rates a bound uses (e.g.
TPR_lo and FPR_hi for the first) makes the plug-in bound hold with probability >= 1 - alpha (union
bound over the two rates):

    eps_lower = log((TPR_lo - delta) / FPR_hi)     (and the three others, same pattern).

Multiple thresholds: the threshold AND which of the four inequalities to use are chosen on a
*selection half* of the runs (by the same Clopper-Pearson bound on that half), and the bound is then
computed once on the other, independent half ("split" below).  One test on fresh data needs no
multiplicity correction, so the 95 % holds as stated.

Pure numpy / scipy: no torch, no Hydra.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import beta as beta_dist
from scipy.stats import norm

# the four inequalities: (name, numerator rate, denominator rate); "1-" means the complement
INEQUALITIES = ("tpr/fpr", "tnr/fnr", "fpr/tpr", "fnr/tnr")


def clopper_pearson(k, n, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided ``1 - alpha`` Clopper-Pearson interval of a binomial proportion ``k / n``.

    ``lo = Beta^{-1}(alpha/2; k, n-k+1)`` (0 when k = 0), ``hi = Beta^{-1}(1-alpha/2; k+1, n-k)``
    (1 when k = n).  Each end is a one-sided bound at level ``1 - alpha/2``.  Vectorised over ``k``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence level alpha must be in (0, 1), got {alpha}")
    k = np.asarray(k, dtype=float)
    if n < 1 or np.any(k < 0) or np.any(k > n):
        raise ValueError(f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, beta_dist.ppf(alpha / 2.0, k, n - k + 1), 0.0)
        hi = np.where(k < n, beta_dist.ppf(1.0 - alpha / 2.0, k + 1, n - k), 1.0)
    return lo, hi


def _log_ratio(num, den, delta: float) -> np.ndarray:
    """``log((num - delta) / den)``, -inf where the numerator is <= 0, +inf where den == 0 < num."""
    num = np.asarray(num, dtype=float) - delta
    den = np.asarray(den, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(num > 0, np.log(np.maximum(num, 1e-300)) - np.log(den), -np.inf)
    return out


def epsilon_bounds(tp: np.ndarray, fp: np.ndarray, n_in: int, n_out: int, delta: float,
                   alpha: float = 0.05) -> np.ndarray:
    """``(4, m)`` Clopper-Pearson lower bounds on eps for every threshold and inequality.

    ``tp[j]``: runs on D' with score >= t_j (out of ``n_in``); ``fp[j]``: runs on D (out of ``n_out``).
    Rows follow :data:`INEQUALITIES`.  Each rate gets a ``1 - alpha/2`` one-sided bound.
    """
    tpr_lo, tpr_hi = clopper_pearson(tp, n_in, alpha)
    fpr_lo, fpr_hi = clopper_pearson(fp, n_out, alpha)
    return np.stack([
        _log_ratio(tpr_lo, fpr_hi, delta),              # P'[S] <= e^eps P[S] + delta,   S = {s >= t}
        _log_ratio(1.0 - fpr_hi, 1.0 - tpr_lo, delta),  # P[S^c] <= e^eps P'[S^c] + delta
        _log_ratio(fpr_lo, tpr_hi, delta),              # P[S] <= e^eps P'[S] + delta
        _log_ratio(1.0 - tpr_hi, 1.0 - fpr_lo, delta),  # P'[S^c] <= e^eps P[S^c] + delta
    ])


def _counts(scores_in: np.ndarray, scores_out: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Numbers of runs with score >= t for every threshold (sorted search, O((R + m) log R))."""
    s_in, s_out = np.sort(scores_in), np.sort(scores_out)
    tp = len(s_in) - np.searchsorted(s_in, thresholds, side="left")
    fp = len(s_out) - np.searchsorted(s_out, thresholds, side="left")
    return tp, fp


@dataclass(frozen=True)
class EpsilonLowerBound:
    epsilon_lower: float  # holds with probability >= confidence (0 when nothing is certified)
    confidence: float
    delta: float
    threshold: float
    inequality: str
    tp: int  # evaluation half: runs on D' above the threshold
    fp: int  # evaluation half: runs on D above the threshold
    n_in: int  # evaluation runs on D'
    n_out: int  # evaluation runs on D
    selection: str  # how the threshold was chosen
    epsilon_point: float  # the same inequality with the raw rates (no confidence; for the plot only)

    def asdict(self) -> dict:
        return asdict(self)


def _candidate_thresholds(scores_in: np.ndarray, scores_out: np.ndarray, max_thresholds: int) -> np.ndarray:
    allv = np.concatenate([scores_in, scores_out])
    allv = allv[np.isfinite(allv)]
    qs = np.linspace(0.0, 1.0, max_thresholds)
    # quantiles of the pooled scores plus the extreme tails of each side (where small FPRs live)
    tails = np.concatenate([np.sort(scores_in)[-64:], np.sort(scores_out)[:64], np.sort(scores_out)[-64:],
                            np.sort(scores_in)[:64]])
    return np.unique(np.concatenate([np.quantile(allv, qs), tails]))


def epsilon_lower_bound(scores_out, scores_in, delta: float, alpha: float = 0.05, *,
                        max_thresholds: int = 2000, seed: int = 0) -> EpsilonLowerBound:
    """95 % (``alpha = 0.05``) lower bound on eps at ``delta`` from scores on D (out) and D' (in).

    Each side's runs are split at random into a selection half and an evaluation half; the best
    (threshold, inequality) on the selection half is evaluated once on the evaluation half.
    """
    s_out = np.asarray(scores_out, dtype=float).ravel()
    s_in = np.asarray(scores_in, dtype=float).ravel()
    if len(s_out) < 4 or len(s_in) < 4:
        raise ValueError(f"need at least 4 runs per side, got {len(s_out)} and {len(s_in)}")
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta must be in [0, 1), got {delta}")
    rng = np.random.default_rng(seed)
    p_out, p_in = rng.permutation(len(s_out)), rng.permutation(len(s_in))
    sel_out, ev_out = s_out[p_out[: len(s_out) // 2]], s_out[p_out[len(s_out) // 2:]]
    sel_in, ev_in = s_in[p_in[: len(s_in) // 2]], s_in[p_in[len(s_in) // 2:]]

    thr = _candidate_thresholds(sel_in, sel_out, max_thresholds)
    tp, fp = _counts(sel_in, sel_out, thr)
    b = epsilon_bounds(tp, fp, len(sel_in), len(sel_out), delta, alpha)
    i, j = np.unravel_index(int(np.argmax(b)), b.shape)
    t = float(thr[j])

    tp_e, fp_e = _counts(ev_in, ev_out, np.array([t]))
    be = epsilon_bounds(tp_e, fp_e, len(ev_in), len(ev_out), delta, alpha)[i, 0]
    tpr, fpr = tp_e[0] / len(ev_in), fp_e[0] / len(ev_out)
    point = {0: _log_ratio(tpr, fpr, delta), 1: _log_ratio(1 - fpr, 1 - tpr, delta),
             2: _log_ratio(fpr, tpr, delta), 3: _log_ratio(1 - tpr, 1 - fpr, delta)}[i]
    return EpsilonLowerBound(max(float(be), 0.0), 1.0 - alpha, float(delta), t, INEQUALITIES[i], int(tp_e[0]),
                             int(fp_e[0]), len(ev_in), len(ev_out), "threshold and inequality chosen on a "
                             "disjoint random half of the runs; Clopper-Pearson on the other half",
                             float(np.asarray(point).item()))


# -- exact privacy curves of the mechanisms the audit is compared against ---------------------
def gaussian_delta(epsilon, mu: float):
    """Exact ``delta(eps)`` of the Gaussian mechanism with ``mu = sensitivity / noise std``.

    Balle & Wang (2018), Thm. 8: ``delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``.
    """
    eps = np.asarray(epsilon, dtype=float)
    if mu <= 0:
        return np.zeros_like(eps)
    return norm.cdf(-eps / mu + mu / 2.0) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2.0)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact eps at ``delta`` of the Gaussian mechanism (bisection on :func:`gaussian_delta`)."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if mu <= 0 or gaussian_delta(0.0, mu) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(hi, mu) > delta:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gaussian_delta(mid, mu) > delta else (lo, mid)
        if hi - lo < 1e-12 * max(hi, 1.0):
            break
    return hi


def randomized_response_epsilon(p_keep: float) -> float:
    """Pure eps of binary randomised response that keeps the bit with probability ``p_keep``."""
    return math.log(p_keep / (1.0 - p_keep))
