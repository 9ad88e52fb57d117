"""Bayesian accountant (BA) and moments accountant (MA) of WDP paper, MA / BA baselines, against computations
re-derived here in the linear domain (math.comb, exp, plain means/stds), not by the implementation."""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from scipy import stats

from dpgen.privacy.bayesian import (
    BayesianAccountant,
    MomentsAccountant,
    log_mgf_subsampled_gaussian,
)
from dpgen.privacy.wdp import WassersteinAccountant, pairwise_distances


def c_direct(lam: int, d: float, s: float, q: float) -> float:
    """WDP paper, Theorem 3 of Triastcyn & Faltings by an explicit sum (no log-sum-exp): log sum_k Bin(k; lam+1, q) exp(k(k-1) d^2 / (2 s^2))."""
    n = lam + 1
    mp.mp.dps = 50  # exact enough for exponents far beyond float range
    q, d, s = mp.mpf(q), mp.mpf(d), mp.mpf(s)
    return float(mp.log(mp.fsum(math.comb(n, k) * q**k * (1 - q) ** (n - k) * mp.exp(k * (k - 1) * d * d / (2 * s * s))
                                for k in range(n + 1))))


def test_log_mgf_matches_the_explicit_binomial_sum():
    for lam, d, s, q in ((4, 0.5, 1.0, 0.1), (8, 1.0, 2.0, 0.02), (2, 0.0, 1.0, 0.5), (16, 0.3, 1.0, 0.01)):
        assert log_mgf_subsampled_gaussian(lam, [d], s, q)[0] == pytest.approx(c_direct(lam, d, s, q), rel=1e-12)
    # symmetric in the sign of d (the "left"/"right" costs coincide, WDP paper, Theorem 3 of Triastcyn & Faltings)
    assert log_mgf_subsampled_gaussian(4, [-0.7], 1.0, 0.1)[0] == log_mgf_subsampled_gaussian(4, [0.7], 1.0, 0.1)[0]


def test_ma_reproduces_an_independent_computation_with_min_over_orders():
    orders, delta = [2, 4, 8], 1e-5
    sched = [(1.0, 1.1, 0.01), (1.0, 1.1, 0.01), (1.0, 0.8, 0.05)]  # (Delta, s, q)
    ma = MomentsAccountant(orders)
    for sens, s, q in sched:
        ma.step(sens, s, q)
    expected = min((sum(c_direct(lam, sens, s, q) for sens, s, q in sched) - math.log(delta)) / lam for lam in orders)
    assert ma.epsilon(delta) == pytest.approx(expected, rel=1e-12)
    eps = ma.epsilon(delta)
    assert ma.delta(eps) <= delta * (1 + 1e-9)


def test_ba_reproduces_an_independent_computation_in_the_linear_domain():
    rng = np.random.default_rng(1)
    lam, T, conf, delta = 4, 3, 0.9999, 1e-3  # 1 - conf^T = 3e-4 is paid out of delta
    steps = [rng.uniform(0.1, 1.5, size=6) for _ in range(T)]  # 6 pair distances per step
    s, q = 1.2, 0.05
    ba = BayesianAccountant([lam], total_steps=T, conf=conf)
    for d in steps:
        ba.step(d, s, q)
    tq = stats.t.ppf(conf, 6 - 1)
    total = 0.0
    for d in steps:
        e = np.array([math.exp(T * c_direct(lam, float(x), s, q)) for x in d])  # e^{T c_j}
        mean, std = e.mean(), e.std()  # population std, as in WDP paper, the BA baseline
        total += math.log(mean + tq * std / math.sqrt(6 - 1)) / T
    expected = (total - math.log(delta - (1 - conf**T))) / lam
    assert ba.epsilon(delta) == pytest.approx(expected, rel=1e-10)


def test_ba_with_identical_distances_equals_the_single_pair_cost():
    ba = BayesianAccountant([4], total_steps=5)
    ba.step([0.6] * 5, 1.0, 0.1)
    assert ba.cost[0] == pytest.approx(c_direct(4, 0.6, 1.0, 0.1), rel=1e-12)


def test_ba_needs_three_pairs_and_warns_past_total_steps():
    ba = BayesianAccountant([4], total_steps=1)
    with pytest.raises(ValueError, match=">= 3 pair"):
        ba.step([0.1, 0.2], 1.0, 0.1)
    ba.step([0.1, 0.2, 0.3], 1.0, 0.1)
    with pytest.warns(UserWarning, match="total_steps"):
        ba.step([0.1, 0.2, 0.3], 1.0, 0.1)


def test_synthetic_composition_ordering_wa_below_ba_below_ma_with_clipping():
    """E2 design (WDP paper), 5 steps: Weibull(0.5) 50x1000 rows clipped to the median norm."""
    rng = np.random.default_rng(0)
    wa, ba, ma = WassersteinAccountant(16, 1), BayesianAccountant(16, total_steps=5), MomentsAccountant(16)
    for _ in range(5):
        g = rng.weibull(0.5, size=(50, 1000))
        norms = np.linalg.norm(g, axis=1)
        C = np.quantile(norms, 0.5)
        g = g / np.maximum(1.0, norms / C)[:, None]
        d = pairwise_distances(g)
        assert d.size == 1225 and d.max() <= 2 * C + 1e-9
        wa.step(d, 0.2 * C, 1e-3)
        ba.step(d, 0.2 * C, 1e-3)
        ma.step(2 * C, 0.2 * C, 1e-3)
    e_wa, e_ba, e_ma = wa.epsilon(1e-5), ba.epsilon(1e-5), ma.epsilon(1e-5)
    assert e_wa < e_ba < e_ma
    # MA depends only on Delta / s = 2 / 0.2: its value per step is c(16; 10) by the explicit sum
    assert e_ma == pytest.approx((5 * c_direct(16, 10.0, 1.0, 1e-3) + math.log(1e5)) / 16, rel=1e-10)


def test_state_dict_roundtrip():
    ba = BayesianAccountant([2, 4], total_steps=10)
    ba.step([0.1, 0.5, 0.9], 1.0, 0.1)
    ba2 = BayesianAccountant([2, 4], total_steps=10)
    ba2.load_state_dict(ba.state_dict())
    assert ba2.epsilon(1e-5) == ba.epsilon(1e-5)
    with pytest.raises(ValueError, match="orders"):
        BayesianAccountant([8], total_steps=10).load_state_dict(ba.state_dict())
    assert list(itertools.islice(ba.state_dict(), 1)) == ["name"]


def test_e2_clipped_099_curve_matches_the_spec_reference_values():
    """WDP paper, Fig. 2, numpy default_rng(0), rows clipped at the 0.99 quantile: the reference
    script (cross-checked against the authors' classes) gives, at steps 1/10/50/100,
    MA 843/8427/42134/84267, BA 376/3620/17758/35684, WA 235/2277/11100/22038."""
    rng = np.random.default_rng(0)
    wa, ba, ma = WassersteinAccountant(16, 1), BayesianAccountant(16, total_steps=100), MomentsAccountant(16)
    got = {"ma": [], "ba": [], "wa": []}
    for t in range(100):
        g = rng.weibull(0.5, size=(50, 1000))
        norms = np.linalg.norm(g, axis=1)
        C = np.quantile(norms, 0.99)
        d = pairwise_distances(g / np.maximum(1.0, norms / C)[:, None])
        wa.step(d, 0.2 * C, 1e-3)
        ba.step(d, 0.2 * C, 1e-3)
        ma.step(2 * C, 0.2 * C, 1e-3)
        if t + 1 in (1, 10, 50, 100):
            for k, a in (("ma", ma), ("ba", ba), ("wa", wa)):
                got[k].append(round(a.epsilon(1e-5)))
    assert got == {"ma": [843, 8427, 42134, 84267], "ba": [376, 3620, 17758, 35684], "wa": [235, 2277, 11100, 22038]}


def test_ma_optimised_over_integer_orders_equals_the_rdp_accountant():
    """c(lambda) is lambda * RDP(lambda + 1) of the Poisson-subsampled Gaussian (Mironov et al. 2019), so MA
    with all integer orders and eps = min (C - log delta) / lambda must agree with autodp's RDP accountant."""
    from dpgen.privacy import RDPAccountant, Release

    sigma, q, steps, delta = 0.8, 256 / 60000, 235, 1e-5
    ma = MomentsAccountant(list(range(1, 64)))
    for _ in range(steps):
        ma.step(1.0, sigma, q)
    rdp = RDPAccountant("poisson").epsilon_of([Release(sigma, q, steps)], delta)
    assert ma.epsilon(delta) == pytest.approx(rdp, rel=1e-4)
