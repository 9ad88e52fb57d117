"""The optimised per-step code computes the same maths as the steps they replaced.

The "before" steps are the bench-only copies in ``dpgen/bench/steps.py`` (what ``make bench``
times against); every test below runs the library's step and that copy on the same fixed inputs and
the same random streams and compares the results.  Tolerances: float32 rounding of a different
kernel / summation order (stated per test); any change of the maths (a missing clip, a different
loss, a different noise) moves the results by orders of magnitude more.
"""

from __future__ import annotations

import pytest
import torch

from dpgen.bench import steps
from dpgen.models import ConvCondGen, DCGANCondGenerator
from dpgen.ot.flows import quantile_levels
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.dpsgd import clip_per_sample, clipped_sum, per_sample_norms
from dpgen.privacy.mechanisms import NoisyGradientSum
from dpgen.privacy.noise import FixedMultiplier

CPU = torch.device("cpu")


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def _assert_close(a: dict, b: dict, rel: float) -> None:
    """All tensors together: ``||a - b||_2 <= rel * ||b||_2`` (float rounding of other kernels; an
    entry-wise relative error is meaningless for entries that are 0 up to rounding, such as the
    gradient of a bias followed by BatchNorm)."""
    assert a.keys() == b.keys()
    va = torch.cat([a[k].detach().flatten() for k in a])
    vb = torch.cat([b[k].detach().flatten() for k in a])
    err, scale = float((va - vb).norm()), float(vb.norm())
    assert err <= rel * scale, f"||diff|| {err:.3g} > {rel:g} * ||ref|| {scale:.3g}"


# generator -> (batch: latent codes and labels, the NCHW forward it replaced, forward tolerance)
GENERATORS = {
    "convcondgen": (ConvCondGen, lambda G: (torch.randn(100, 10), torch.arange(10).repeat_interleave(10)),
                    steps.convcondgen_forward_before, 1e-6),
    "dcgan": (DCGANCondGenerator, lambda G: (G.latent(20), torch.arange(20) % 10), steps.dcgan_forward_before, 1e-5),
}


@pytest.mark.parametrize("name", list(GENERATORS))
def test_channels_last_forward_and_gradients_equal_nchw(name):
    make, batch, before, atol = GENERATORS[name]
    torch.manual_seed(0)
    G = make()
    z, y = batch(G)
    w = torch.randn(z.shape[0], 1, 28, 28)
    out = G(z, y)
    (out * w).sum().backward()
    g_new = _grads(G)
    G.zero_grad()
    ref = before(G, z, y)
    (ref * w).sum().backward()
    torch.testing.assert_close(out, ref, rtol=0, atol=atol)
    _assert_close(g_new, _grads(G), rel=1e-5)


@pytest.mark.parametrize("preset", ["mnist", "digits"])
def test_dpswd_step_equals_reference_step(preset):
    """Same private batch, directions, noise and latent codes: same loss and generator gradient."""
    torch.manual_seed(0)
    new = steps.dpswd_method(CPU, preset)
    torch.manual_seed(0)
    old = steps.dpswd_method(CPU, preset)
    _assert_close(dict(new.G.named_parameters()), dict(old.G.named_parameters()), rel=0.0)
    torch.manual_seed(1)
    loss_new = new.step(0)["loss"]
    torch.manual_seed(1)
    loss_old = steps.dpswd_step_before(old, 0)["loss"]
    assert loss_new == pytest.approx(loss_old, rel=1e-5)
    _assert_close(_grads(new.G), _grads(old.G), rel=1e-4)


def test_dpsinkhorn_step_equals_reference_step():
    """Same batch, latent codes and sanitiser noise: same released image gradient and generator gradient."""
    torch.manual_seed(0)
    new = steps.dpsinkhorn_method(CPU)
    torch.manual_seed(0)
    old = steps.dpsinkhorn_method(CPU)
    torch.manual_seed(1)
    r_new = new.step(0)["released_grad_norm"]
    torch.manual_seed(1)
    r_old = steps.dpsinkhorn_step_before(old, 0)["released_grad_norm"]
    assert r_new == pytest.approx(r_old, rel=1e-5)
    # rel 1e-2: the generated images differ by ~1e-6 (rounding of the other conv kernels), and the
    # Sinkhorn plan exp(-C / λ) with costs C ~ 10^2-10^3 at λ = 0.05 amplifies that to ~1e-3 (measured)
    _assert_close(_grads(new.G), _grads(old.G), rel=1e-2)


def test_dpswflow_r_step_equals_reference_step():
    """The one-sort transport map is bit-identical to the literal form, so the whole step is."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 8, generator=g)
    y = torch.nn.functional.normalize(torch.randn(250, 8, generator=g), dim=1)
    levels = quantile_levels(3000)
    torch.manual_seed(2)
    a = steps.flow_r_step_after(x, y, 70, levels, 5.05, reg=0.1)
    torch.manual_seed(2)
    b = steps.flow_r_step_before(x, y, 70, levels, 5.05, reg=0.1)
    assert torch.equal(a, b)


def _chunks(grads: dict, size: int):
    n = next(iter(grads.values())).shape[0]
    return [{k: v[i:i + size] for k, v in grads.items()} for i in range(0, n, size)]


@pytest.mark.parametrize("scale", [0.01, 10.0])  # every sample inside the C-ball / every sample clipped
def test_clipped_sum_equals_sum_of_clipped_copies(scale):
    g = torch.Generator().manual_seed(0)
    grads = {"a": scale * torch.randn(40, 7, 5, generator=g), "b": scale * torch.randn(40, 3, generator=g)}
    ref = steps.clip_per_sample_before(grads, 1.0)
    s, norms = clipped_sum(grads, 1.0)
    _assert_close(s, {k: v.sum(0) for k, v in ref.items()}, rel=1e-5)
    torch.testing.assert_close(norms, torch.cat([v.flatten(1) for v in grads.values()], 1).norm(dim=1))
    torch.testing.assert_close(per_sample_norms(clip_per_sample(grads, 1.0)[0]).max(),
                               torch.tensor(min(1.0, float(norms.max()))), rtol=1e-5, atol=0)


def test_noisy_gradient_sum_equals_reference_release():
    """Chunks of 16 through the mechanism vs chunks of 128 through the old release, same noise seed."""
    g = torch.Generator().manual_seed(0)
    grads = {"w": torch.randn(256, 20, 6, generator=g), "b": torch.randn(256, 6, generator=g)}

    def mech(cls):
        return cls(PrivacyLedger(None, 1e-5), clip_norm=1.0, sample_rate=0.01, expected_batch_size=256.0, seed=3,
                   noise=FixedMultiplier(1.0))

    new, old = mech(NoisyGradientSum), mech(steps.NoisyGradientSumBefore)
    out = new.release(_chunks(grads, 16))
    ref = old.release(_chunks(grads, 128))
    _assert_close(out, ref, rel=1e-5)
    assert new.releases == old.releases == 1


def test_bench_only_merges_its_section_and_keeps_the_rest():
    """``dpgen/bench/run.py --only steps`` replaces the marked ``steps`` block, appends it when absent,
    and leaves every other line of docs/benchmarks.md alone."""
    from dpgen.bench import run as bench

    doc = "# Benchmarks\n\nhand-written notes\n"
    once = bench.merge_sections(doc, {"steps": "## Per-step\n\n| a |\n"})
    assert once.startswith(doc.rstrip("\n")) and "<!-- bench:steps" in once and "| a |" in once
    twice = bench.merge_sections(once + "\ntrailing notes\n", {"steps": "## Per-step\n\n| b |\n"})
    assert "| a |" not in twice and "| b |" in twice
    assert "hand-written notes" in twice and twice.rstrip().endswith("trailing notes")
    assert twice.count("<!-- bench:steps") == 1
