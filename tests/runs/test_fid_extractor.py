"""The domain FID extractor is one network per (data, settings), whatever the run's device and the global random
state when it is trained, so one synthetic set gets one FID; every FID comes with the real-vs-real floor of the
same extractor and reference set."""

from __future__ import annotations

import torch

from dpgen.data.datasets import digits
from dpgen.eval.fid import DomainSettings, domain_extractor, frechet_distance

TINY = DomainSettings(epochs=1, min_steps=60, batch_size=64, num_features=32)


def synthetic(data) -> torch.Tensor:
    """One fixed synthetic set: the real test images, blurred by noise (seeded)."""
    g = torch.Generator().manual_seed(7)
    return (data.test.x + 0.2 * torch.randn(data.test.x.shape, generator=g)).clamp(0, 1)


def test_one_synthetic_set_gets_one_fid_whatever_the_random_stream_beside_the_extractor(tmp_path, monkeypatch):
    data = digits(public_fraction=0.0, seed=0)
    fake = synthetic(data)
    torch.manual_seed(1)
    ext_a, plan, _ = domain_extractor(data, tmp_path / "a", TINY, log=lambda *_: None)
    # another device draws its dropout masks and initial weights from another stream (CUDA's, not the CPU's),
    # which no seed call on the CPU pins: simulated by another global seed and a `torch.manual_seed` that does nothing
    torch.manual_seed(2)
    monkeypatch.setattr(torch, "manual_seed", lambda seed: torch.default_generator)
    ext_b, _, _ = domain_extractor(data, tmp_path / "b", TINY, log=lambda *_: None)
    for (name, a), b in zip(ext_a.state_dict().items(), ext_b.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert frechet_distance(plan.ref.x, fake, ext_a) == frechet_distance(plan.ref.x, fake, ext_b)


def test_training_the_extractor_leaves_the_global_random_state_alone(tmp_path):
    data = digits(public_fraction=0.0, seed=0)
    torch.manual_seed(3)
    before = torch.random.get_rng_state()
    domain_extractor(data, tmp_path, TINY, log=lambda *_: None)
    assert torch.equal(torch.random.get_rng_state(), before)
