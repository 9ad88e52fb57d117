"""Sliced Wasserstein and DP-SWD (DP-SWD paper, Alg. 1)."""

from __future__ import annotations

import numpy as np
import ot as pot
import pytest
import torch

from dpgen.ot import (
    dp_sliced_wasserstein,
    gaussian_projection_release,
    random_directions,
    sliced_wasserstein,
)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_random_directions_are_unit_vectors():
    u = random_directions(30, 500, generator=_gen())
    assert u.shape == (30, 500)
    assert torch.allclose(u.norm(dim=0), torch.ones(500), atol=1e-5)


@pytest.mark.parametrize("n,d,k", [(50, 5, 20), (200, 30, 100)])
def test_sliced_wasserstein_equals_pot_with_same_directions(n, d, k):
    g = _gen(1)
    xs, xt = torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(n, d, generator=g,
                                                                              dtype=torch.float64) + 0.5
    u = random_directions(d, k, generator=g, dtype=torch.float64)
    ours = sliced_wasserstein(xs, xt, directions=u).item()
    ref = pot.sliced_wasserstein_distance(xs.numpy(), xt.numpy(), projections=u.numpy(), p=2)
    assert ours == pytest.approx(float(ref), rel=1e-9)
    # sigma = 0 DP-SWD is the plain SWD
    assert dp_sliced_wasserstein(xs, xt, 0.0, directions=u).item() == pytest.approx(float(ref), rel=1e-9)


def test_sliced_wasserstein_is_symmetric_and_zero_on_identical_inputs():
    g = _gen(2)
    a, b = torch.randn(64, 8, generator=g), torch.randn(64, 8, generator=g)
    u = random_directions(8, 50, generator=g)
    assert sliced_wasserstein(a, b, directions=u).item() == pytest.approx(sliced_wasserstein(b, a, directions=u).item())
    assert dp_sliced_wasserstein(a, a, 0.0, directions=u).item() == pytest.approx(0.0, abs=1e-6)


def test_dp_swd_is_symmetric_in_distribution():
    g = _gen(3)
    a, b = torch.randn(100, 6, generator=g), torch.randn(100, 6, generator=g) + 0.3
    ab = np.mean([dp_sliced_wasserstein(a, b, 1.0, k=50, generator=_gen(10 + i)).item() for i in range(200)])
    ba = np.mean([dp_sliced_wasserstein(b, a, 1.0, k=50, generator=_gen(1000 + i)).item() for i in range(200)])
    assert ab == pytest.approx(ba, rel=0.03)


@pytest.mark.parametrize("sigma", [1.0, 3.0])
def test_dp_swd_increases_with_mean_shift_on_fig2_toy(sigma):
    """Fig. 2: source N(0, I_5), target N(c 1, I_5); DP-SWD grows with c (averaged over 5 draws)."""
    def avg(c: float) -> float:
        vals = []
        for r in range(5):
            g = _gen(100 + r)
            xs = torch.randn(500, 5, generator=g)
            xt = torch.randn(500, 5, generator=g) + c
            vals.append(dp_sliced_wasserstein(xs, xt, sigma, k=200, generator=g).item())
        return float(np.mean(vals))

    values = [avg(c) for c in (0.0, 0.5, 1.0)]
    assert values[0] < values[1] < values[2]


def test_added_noise_std_equals_sigma():
    g = _gen(4)
    x = torch.randn(400, 20, generator=g, dtype=torch.float64)
    u = random_directions(20, 300, generator=g, dtype=torch.float64)
    for sigma in (0.5, 2.94):
        noise = gaussian_projection_release(x, u, sigma, generator=g) - x @ u
        assert noise.std().item() == pytest.approx(sigma, rel=0.02)
        assert abs(noise.mean().item()) < 0.02 * sigma


def test_gradients_flow_only_through_the_generated_side():
    xs = torch.randn(32, 4, requires_grad=True)
    xt = torch.randn(32, 4, requires_grad=True)
    dp_sliced_wasserstein(xs, xt, 0.5, k=10).backward()
    assert xs.grad is not None and xt.grad is None


def test_unequal_batches_are_truncated_to_the_smaller():
    a, b = torch.randn(10, 3), torch.randn(7, 3)
    assert torch.isfinite(sliced_wasserstein(a, b, k=5))
