"""Wasserstein DP maths (WDP paper): Table 1, Props. 9-10, Lemma 1, Theorem 2/3, Corollary 1, WA.

Oracles are re-derived here with plain numpy/scipy (quadrature, explicit loops), never by calling the
function under test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpgen.privacy.wdp import (
    WassersteinAccountant,
    dp_to_wdp,
    gaussian_abs_moment,
    gaussian_dp,
    gaussian_rdp,
    gaussian_wdp,
    laplace_dp,
    laplace_rdp,
    laplace_wdp,
    pairwise_distances,
    rdp_to_wdp,
    wdp_delta,
    wdp_epsilon,
    wdp_step_loss,
)


def quad_abs_moment(mu: float, m: float, v: float) -> float:
    """E|Z|^mu for Z ~ N(m, v) by quadrature (split at 0 where |z|^mu is not smooth)."""
    sd = math.sqrt(v)
    lo, hi = m - 40 * sd, m + 40 * sd
    f = lambda z: abs(z) ** mu * stats.norm.pdf(z, m, sd)  # noqa: E731
    pts = [p for p in (lo, 0.0, hi) if lo <= p <= hi]
    return sum(integrate.quad(f, a, b, epsabs=0, epsrel=1e-13, limit=500)[0] for a, b in zip(pts, pts[1:], strict=False))


# ----------------------------------------------------------------------------------- Lemma 1
@pytest.mark.parametrize("mu,m,v", [(1.0, 0.3, 0.5), (2.5, 1.0, 2.0), (3.0, -0.7, 0.2), (16.0, 0.2, 1.0),
                                    (16.0, 0.05, 0.01), (7.3, 2.0, 0.3)])
def test_lemma1_raw_absolute_moment_matches_quadrature(mu, m, v):
    assert gaussian_abs_moment(mu, m, v) == pytest.approx(quad_abs_moment(mu, m, v), rel=1e-9)


def test_lemma1_second_moment_is_mean_squared_plus_variance_and_even_orders_are_double_factorials():
    assert gaussian_abs_moment(2.0, 0.7, 1.3) == pytest.approx(0.7**2 + 1.3, rel=1e-12)
    for k in (2, 4, 8, 16):
        dfact = math.prod(range(k - 1, 0, -2))  # (k-1)!!
        assert gaussian_abs_moment(float(k), 0.0, 0.5) == pytest.approx(0.5 ** (k / 2) * dfact, rel=1e-12)
    assert gaussian_abs_moment(16.0, 0.0, 1.0) == pytest.approx(2027025.0, rel=1e-12)  # 15!!


def test_lemma1_is_finite_for_tiny_noise_in_float64():
    # s = 1e-4, mu = 16: (2v)^8 ~ 1e-63 underflows float32 but not float64
    val = gaussian_abs_moment(16.0, 0.0, 2e-8)
    assert 0 < val < 1e-50 and math.isfinite(val)


# ----------------------------------------------------------------------------------- Table 1
def test_table1_dp_and_rdp_entries_match_closed_forms():
    assert laplace_dp(2.0) == 0.5
    assert gaussian_dp(1.0) == math.inf
    assert gaussian_rdp(3.0, 2.0) == pytest.approx(3.0 / 8.0)
    b = 1.5
    # alpha = 2 by hand: log(2/3 e^{1/b} + 1/3 e^{-2/b})
    assert laplace_rdp(2.0, b) == pytest.approx(math.log(2 / 3 * math.exp(1 / b) + 1 / 3 * math.exp(-2 / b)), rel=1e-12)
    # alpha -> 1 is continuous with the KL branch
    assert laplace_rdp(1.0 + 1e-7, b) == pytest.approx(laplace_rdp(1.0, b), rel=1e-5)
    # alpha -> inf tends to pure DP 1/b
    assert laplace_rdp(1e5, b) == pytest.approx(1.0 / b, rel=1e-3)


def test_laplace_kl_branch_equals_numerical_kl_of_the_two_laplace_densities():
    b = 0.8
    p = lambda x: stats.laplace.pdf(x, 0.0, b)  # noqa: E731
    q = lambda x: stats.laplace.pdf(x, 1.0, b)  # noqa: E731
    kl = sum(integrate.quad(lambda x: p(x) * math.log(p(x) / q(x)), a, c, epsabs=0, epsrel=1e-12)[0]
             for a, c in ((-60, 0), (0, 1), (1, 60)))
    assert laplace_rdp(1.0, b) == pytest.approx(kl, rel=1e-9)


def test_table1_wdp_entries_follow_the_pinsker_chain_and_sanity_values():
    for mu in (1.0, 2.0, 5.5, 10.0):
        for s in (1.0, 2.0, 3.0, 5.0):
            kl_gauss = 1.0 / (2 * s**2)
            assert gaussian_wdp(mu, s) == pytest.approx(0.5 * (2 * kl_gauss) ** (1 / (2 * mu)), rel=1e-12)
            kl_lap = 1 / s + math.exp(-1 / s) - 1
            assert laplace_wdp(mu, s) == pytest.approx(0.5 * (2 * kl_lap) ** (1 / (2 * mu)), rel=1e-12)
    assert gaussian_wdp(7.0, 1.0) == 0.5
    assert laplace_wdp(1.0, 1.0) == pytest.approx(0.4289, abs=1e-4)


def test_props_9_and_10_conversions():
    # Prop. 10 applied to the Gaussian's KL (RDP of order 1) gives the Table 1 entry
    for mu, s in ((1.0, 2.0), (4.0, 0.5)):
        assert rdp_to_wdp(1 / (2 * s**2), mu) == pytest.approx(gaussian_wdp(mu, s), rel=1e-12)
    eps = 0.7
    assert dp_to_wdp(eps, 3.0, sens=2.0) == pytest.approx(0.5 * 2.0 * (2 * eps * (math.exp(eps) - 1)) ** (1 / 6))
    with pytest.raises(ValueError, match="mu must be >= 1"):
        gaussian_wdp(0.5, 1.0)


# --------------------------------------------------------------- Theorem 2 / 3, Corollary 1, WA
def _independent_step_loss(vecs_l, vecs_r, s, q, mu):
    """Theorem 2 re-derived: d_j by explicit loops, moments by quadrature, sum over pairs, 1/mu power."""
    total = 0.0
    for a, b in zip(vecs_l, vecs_r, strict=False):
        d = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=False)))
        total += quad_abs_moment(mu, q * d, (2 - 2 * q + 2 * q * q) * s * s)
    return total ** (1 / mu)


def test_wa_on_a_fixed_synthetic_gradient_set_reproduces_an_independent_computation():
    rng = np.random.default_rng(3)
    grads = rng.weibull(0.5, size=(5, 6))  # 5 gradients of dimension 6 -> 10 pairs
    pairs = list(itertools.combinations(range(5), 2))
    schedule = [(0.8, 0.3), (1.5, 0.05), (0.4, 1.0)]  # (noise std s, q) per step
    mu, beta, delta = 4.0, 2.0, 1e-5
    wa = WassersteinAccountant(order=mu, beta=beta)
    expected_total = 0.0
    for s, q in schedule:
        wa.step(pairwise_distances(grads), s, q)
        expected_total += _independent_step_loss([grads[i] for i, _ in pairs], [grads[j] for _, j in pairs], s, q, mu)
    assert wa.total_loss == pytest.approx(expected_total, rel=1e-8)
    assert wa.epsilon(delta) == pytest.approx(expected_total + math.log(1 / delta) / beta, rel=1e-8)
    assert wa.delta(wa.epsilon(delta)) == pytest.approx(delta, rel=1e-8)


def test_wa_is_symmetric_in_pair_order():
    rng = np.random.default_rng(0)
    left, right = rng.normal(size=(7, 20)), rng.normal(size=(7, 20))
    d_lr = np.linalg.norm(left - right, axis=1)
    d_rl = np.linalg.norm(right - left, axis=1)[::-1]  # swap each pair AND reverse the pair order
    assert wdp_step_loss(d_lr, 0.3, 0.02, 16.0) == pytest.approx(wdp_step_loss(d_rl, 0.3, 0.02, 16.0), rel=1e-14)
    # pairwise distances of a set do not depend on the row order either
    perm = rng.permutation(7)
    assert wdp_step_loss(pairwise_distances(left[perm]), 0.3, 0.02, 16.0) == pytest.approx(
        wdp_step_loss(pairwise_distances(left), 0.3, 0.02, 16.0), rel=1e-12)


def test_wa_per_step_loss_grows_with_the_noise_and_matches_the_spec_approximation():
    # WDP paper, the authors' accountant code: q d << s  =>  W_t ~= sqrt(2 - 2q + 2q^2) s (P 15!!)^{1/16}
    q, s, d = 1024 / 60000, 0.01, np.full(28, 1e-5)
    approx = math.sqrt(2 - 2 * q + 2 * q * q) * s * (28 * 2027025) ** (1 / 16)
    assert wdp_step_loss(d, s, q, 16.0) == pytest.approx(approx, rel=1e-6)
    assert wdp_step_loss(d, s, q, 16.0) == pytest.approx(0.0428, abs=5e-4)
    losses = [wdp_step_loss(d, s_, q, 16.0) for s_ in (0.5, 1.0, 2.0)]
    assert losses[0] < losses[1] < losses[2]  # NOT a DP-like monotonicity: less noise, smaller "loss"


def test_corollary1_and_theorem3_are_inverse_and_fig3_values():
    assert wdp_epsilon(10.0, 1e-10, 1.0) == pytest.approx(10 + 10 * math.log(10), rel=1e-12)  # 33.03
    assert round(wdp_epsilon(10.0, 1e-10, 1.0), 2) == 33.03
    assert round(wdp_epsilon(10.0, 1e-10, 10.0), 2) == 12.30
    assert round(wdp_epsilon(10.0, 1e-10, 50.0), 2) == 10.46
    assert round(wdp_epsilon(10.0, 1e-5, 1.0), 2) == 21.51
    for beta in (1.0, 7.0, 32.0):
        eps = wdp_epsilon(3.0, 1e-6, beta)
        assert wdp_delta(3.0, eps, beta) == pytest.approx(1e-6, rel=1e-10)


def test_wa_state_dict_roundtrip_and_mismatch_error():
    wa = WassersteinAccountant(16, 32)
    wa.step([0.1, 0.2, 0.3], 0.5, 0.01)
    wa2 = WassersteinAccountant(16, 32)
    wa2.load_state_dict(wa.state_dict())
    assert wa2.epsilon(1e-5) == wa.epsilon(1e-5) and wa2.steps == 1
    with pytest.raises(ValueError, match="wa_order"):
        WassersteinAccountant(8, 32).load_state_dict(wa.state_dict())


def test_bad_inputs_fail_with_clear_messages():
    with pytest.raises(ValueError, match="q must be in"):
        wdp_step_loss([0.1], 1.0, 1.5, 16)
    with pytest.raises(ValueError, match="at least one"):
        wdp_step_loss([], 1.0, 0.1, 16)
    with pytest.raises(ValueError, match="noise std"):
        wdp_step_loss([0.1], 0.0, 0.1, 16)
