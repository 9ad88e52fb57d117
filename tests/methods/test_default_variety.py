"""The default demo's samples have variety in every class (pooled spikes + public prior completion,
dpgen/privacy/moments.py)."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from dpgen.data.representations import dct_prior_spectrum
from dpgen.methods.loop import train
from dpgen.privacy.moments import (
    class_moment_vector,
    corrected_traces,
    moment_weights,
    moments_from_vector,
    pooled_spiked_covariances,
    positive_part_mean,
    prior_completed_covariances,
    residual_budgets,
    spiked_shrinkage,
)
from tests.helpers.configs import compose_cfg
from tests.helpers.context import train_context

MIN_DIRECTIONS = 3  # fixed before measuring: at least 3 of the 64 directions of variation per class
MIN_STD_RATIO_EPS1 = 0.25  # fixed before measuring: per-pixel std at ε = 1 >= 1/4 of the real class's (one image: 0)


def _default(tmp_path, seed: int, shrinkage: str = "pooled_prior", eps: float = 10.0):
    GlobalHydra.instance().clear()
    cfg = compose_cfg([f"seed={seed}", f"model.shrinkage={shrinkage}", "logger=local", "trainer.progress=false",
                       f"accountant.epsilon={eps}"], out_dir=tmp_path)
    method, ledger, data = (instantiate(cfg.model, _convert_="all"), instantiate(cfg.accountant, _convert_="all"),
                            instantiate(cfg.dataset))
    train(method, data, ledger, train_context(tmp_path, seed=seed))
    assert ledger.epsilon() <= eps
    return method, data


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_keeps_variety_in_every_class_on_the_real_digits(tmp_path, seed):
    method, data = _default(tmp_path, seed)
    floor = 1e-6 * method.rep.radius ** 2 / method.rep.dim
    directions = (torch.linalg.eigvalsh(method.moments.covariances) > 10 * floor).sum(-1)
    assert int(directions.min()) >= MIN_DIRECTIONS, directions.tolist()
    for c in range(data.num_classes):
        x, _ = method.sample(100, torch.full((100,), c))
        assert torch.unique(x.flatten(1), dim=0).shape[0] == 100, f"class {c}: repeated images"
        real_std = float(data.test.x[data.test.y == c].std(0).mean())
        assert float(x.std(0).mean()) >= 0.5 * real_std, f"class {c}: per-pixel std far below the real test images'"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_class_is_one_repeated_image_at_eps_1_on_the_real_digits(tmp_path, seed):
    method, data = _default(tmp_path, seed, eps=1.0)
    for c in range(data.num_classes):
        x, _ = method.sample(100, torch.full((100,), c))
        assert torch.unique(x.flatten(1), dim=0).shape[0] == 100, f"class {c}: repeated images"
        real_std = float(data.test.x[data.test.y == c].std(0).mean())
        assert float(x.std(0).mean()) >= MIN_STD_RATIO_EPS1 * real_std, f"class {c}: (nearly) one repeated image"


def test_pooled_without_the_prior_leaves_a_class_without_variation_at_eps_1(tmp_path):
    """The same noise without the prior completion: some class of some seed keeps no direction at all."""
    dirs = []
    for seed in (0, 1, 2):
        method, _ = _default(tmp_path / str(seed), seed, shrinkage="pooled", eps=1.0)
        floor = 1e-6 * method.rep.radius ** 2 / method.rep.dim
        dirs.append(int((torch.linalg.eigvalsh(method.moments.covariances) > 10 * floor).sum(-1).min()))
    assert min(dirs) == 0, dirs


def test_class_only_shrinkage_is_what_collapsed_a_class(tmp_path):
    """The former post-processing on the same noise: some class keeps no direction (one repeated image)."""
    method, _ = _default(tmp_path, 0, shrinkage="class")
    floor = 1e-6 * method.rep.radius ** 2 / method.rep.dim
    assert int((torch.linalg.eigvalsh(method.moments.covariances) > 10 * floor).sum(-1).min()) == 0


def test_pooled_recovers_a_shared_direction_hidden_in_every_class_bulk():
    """C classes share a spike below each class's detection threshold s sqrt(K) but above the pooled one."""
    k, c, s = 40, 25, 0.05
    theta = 0.5 * s * math.sqrt(k)  # between the pooled threshold s sqrt(K / C) and the class threshold s sqrt(K)
    u = torch.zeros(k, dtype=torch.float64)
    u[3] = 1.0
    g = torch.Generator().manual_seed(0)
    w = torch.randn(c, k, k, generator=g, dtype=torch.float64) * s
    w = (w + w.transpose(1, 2)) / math.sqrt(2.0)  # off-diagonal std s
    cov = theta * u[:, None] * u[None, :] + w
    sd = torch.full((c,), s, dtype=torch.float64)
    ev, vec = torch.linalg.eigh(cov)
    class_only = (vec * spiked_shrinkage(ev, sd, k)[:, None, :]) @ vec.transpose(1, 2)
    pooled = pooled_spiked_covariances(cov, torch.full((c,), 100.0, dtype=torch.float64), sd)
    along = lambda m: m[:, 3, 3]  # noqa: E731  variance along u
    assert float(along(class_only).median()) < 0.2 * theta  # lost in most classes' noise bulk
    assert torch.all((along(pooled) > 0.5 * theta) & (along(pooled) < 1.5 * theta)), along(pooled).tolist()


def test_moments_from_vector_refuses_an_unknown_shrinkage():
    v = torch.ones(2, 1 + 2 + 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="shrinkage 'bogus' is unknown"):
        moments_from_vector(v, 2, (1.0, 1.0, 1.0), 1e-6, noise_std=0.1, shrinkage="bogus")


# -- the prior completion (pooled_prior) --------------------------------------------------------------
def _noise(c: int, k: int, s: float, seed: int) -> torch.Tensor:
    """``(C, K, K)`` symmetric Gaussian noise with off-diagonal std ``s``."""
    w = torch.randn(c, k, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * s
    return (w + w.transpose(1, 2)) / math.sqrt(2.0)


def _bulk(c: int, k: int, s: float, seed: int) -> torch.Tensor:
    """``(C, K, K)`` pure noise strictly inside the bulk: random eigenvectors, eigenvalues in ``(-s sqrt K, s sqrt K)``."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(c, k, k, generator=g, dtype=torch.float64))
    ev = (2.0 * torch.rand(c, k, generator=g, dtype=torch.float64) - 1.0) * s * math.sqrt(k)
    return (q * ev[:, None, :]) @ q.transpose(1, 2)


def test_a_pure_noise_release_is_completed_with_the_prior_shape_and_the_released_trace():
    """No spike survives: every class covariance is ``b_c diag(p) / sum(p)`` with trace ``b_c`` = the budget."""
    c, k, s = 10, 64, 0.01
    prior = torch.from_numpy(dct_prior_spectrum((1, 8, 8), k))
    traces, tau = torch.full((c,), 2.0, dtype=torch.float64), torch.full((c,), 0.01, dtype=torch.float64)
    cov, n, sd = _bulk(c, k, s, 0), torch.full((c,), 100.0, dtype=torch.float64), torch.full((c,), s, dtype=torch.float64)
    assert float(pooled_spiked_covariances(cov, n, sd).abs().max()) == 0.0  # premise: nothing stands out of the bulk
    out = prior_completed_covariances(cov, n, sd, traces, tau, prior)
    tr = torch.diagonal(out, dim1=-2, dim2=-1).sum(-1)
    assert torch.allclose(tr, residual_budgets(traces, tau), rtol=1e-10)
    assert torch.allclose(tr, traces, rtol=1e-3)  # a well-determined residual is its own budget
    assert torch.allclose(out / tr[:, None, None], torch.diag(prior / prior.sum()).expand(c, k, k), atol=1e-12)


def test_the_completion_adds_only_outside_the_kept_spikes_and_keeps_the_total():
    """A strong spike is kept as is; the prior fills the rest so that the trace is the released one."""
    c, k, s, theta = 10, 30, 0.01, 1.0
    u = torch.zeros(k, dtype=torch.float64)
    u[0] = 1.0
    cov = theta * u[:, None] * u[None, :] + _noise(c, k, s, 1)
    traces, tau = torch.full((c,), 1.5, dtype=torch.float64), torch.full((c,), 1e-3, dtype=torch.float64)
    out = prior_completed_covariances(cov, torch.full((c,), 100.0, dtype=torch.float64),
                                      torch.full((c,), s, dtype=torch.float64), traces, tau,
                                      torch.ones(k, dtype=torch.float64))
    assert torch.allclose(torch.diagonal(out, dim1=-2, dim2=-1).sum(-1), traces, rtol=1e-3)
    assert torch.allclose(out[:, 0, 0], torch.full((c,), theta, dtype=torch.float64), rtol=0.05)
    rest = torch.diagonal(out, dim1=-2, dim2=-1)[:, 1:]  # isotropic prior: about even over the other directions
    assert torch.allclose(rest.sum(-1), torch.full((c,), 0.5, dtype=torch.float64), rtol=0.1)  # spike error ~ s sqrt K
    assert float(rest.min()) > 0.5 * 0.5 / (k - 1) and float(rest.max()) < 1.5 * 0.5 / (k - 1)


def test_corrected_trace_is_unbiased_with_the_stated_noise_std():
    """Over many noise draws of a real release: mean of T_c = the empirical class trace, spread = tau_c."""
    g = torch.Generator().manual_seed(2)
    k, r, n, sigma, draws = 6, 1.0, 200, 0.5, 4000
    z = torch.randn(n, k, generator=g, dtype=torch.float64) * 0.2 + 0.3
    z = z * (r / z.norm(dim=1, keepdim=True)).clamp(max=1.0)
    y = torch.zeros(n, dtype=torch.long)
    w = moment_weights(r)
    v = class_moment_vector(z, y, 1, w)
    noisy = v + sigma * torch.randn(draws, *v.shape[1:], generator=g, dtype=torch.float64)
    n_hat = (noisy[:, 0] / w[0]).clamp_min(1.0)
    mu = noisy[:, 1:1 + k] / w[1] / n_hat[:, None]
    m = noisy[:, 1 + k:].reshape(draws, k, k) / w[2]
    cov = 0.5 * (m + m.transpose(1, 2)) / n_hat[:, None, None] - mu[:, :, None] * mu[:, None, :]
    traces, tau = corrected_traces(cov, mu, n_hat, sigma, w)
    truth = float(torch.cov(z.T, correction=0).trace())
    assert abs(float(traces.mean()) - truth) < 4 * float(tau.mean()) / math.sqrt(draws)
    assert float(traces.std()) == pytest.approx(float(tau.mean()), rel=0.1)


def test_budgets_are_positive_and_follow_a_well_measured_residual():
    assert float(positive_part_mean(torch.tensor([0.0]), torch.tensor([4.0]))) == pytest.approx(
        2.0 * math.sqrt(2.0 / math.pi))
    b = residual_budgets(torch.tensor([-50.0, -5.0, 0.0, 3.0], dtype=torch.float64),
                         torch.full((4,), 2.0, dtype=torch.float64))
    assert bool((b > 0).all()), b.tolist()
    sharp = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    assert torch.allclose(residual_budgets(sharp, torch.full((3,), 1e-4, dtype=torch.float64)), sharp, rtol=1e-3)


def test_the_dct_prior_is_one_over_one_plus_squared_frequency_in_basis_order():
    p = dct_prior_spectrum((1, 8, 8), 64)
    assert p[0] == 1.0 and p[1] == p[2] == 0.5 and p[3] == 0.2 and p[-1] == pytest.approx(1 / 99)
    assert dct_prior_spectrum((3, 8, 8), 4).tolist() == [1.0, 1.0, 1.0, 0.5]  # channel-major per frequency
