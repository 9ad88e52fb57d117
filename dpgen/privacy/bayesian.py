"""Bayesian accountant (BA, Triastcyn & Faltings, ICML 2020) and the moments accountant variant (MA)
used as the baselines of the WDP paper (the authors' ``bayesian_privacy_accountant.py``).

Both accumulate, per Rényi/moment order lambda, the log moment-generating function of the privacy
loss of a Poisson-subsampled Gaussian step (Theorem 3 of Triastcyn & Faltings):

    c(lambda; d) = log sum_{k=0}^{lambda+1} Bin(k; lambda+1, q) exp( k (k-1) d^2 / (2 s^2) )

* MA (:class:`MomentsAccountant`): one pair at the worst-case distance ``d = Delta`` (WDP paper, the MA baseline);
  ``eps(delta) = min_lambda (sum_t c_t - log delta) / lambda``.  With a single lambda = 16 this is a
  coarse moments accountant: it is the paper's "DP" column, not dpgen's RDP/PLD guarantee.
* BA (:class:`BayesianAccountant`): P >= 3 sampled pair distances per step; an upper confidence
  bound (Student-t, level ``conf``) on the mean of ``exp(T c)`` with Hölder's correction T = total
  steps (WDP paper, the BA baseline).  The statistic depends on the data (it is Bayesian DP, a guarantee for data
  from the sampled distribution, not worst case), so dpgen reports it and never calibrates with it.

No Hydra import here: numpy/scipy, and torch only for the distances a DP-SGD step keeps on its device
(``privacy.deferred``: accounted when read).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from scipy.special import gammaln, logsumexp
from scipy.stats import t as student_t

from .deferred import DeferredSteps

DEFAULT_CONF = 1.0 - 1e-16


@lru_cache(maxsize=64)
def _t_quantile(conf: float, dof: int) -> float:
    """Student-t quantile t_conf(dof) (cached: the same P every step)."""
    return float(student_t.ppf(conf, dof))


def log_mgf_subsampled_gaussian(order: int, distances, noise_std: float, q: float) -> np.ndarray:
    """WDP paper, Theorem 3 of Triastcyn & Faltings: ``c(lambda; d)`` for every distance in ``distances: (P,)`` -> ``(P,)`` (float64).

    ``k (k-1) d^2 / (2 s^2) = (k-1) D_k(N(d, s^2) || N(0, s^2))`` is the scaled Rényi divergence of
    two equal-variance Gaussians; the binomial log-pmf is added and a logsumexp taken over k.
    """
    lam = int(order)
    if lam != order or lam < 1:
        raise ValueError(f"moment order lambda must be a positive integer, got {order}")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sampling probability q must be in (0, 1], got {q}")
    if not noise_std > 0:
        raise ValueError(f"noise std s must be > 0, got {noise_std}")
    d = np.asarray(distances, dtype=np.float64).reshape(-1, 1)
    n = lam + 1
    k = np.arange(n + 1, dtype=np.float64)
    log_binom = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    with np.errstate(divide="ignore"):  # q = 1: log(1 - q) = -inf for k < n (the term vanishes)
        log_pmf = log_binom + k * math.log(q) + (n - k) * np.log1p(-q)
    scaled_renyi = k * (k - 1) * d**2 / (2.0 * noise_std**2)
    return logsumexp(log_pmf + scaled_renyi, axis=1)


class _LogMGFAccountant:
    """Accumulated ``C(lambda)`` over steps, for a list of integer orders lambda."""

    name = "base"
    label = ""

    def __init__(self, orders: int | Sequence[int] = 16) -> None:
        orders = [orders] if np.isscalar(orders) else list(orders)
        if not orders:
            raise ValueError("need at least one moment order lambda")
        for o in orders:
            if int(o) != o or o < 1:
                raise ValueError(f"moment orders lambda must be positive integers, got {orders}")
        self.orders = np.asarray([int(o) for o in orders], dtype=np.int64)
        self.cost = np.zeros(len(self.orders))  # C(lambda)
        self.log_conf = 0.0
        self.steps = 0

    def _delta_eff(self, delta: float) -> float:
        return delta

    def epsilon(self, delta: float) -> float:
        """``min_lambda (C(lambda) - log delta') / lambda`` (delta' = delta minus the confidence slack)."""
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta}")
        if self.steps == 0:
            return 0.0
        d = self._delta_eff(delta)
        if d <= 0:
            return math.inf
        return float(np.min((self.cost - math.log(d)) / self.orders))

    def delta(self, epsilon: float) -> float:
        """``min_lambda exp(C(lambda) - lambda eps)`` (capped at 1)."""
        return float(min(1.0, np.min(np.exp(np.minimum(self.cost - self.orders * epsilon, 0.0)))))

    def state_dict(self) -> dict:
        return {"name": self.name, "orders": self.orders.tolist(), "cost": self.cost.tolist(),
                "log_conf": self.log_conf, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        if list(state["orders"]) != self.orders.tolist():
            raise ValueError(f"checkpoint {self.name.upper()} has orders {state['orders']} but this run has "
                             f"{self.orders.tolist()}; resume with the same accountant orders")
        self.cost = np.asarray(state["cost"], dtype=np.float64)
        self.log_conf = float(state["log_conf"])
        self.steps = int(state["steps"])


class MomentsAccountant(_LogMGFAccountant):
    """The moments accountant as the WDP experiments use it (WDP paper, the MA baseline): per step ``c(lambda; Delta)``."""

    name = "ma"
    label = "moments accountant (single-order MA as in the WDP paper); reported only"

    def step(self, sensitivity: float, noise_std: float, q: float) -> None:
        """One step at worst-case distance ``sensitivity`` (Delta) with ABSOLUTE noise std ``noise_std``."""
        self.cost += np.array([log_mgf_subsampled_gaussian(o, [sensitivity], noise_std, q)[0] for o in self.orders])
        self.steps += 1


class BayesianAccountant(_LogMGFAccountant):
    """Bayesian accountant (WDP paper, the BA baseline).  ``total_steps`` is Hölder's T; ``conf`` the confidence level."""

    name = "ba"
    label = ("Bayesian accountant (BDP, Triastcyn & Faltings 2020); data-dependent, reported only; computed from "
             "un-noised private gradient statistics, so this number is itself not private")

    def __init__(self, orders: int | Sequence[int] = 16, total_steps: int = 1, conf: float = DEFAULT_CONF) -> None:
        super().__init__(orders)
        if total_steps < 1:
            raise ValueError(f"total_steps (Hölder's correction) must be >= 1, got {total_steps}")
        if not 0.0 < conf < 1.0:
            raise ValueError(f"conf must be in (0, 1), got {conf}")
        self.total_steps, self.conf = int(total_steps), float(conf)
        self._warned = False
        self.deferred = DeferredSteps()  # device tensors of distances, accounted when read (privacy.deferred)

    def settle(self) -> None:
        """Account the steps kept on the device (in order)."""
        for d, (s, q) in self.deferred.drain():
            self.step(d, s, q)

    def epsilon(self, delta: float) -> float:
        self.settle()
        return super().epsilon(delta)

    def delta(self, epsilon: float) -> float:
        self.settle()
        return super().delta(epsilon)

    def step(self, distances, noise_std: float, q: float) -> None:
        """One step from ``distances: (P,)`` pair distances, P >= 3 (WDP paper, the BA baseline, items 1-4).  A
        torch tensor of distances is kept where it is and accounted when the accountant is next read."""
        if isinstance(distances, torch.Tensor):
            if distances.numel() < 3:
                raise ValueError(f"the Bayesian accountant needs >= 3 pair distances per step, got {distances.numel()}")
            self.deferred.push(distances, noise_std, q)
            return
        d = np.asarray(distances, dtype=np.float64).reshape(-1)
        p = d.size
        if p < 3:
            raise ValueError(f"the Bayesian accountant needs >= 3 pair distances per step, got {p}")
        if self.steps >= self.total_steps and not self._warned:
            warnings.warn(f"Bayesian accountant: more steps accounted than total_steps={self.total_steps}; "
                          "Hölder's correction is then wrong (set it to the run's total number of steps)",
                          stacklevel=2)
            self._warned = True
        T = self.total_steps
        t_quant = _t_quantile(self.conf, p - 1)
        for i, lam in enumerate(self.orders):
            ell = T * log_mgf_subsampled_gaussian(int(lam), d, noise_std, q)       # 1. l_j = T c(lambda; d_j)
            log_mean = logsumexp(ell) - math.log(p)                                # 2. log M^
            if np.std(ell) < np.finfo(np.float64).eps:                             # 3. degenerate sample
                c_hat = log_mean / T
            else:
                mx = ell.max()
                s = np.sum(np.exp(2 * ell - 2 * mx) - np.exp(2 * log_mean - 2 * mx))
                log_std = 0.5 * (2 * mx - math.log(p) + math.log(max(s, np.finfo(np.float64).tiny)))
                c_hat = np.logaddexp(log_mean, math.log(t_quant) + log_std - 0.5 * math.log(p - 1)) / T
            self.cost[i] += c_hat                                                  # 4. accumulate
        self.log_conf += math.log(self.conf)
        self.steps += 1

    def _delta_eff(self, delta: float) -> float:
        # 5. the confidence failures are paid out of delta: delta - (1 - conf^steps)
        return delta + math.expm1(self.log_conf)

    def state_dict(self) -> dict:
        self.settle()
        return {**super().state_dict(), "total_steps": self.total_steps, "conf": self.conf}
