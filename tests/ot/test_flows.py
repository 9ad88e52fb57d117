"""Pure sliced-Wasserstein flow functions (dpgen.ot.flows; DPSWflow paper, the particle flow)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpgen.data.toys import sample_five_gaussians
from dpgen.ot import (
    empirical_quantiles,
    euler_maruyama_step,
    flow_step,
    interp1d,
    quantile_levels,
    random_directions,
    sliced_flow_drift,
    sliced_wasserstein,
    sliced_wasserstein_projected,
    smoothed_projections,
    transport_map,
)


def test_drift_is_minus_the_gradient_of_half_sw2_at_sigma_zero():
    """sigma = 0, equal sizes, M = n levels: v = n * grad_X (1/2 SW_2^2) (the Wasserstein gradient)."""
    g = torch.Generator().manual_seed(0)
    n, d, k = 40, 3, 7
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randn(n, d, generator=g, dtype=torch.float64) * 0.5 + 1.0
    u = random_directions(d, k, generator=g, dtype=torch.float64)
    levels = quantile_levels(n, dtype=torch.float64)
    tq = empirical_quantiles((y @ u).T.contiguous(), levels)
    v = sliced_flow_drift(smoothed_projections(x, u, 0.0), tq, levels, u)

    xg = x.clone().requires_grad_(True)
    loss = 0.5 * sliced_wasserstein_projected(xg @ u, y @ u, q=2.0) ** 2
    (grad,) = torch.autograd.grad(loss, xg)
    assert torch.allclose(v, n * grad, rtol=1e-4, atol=1e-5)  # eps guard of interp only
    # so a small Euler step lowers the sliced distance
    x1 = euler_maruyama_step(x, v, 0.1, 0.0)
    assert sliced_wasserstein(x1, y, directions=u) < sliced_wasserstein(x, y, directions=u)


def test_empirical_quantiles_match_torch_quantile_linear_rule():
    g = torch.Generator().manual_seed(1)
    p = torch.randn(5, 37, generator=g)
    levels = quantile_levels(101)
    assert torch.allclose(empirical_quantiles(p, levels), torch.quantile(p, levels, dim=1).T, atol=1e-6)


def test_interp1d_matches_numpy_inside_and_extrapolates_linearly_outside():
    x = torch.tensor([[0.0, 1.0, 3.0], [0.0, 2.0, 4.0]])
    y = torch.tensor([[0.0, 2.0, 3.0], [1.0, 1.0, 5.0]])
    xn = torch.tensor([[0.5, 2.0, -1.0, 4.0], [1.0, 3.0, 5.0, -2.0]])
    out = interp1d(x, y, xn)
    for r in range(2):
        inside = xn[r].clamp(x[r, 0], x[r, -1]) == xn[r]
        ref = np.interp(xn[r][inside].numpy(), x[r].numpy(), y[r].numpy())
        assert np.allclose(out[r][inside].numpy(), ref, atol=1e-5)
    assert out[0, 2] == pytest.approx(-2.0, abs=1e-5)  # first segment's slope (2) continued to x = -1
    assert out[0, 3] == pytest.approx(3.5, abs=1e-5)  # last segment's slope (0.5) continued to x = 4
    assert out[1, 3] == pytest.approx(1.0, abs=1e-5)


def test_transport_map_pushes_particle_quantiles_onto_target_quantiles_and_is_monotone():
    g = torch.Generator().manual_seed(2)
    p = torch.randn(3, 200, generator=g)
    target = 3.0 + 0.5 * torch.randn(3, 200, generator=g)
    levels = quantile_levels(200)
    t = transport_map(p, empirical_quantiles(target, levels), levels)
    order = p.argsort(dim=1)
    assert (t.gather(1, order).diff(dim=1) >= -1e-5).all()  # monotone
    assert torch.allclose(t.sort(dim=1).values, target.sort(dim=1).values, atol=1e-3)  # exact 1-D OT map (float32)


def test_euler_maruyama_diffusion_has_variance_two_lambda_h():
    g = torch.Generator().manual_seed(3)
    x = torch.zeros(50000, 2)
    out = euler_maruyama_step(x, torch.zeros_like(x), h=0.5, reg=0.2, generator=g)
    assert out.var().item() == pytest.approx(2 * 0.2 * 0.5, rel=0.03)
    assert torch.equal(euler_maruyama_step(x + 1, torch.ones_like(x), h=0.5, reg=0.0), torch.full_like(x, 0.5))


@pytest.mark.parametrize("sigma", [0.0, 0.5])
def test_toy_particles_converge_towards_the_five_gaussians(sigma):
    """Fig. 1 setting (h = 1, lambda = 0.001, N_theta = 200): the SWD to the target decreases along the flow."""
    g = torch.Generator().manual_seed(4)
    target, _ = sample_five_gaussians(1000, generator=g)
    fresh, _ = sample_five_gaussians(1000, generator=g)
    x = torch.randn(1000, 2, generator=g)
    levels = quantile_levels(1000)
    probe = random_directions(2, 500, generator=g)

    def swd(a: torch.Tensor) -> float:
        return float(sliced_wasserstein(a, fresh, directions=probe))

    history = {0: swd(x)}
    for t in range(1, 61):
        u = random_directions(2, 200, generator=g)
        noisy_target = smoothed_projections(target, u, sigma, g)
        x = flow_step(x, u, empirical_quantiles(noisy_target, levels), levels, sigma, 1.0, 0.001, g)
        if t in (15, 60):
            history[t] = swd(x)
    assert history[60] < 0.3 * history[0]
    assert history[60] < history[15] + 0.02


@pytest.mark.parametrize("n,m,ties", [(3000, 3000, False), (3000, 200, False), (500, 4000, False), (2000, 2000, True),
                                      (1, 50, False), (2, 2, True)])
def test_fast_transport_map_equals_the_literal_form(n, m, ties):
    """The sorted-query / uniform-grid transport map is bit-identical to the three-call reference,
    including with ties (rounded projections) and more levels than particles."""
    from dpgen.ot.flows import transport_map_reference

    g = torch.Generator().manual_seed(n + m)
    proj = torch.randn(7, n, generator=g) * 2
    if ties:
        proj = (proj * 3).round() / 3
    levels = quantile_levels(m)
    tq = torch.sort(torch.randn(7, m, generator=g), dim=-1).values
    assert torch.equal(transport_map(proj, tq, levels), transport_map_reference(proj, tq, levels))
    uneven = torch.cat([torch.zeros(1), torch.sort(torch.rand(m - 2, generator=g)).values, torch.ones(1)])
    assert torch.equal(transport_map(proj, tq, uneven), transport_map_reference(proj, tq, uneven))


def _rows_with_ties(g: torch.Generator, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """Random rows, half of them rounded (ties), one constant and one with a long run of equal values."""
    x = torch.randn(*shape, generator=g, dtype=dtype)
    x[::2] = (x[::2] * 2).round() / 2
    x[0, 0] = 0.7
    x[1, -1, : shape[-1] // 2] = x[1, -1, -1]
    return x


@pytest.mark.parametrize("seed", range(40))
def test_the_grid_search_finds_the_index_searchsorted_finds_in_the_built_grid(seed):
    """The particles' grid searched without being built: the same integer index as ``torch.searchsorted``
    over ``empirical_quantiles`` at every value (an off-by-one anywhere fails), with ties and constant rows."""
    from dpgen.ot.flows import _grid_search, _knots, _levels_per_gap

    g = torch.Generator().manual_seed(seed)
    n, m = int(torch.randint(2, 60, (1,), generator=g)), int(torch.randint(2, 3000, (1,), generator=g))
    dtype = torch.float64 if seed % 4 == 0 else torch.float32
    s = torch.sort(_rows_with_ties(g, (3, 4, n), dtype), dim=-1).values
    levels = quantile_levels(m, dtype=dtype)
    lo, frac = _knots(levels, n)
    assert int(torch.bincount(lo).max()) <= _levels_per_gap(n, m, dtype)  # the search's public bound holds
    full = torch.searchsorted(empirical_quantiles(s, levels).contiguous(), s.contiguous())
    assert torch.equal(_grid_search(s, lo, frac, m), full)


@pytest.mark.parametrize("n,m,n_target", [(40, 5000, 25), (2, 4096, 1), (3, 4500, 7), (900, 4096, 2),
                                          (1000, 30000, 25), (40, 300, 25)])
def test_the_map_without_m_level_grids_equals_the_full_grid_form(n, m, n_target, monkeypatch):
    """Bit for bit: the target's quantiles read where needed (``target_sample``) and the particles' grid searched
    without being built (on the large grids; the last case builds it) give the literal three-call map, on random
    rows with ties and constant rows."""
    import dpgen.ot.flows as flows
    from dpgen.ot.flows import transport_map_reference

    search, searched = flows._grid_search, []
    monkeypatch.setattr(flows, "_grid_search", lambda *a: searched.append(1) or search(*a))
    g = torch.Generator().manual_seed(n + m)
    proj = _rows_with_ties(g, (2, 5, n), torch.float32)
    target = _rows_with_ties(g, (2, 5, n_target), torch.float32)
    levels = quantile_levels(m)
    ref = transport_map_reference(proj.reshape(10, n), empirical_quantiles(target.reshape(10, -1), levels), levels)
    assert torch.equal(transport_map(proj, empirical_quantiles(target, levels), levels), ref.view_as(proj))
    assert torch.equal(transport_map(proj, target, levels, target_sample=True), ref.view_as(proj))
    assert bool(searched) == (m >= flows._SEARCH_MIN_LEVELS)  # the path each case is meant to take


def test_the_map_without_m_level_grids_reads_nothing_from_the_device(monkeypatch):
    """On an accelerator neither search reads a device value (a host sync): counted as a CUDA run takes them."""
    import dpgen.ot.flows as flows
    from dpgen.bench.step_overhead import StepOps

    monkeypatch.setattr(flows, "on_host", lambda t: False)  # the accelerator's paths, on the CPU
    dev = torch.device("cpu")  # a torch.device: the run's device for the counter
    with StepOps() as ops:
        levels = quantile_levels(30000, device=dev)  # a class block of mnist_dpswflow_r on 5 directions
        proj, target = torch.randn(2, 5, 1000, device=dev), torch.randn(2, 5, 25, device=dev)
        ops.mark()
        flows.transport_map(proj, target, levels, target_sample=True)
        ops.stop()
    (c,) = ops.intervals
    assert (c.reads, c.copies) == (0, 0), c.where
    assert c.kernels <= 150, c.kernels  # 127: 5 rounds of 6 in the grid search (31 levels per particle gap)
