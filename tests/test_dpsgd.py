"""DP-SGD primitives: per-sample gradients, clipping bound, calibrated noise."""

from __future__ import annotations

import pytest
import torch

from dpgen.privacy.dpsgd import assign_grads, clip_per_sample, per_sample_grads, private_gradient


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def _loss_one(out_fn, x, y):
    return torch.nn.functional.cross_entropy(out_fn(x), y.unsqueeze(0))


def test_per_sample_grads_equal_one_backward_per_sample():
    m = _model()
    x, y = torch.randn(6, 5), torch.randint(3, (6,))
    g = per_sample_grads(m, _loss_one, x, y)
    for i in range(6):
        m.zero_grad()
        torch.nn.functional.cross_entropy(m(x[i:i + 1]), y[i:i + 1]).backward()
        for k, p in m.named_parameters():
            assert torch.allclose(g[k][i], p.grad, atol=1e-6), k


def test_clipping_bounds_every_sample_norm_and_keeps_small_ones():
    g = {"w": torch.randn(50, 4, 3) * torch.logspace(-2, 2, 50).view(-1, 1, 1), "b": torch.randn(50, 3)}
    clipped, norms = clip_per_sample(g, 1.0)
    after = torch.cat([v.flatten(1) for v in clipped.values()], 1).norm(dim=1)
    assert (after <= 1.0 + 1e-5).all()
    small = norms <= 1.0
    assert torch.allclose(after[small], norms[small], atol=1e-6)


def test_noise_std_equals_sigma_times_clip_over_expected_batch():
    c, sigma, qn = 2.0, 1.5, 10.0
    zeros = {"w": torch.zeros(4, 20000)}
    out, _ = private_gradient(zeros, c, sigma, qn, generator=torch.Generator().manual_seed(1))
    std = out["w"].std().item()
    assert abs(std - sigma * c / qn) / (sigma * c / qn) < 0.03


def test_assign_grads_writes_param_grad():
    m = _model()
    g = {k: torch.full_like(p, 0.5) for k, p in m.named_parameters()}
    assign_grads(m, g)
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in m.parameters())


def test_replace_one_halves_the_accounted_multiplier():
    from dpgen.privacy.dpsgd import (
        accounted_multiplier,
        noise_multiplier_for,
        sensitivity_in_clip_norms,
    )

    assert sensitivity_in_clip_norms("poisson") == 1.0 and sensitivity_in_clip_norms("without_replacement") == 2.0
    assert accounted_multiplier(3.0, "poisson") == 3.0 and accounted_multiplier(3.0, "without_replacement") == 1.5
    assert noise_multiplier_for(1.5, "without_replacement") == 3.0
    with pytest.raises(ValueError, match="accountant.sampling"):
        sensitivity_in_clip_norms("shuffle")
