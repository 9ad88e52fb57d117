"""Sensitivity bounds of DP-SWD (DP-SWD paper, Lemma 2 and the CLT bound)."""

from __future__ import annotations

import math

import pytest
import torch

from dpgen.ot import random_directions
from dpgen.privacy import sensitivity as S


@pytest.mark.parametrize(
    "d,k,delta_half,s_bern_code,s_clt",
    [(784, 200, 5e-6, 3.189, 0.606), (100, 1000, 5e-7, 9.733, None), (50, 100, 5e-4, 4.216, None),
     (784, 1000, 5e-6, 4.279, 1.236), (8192, 2000, 5e-7, 3.432, 0.531)],
)
def test_sensitivities_match_spec_reference_values(d, k, delta_half, s_bern_code, s_clt):
    assert S.l2_sensitivity(k, d, delta_half, "bernstein_code") == pytest.approx(s_bern_code, abs=2e-3)
    if s_clt is not None:
        assert S.l2_sensitivity(k, d, delta_half, "clt") == pytest.approx(s_clt, abs=2e-3)


@pytest.mark.parametrize("d,k", [(10, 5), (784, 1000), (50, 100)])
def test_code_bernstein_bound_is_never_smaller_than_paper_bound(d, k):
    for delta in (1e-2, 1e-5, 1e-8):
        assert S.w_bernstein_code(k, d, delta) >= S.w_bernstein(k, d, delta)


def test_beta_variance_matches_monte_carlo():
    d = 12
    u = random_directions(d, 200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    proj2 = u[0] ** 2  # (z^T u)^2 for z = e_1 (rotation invariance)
    assert proj2.mean().item() == pytest.approx(1 / d, rel=0.01)
    assert proj2.var().item() == pytest.approx(S.beta_variance(d), rel=0.03)


def _frobenius_samples(d: int, k: int, trials: int = 20_000) -> torch.Tensor:
    """``||XU - X'U||_F^2`` for neighbours differing in one row by a unit vector, fresh U each trial."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(d, generator=g, dtype=torch.float64)
    x_prime = x + torch.nn.functional.normalize(torch.randn(d, generator=g, dtype=torch.float64), dim=0)
    diff = (x - x_prime)[None, :]  # the one differing row, ||diff|| = 1
    h = torch.empty(trials, dtype=torch.float64)
    for i in range(0, trials, 2000):
        u = torch.randn(2000, d, k, generator=g, dtype=torch.float64)
        u = u / u.norm(dim=1, keepdim=True)
        h[i:i + 2000] = ((diff[:, None, :] @ u).squeeze(1) ** 2).sum(-1)
    return h


@pytest.mark.parametrize("bound", ["bernstein", "bernstein_code", "chernoff"])
@pytest.mark.parametrize("d,k,delta", [(20, 50, 0.05), (50, 40, 0.01), (10, 5, 0.002)])
def test_frobenius_norm_exceeds_rigorous_bounds_less_often_than_delta(bound, d, k, delta):
    """Monte Carlo: P(||XU - X'U||_F^2 > w(k, delta)) <= delta for unit-distance neighbours."""
    trials = 20_000
    h = _frobenius_samples(d, k, trials)
    w = S.squared_sensitivity_bound(k, d, delta, bound)
    freq = (h > w).double().mean().item()
    # allow 3 standard errors of Monte-Carlo slack above delta
    assert freq <= delta + 3 * math.sqrt(delta * (1 - delta) / trials), (freq, w)
    assert h.mean().item() == pytest.approx(k / d, rel=0.02)


def test_split_delta_adds_up_and_rejects_bad_values():
    a, b = S.split_delta(1e-5)
    assert a + b == pytest.approx(1e-5) and a == pytest.approx(5e-6)
    with pytest.raises(ValueError, match="delta"):
        S.split_delta(2.0)
    with pytest.raises(ValueError, match="sensitivity bound .* is unknown"):
        S.squared_sensitivity_bound(10, 10, 0.1, "hoeffding")


def test_sensitivity_scales_with_row_diameter():
    assert S.l2_sensitivity(100, 50, 1e-3, "clt", row_diameter=2.0) == pytest.approx(
        2 * S.l2_sensitivity(100, 50, 1e-3, "clt"))


def test_clt_bound_is_not_rigorous_at_small_k():
    """The CLT bound is asymptotic: the right-skewed sum of Betas exceeds it more often than delta.

    This pins the warning in the docs: DP-SWD-c presets do not carry a rigorous guarantee.
    """
    d, k, delta = 50, 40, 0.01
    h = _frobenius_samples(d, k)
    freq = (h > S.w_clt(k, d, delta)).double().mean().item()
    assert freq > 1.3 * delta


@pytest.mark.parametrize("k,d,delta", [(1000, 784, 1e-10), (200, 74, 1e-8), (2000, 8192, 5e-7), (40, 50, 0.01)])
def test_chernoff_bound_is_tighter_than_bernstein_and_at_most_k(k, d, delta):
    w = S.w_chernoff(k, d, delta)
    assert k / d < w < S.w_bernstein(k, d, delta) and w <= k


def test_chernoff_bound_is_close_to_the_true_quantile():
    """Tight, not just valid: within 1.5x of the empirical (1 - delta)-quantile of H."""
    d, k, delta = 50, 40, 0.01
    h = _frobenius_samples(d, k)
    q = torch.quantile(h, 1 - delta).item()
    assert q <= S.w_chernoff(k, d, delta) <= 1.5 * q
