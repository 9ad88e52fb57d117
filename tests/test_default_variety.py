"""The default demo's samples have variety in every class (pooled spiked shrinkage, dpgen/privacy/moments.py)."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from dpgen.logging import RunLogger
from dpgen.methods.base import TrainContext
from dpgen.methods.loop import train
from dpgen.privacy.moments import moments_from_vector, pooled_spiked_covariances, spiked_shrinkage

from ._hydra import compose_cfg

MIN_DIRECTIONS = 3  # fixed before measuring: at least 3 of the 64 directions of variation per class


def _default(tmp_path, seed: int, shrinkage: str = "pooled"):
    GlobalHydra.instance().clear()
    cfg = compose_cfg([f"seed={seed}", f"model.shrinkage={shrinkage}", "logger=local", "trainer.progress=false"],
                      out_dir=tmp_path)
    method, ledger, data = (instantiate(cfg.model, _convert_="all"), instantiate(cfg.accountant, _convert_="all"),
                            instantiate(cfg.dataset))
    ctx = TrainContext(device=torch.device("cpu"), logger=RunLogger(tmp_path), run_dir=tmp_path, seed=seed,
                       progress=False, deterministic=True)
    train(method, data, ledger, ctx)
    assert ledger.epsilon() <= 10.0
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
    with pytest.raises(ValueError, match="model.shrinkage='bogus' is unknown"):
        moments_from_vector(v, 2, (1.0, 1.0, 1.0), 1e-6, noise_std=0.1, shrinkage="bogus")
