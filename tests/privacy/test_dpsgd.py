"""DP-SGD primitives: per-sample gradients, clipping bound, calibrated noise."""

from __future__ import annotations

import torch

from dpgen.privacy import PrivacyLedger
from dpgen.privacy.dpsgd import assign_grads, clip_per_sample, per_sample_grads
from dpgen.privacy.mechanisms import NoisyGradientSum
from dpgen.privacy.noise import FixedMultiplier, NotPrivate


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
    mech = NoisyGradientSum(PrivacyLedger(None, 1e-5), clip_norm=c, sample_rate=0.1, expected_batch_size=qn, seed=1,
                            noise=FixedMultiplier(sigma))
    out = mech.release([zeros])
    std = out["w"].std().item()
    assert abs(std - sigma * c / qn) / (sigma * c / qn) < 0.03


def test_assign_grads_writes_param_grad():
    m = _model()
    g = {k: torch.full_like(p, 0.5) for k, p in m.named_parameters()}
    assign_grads(m, g)
    assert all(torch.equal(p.grad, torch.full_like(p, 0.5)) for p in m.parameters())


def test_noisy_gradient_sum_clips_inside_and_doubles_the_sensitivity_under_replace_one():
    """The mechanism enforces ||g~_i|| <= C itself; sensitivity C (add/remove) or 2C (replace-one), so a
    replace-one release with the same noise multiplier adds twice the noise std and records the same
    multiplier, with its relation."""
    big = {"w": torch.randn(6, 50) * 100}
    for sampling, sens in (("poisson", 1.5), ("without_replacement", 3.0)):
        led = PrivacyLedger(5.0, 1e-5, sampling)
        quiet = NoisyGradientSum(PrivacyLedger(None, 1e-5, sampling), clip_norm=1.5, sample_rate=0.1,
                                 expected_batch_size=6.0, seed=0, noise=NotPrivate())
        out = quiet.release([big])  # noiseless: the sum of 6 clipped rows has norm <= 6 C
        assert out["w"].norm() * 6.0 <= 6 * 1.5 * (1 + 1e-5)
        mech = NoisyGradientSum(led, clip_norm=1.5, sample_rate=0.1, expected_batch_size=6.0, seed=0,
                                noise=FixedMultiplier(2.0))
        assert mech.sensitivity == sens and mech.noise_std == 2.0 * sens
        mech.release([{"w": big["w"][:0]}])  # an empty batch is a release too
        assert led.steps == 1 and led.entries[-1].noise_multiplier == 2.0
        assert led.entries[-1].relation == ("add_remove" if sampling == "poisson" else "replace_one")
