"""``model.shrinkage=auto`` (dpgen/privacy/moments.py): a rule on the release itself picks the estimator —
``class`` when every class keeps a spike of its own above the noise bulk, else ``pooled_prior``."""

from __future__ import annotations

import torch

from dpgen.privacy.moments import class_moment_vector, moment_weights, moments_from_vector


def _release(noise_std: float, n_per_class: int = 400, k: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    scales = torch.tensor([2.0, 1.0, 0.5, 0.2, 0.1, 0.05], dtype=torch.float64)
    z = torch.randn(2 * n_per_class, k, generator=g, dtype=torch.float64) * scales
    y = torch.arange(2).repeat_interleave(n_per_class)
    z = z * (4.0 / z.norm(dim=1, keepdim=True).clamp_min(4.0))  # clipped to the radius 4
    w = moment_weights(4.0)
    v = class_moment_vector(z, y, 2, w)
    v = v + noise_std * torch.randn(v.shape, generator=g, dtype=torch.float64)
    return v, k, w


def test_auto_keeps_each_class_own_spikes_when_every_class_has_one():
    v, k, w = _release(noise_std=0.05)
    auto = moments_from_vector(v, k, w, 1e-9, 0.05, "auto")
    cls = moments_from_vector(v, k, w, 1e-9, 0.05, "class")
    assert auto.estimator == "class" and torch.allclose(auto.covariances, cls.covariances)


def test_auto_falls_back_to_the_prior_completion_when_a_class_keeps_no_spike():
    v, k, w = _release(noise_std=500.0)
    auto = moments_from_vector(v, k, w, 1e-9, 500.0, "auto")
    prior = moments_from_vector(v, k, w, 1e-9, 500.0, "pooled_prior")
    assert auto.estimator == "pooled_prior" and torch.allclose(auto.covariances, prior.covariances)
