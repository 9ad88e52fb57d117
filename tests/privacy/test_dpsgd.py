"""DP-SGD primitives: per-sample gradients, clipping bound, calibrated noise."""

from __future__ import annotations

import pytest
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


def _ghost_chunk(x: torch.Tensor):
    """A ``model.per_sample=ghost`` chunk of a bias-free Linear (D = 200 x 100 = 20,000) on the rows x: its
    per-sample gradients are never formed (``privacy.per_sample.GhostGrads``)."""
    from dpgen.privacy.per_sample import ghost_grads

    torch.manual_seed(0)
    lin = torch.nn.Linear(200, 100, bias=False)
    return ghost_grads(lin, lambda out: out.square().sum(1), (x,))


@pytest.mark.parametrize("path", ["rows", "ghost"])
def test_noise_std_equals_sigma_times_clip_over_expected_batch(path):
    c, sigma, qn = 2.0, 1.5, 10.0
    chunk = {"w": torch.zeros(4, 20000)} if path == "rows" else _ghost_chunk(torch.zeros(4, 200))
    mech = NoisyGradientSum(PrivacyLedger(None, 1e-5), clip_norm=c, sample_rate=0.1, expected_batch_size=qn, seed=1,
                            noise=FixedMultiplier(sigma))
    out = mech.release([chunk])
    std = next(iter(out.values())).std().item()
    assert abs(std - sigma * c / qn) / (sigma * c / qn) < 0.03
    assert mech.ledger.steps == 1


@pytest.mark.parametrize("path", ["rows", "ghost"])
def test_noisy_gradient_sum_clips_each_sample_inside_the_release(path):
    """Noiseless: 6 samples of norms far above C: the released sum times qN has norm <= 6 C, and equals the sum of
    the clipped rows."""
    x = torch.randn(6, 200) * 100
    chunk = _ghost_chunk(x)
    rows = chunk.rows(6)
    quiet = NoisyGradientSum(PrivacyLedger(None, 1e-5), clip_norm=1.5, sample_rate=0.1, expected_batch_size=6.0,
                             seed=0, noise=NotPrivate())
    out = next(iter(quiet.release([{"w": rows} if path == "rows" else chunk]).values()))
    assert (torch.linalg.vector_norm(rows, dim=1) > 100).all()
    assert out.norm() * 6.0 <= 6 * 1.5 * (1 + 1e-5)
    want = (rows * (1.5 / torch.linalg.vector_norm(rows, dim=1, keepdim=True))).sum(0) / 6.0
    torch.testing.assert_close(out.reshape(-1), want, rtol=1e-4, atol=1e-6)


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


def test_poisson_indices_draw_the_poisson_sample_without_a_device_read():
    """Size Binomial(n, q) on the host, then a uniform subset: every record in with probability q,
    independently (pairs in with q^2), sizes of mean n q and variance n q (1 - q)."""
    from dpgen.privacy.sampler import poisson_indices

    n, q, draws = 20, 0.3, 4000
    size_gen, gen = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
    inc = torch.zeros(draws, n)
    for t in range(draws):
        idx = poisson_indices(n, q, size_gen, gen, torch.device("cpu"))
        assert torch.equal(idx, idx.sort().values) and idx.unique().numel() == idx.numel()
        inc[t, idx] = 1.0
    sizes = inc.sum(1)
    assert abs(float(sizes.mean()) - n * q) < 0.15 and abs(float(sizes.var()) / (n * q * (1 - q)) - 1) < 0.1
    assert float((inc.mean(0) - q).abs().max()) < 0.04                       # each record: probability q
    assert abs(float((inc[:, 0] * inc[:, 1]).mean()) - q * q) < 0.02         # independent inclusions


def test_sampler_sized_on_the_host_resumes_its_batches(monkeypatch):
    """The accelerator path (exercised here on the CPU): a restored state draws the same batches."""
    from dpgen.data.base import PrivateSplit
    from dpgen.privacy.sampler import PrivateSampler

    monkeypatch.setattr(PrivateSampler, "_sized_on_host", property(lambda self: self.sampling == "poisson"))
    src = PrivateSplit(torch.arange(50.0).view(50, 1), torch.zeros(50, dtype=torch.long))
    a = PrivateSampler(src, 10, "poisson", seed=3)
    a.sample()
    state = {k: v.clone() if torch.is_tensor(v) else v for k, v in a.state_dict().items()}
    first = [a.sample()[0] for _ in range(3)]
    b = PrivateSampler(src, 10, "poisson", seed=99)
    b.load_state_dict(state)
    assert all(torch.equal(x, b.sample()[0]) for x in first)


def test_auto_microbatch_is_the_cpu_chunk_off_cuda():
    from dpgen.privacy.dpsgd import CPU_MICROBATCH, auto_microbatch, poisson_capacity

    assert auto_microbatch(_model(), _loss_one, (5,), torch.device("cpu"), capacity=1000) == CPU_MICROBATCH
    assert auto_microbatch(_model(), _loss_one, (5,), torch.device("cpu"), capacity=3) == 3
    cap = poisson_capacity(60000, 1024 / 60000)
    assert 1024 + 6 * 31 < cap < 1024 + 6 * 33 and poisson_capacity(10, 0.9) <= 10


def test_the_auto_chunk_fits_half_the_free_memory_shared_by_the_sweeps_jobs():
    from dpgen.privacy.dpsgd import chunk_that_fits

    assert chunk_that_fits(8 * 2**30, 2**20, capacity=10**6) == 4096          # half of 8 GiB at 1 MiB a row
    assert chunk_that_fits(8 * 2**30, 2**20, capacity=10**6, jobs=4) == 1024  # four runs on one GPU
    assert chunk_that_fits(8 * 2**30, 2**20, capacity=1215) == 1215           # the whole batch: one vmap
    assert chunk_that_fits(2**20, 2**30, capacity=1215) == 1
