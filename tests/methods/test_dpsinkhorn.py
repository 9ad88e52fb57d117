"""DP-Sinkhorn: sanitised image gradient, accounting, generators, resume, end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from dpgen.data.datasets import digits
from dpgen.methods import loop
from dpgen.methods.dpsinkhorn import DPSinkhorn
from dpgen.models import BigGANCondGenerator, DCGANCondGenerator
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.image_gradient import effective_noise_multiplier, sanitize, sensitivity
from tests.helpers import ROOT
from tests.helpers.context import train_context


# -- the mechanism ---------------------------------------------------------------------------
def test_sanitised_cross_gradient_has_norm_at_most_c_before_noise():
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 1e3):
        grad = scale * torch.randn(50, 794, generator=g)
        out = sanitize(grad, 0.5, 0.0, "whole")
        assert float(out.norm()) <= 0.5 + 1e-6
        if float(grad.norm()) <= 0.5:
            torch.testing.assert_close(out, grad)  # inside the ball: unchanged
        rows = sanitize(grad, 0.5, 0.0, "per_row")
        assert float(rows.norm(dim=1).max()) <= 0.5 + 1e-6


def test_noise_std_is_2_c_sigma():
    out = sanitize(torch.zeros(200, 500), c=0.5, sigma=1.1, generator=torch.Generator().manual_seed(0))
    assert float(out.std()) == pytest.approx(2 * 0.5 * 1.1, rel=0.01)
    assert float(out.mean()) == pytest.approx(0.0, abs=0.01)


def test_per_row_clipping_is_accounted_with_sensitivity_growing_with_sqrt_n():
    assert sensitivity(0.5, 50, "whole") == pytest.approx(1.0)
    assert sensitivity(0.5, 50, "per_row") == pytest.approx(math.sqrt(50))
    assert effective_noise_multiplier(1.1, 50, "whole") == pytest.approx(1.1)
    assert effective_noise_multiplier(1.1, 50, "per_row") == pytest.approx(1.1 / math.sqrt(50))


class ProbeGenerator(nn.Module):
    """A tiny conditional generator that records the gradient arriving at its output (after the
    method's hooks on the cross / debias groups)."""

    def __init__(self, image_shape=(1, 8, 8), n_labels=10, **_):
        super().__init__()
        self.d_code, self.image_shape = 4, tuple(image_shape)
        self.lin = nn.Linear(4 + n_labels, math.prod(image_shape))
        self.n_labels, self.grads = n_labels, []

    @property
    def conditional(self):
        return True

    def latent(self, n, device="cpu", generator=None):
        return torch.rand(n, self.d_code, device=device, generator=generator)

    def forward(self, z, y=None):
        h = torch.cat([z, nn.functional.one_hot(y, self.n_labels).float()], 1)
        out = torch.tanh(self.lin(h)).view(-1, *self.image_shape)
        if out.requires_grad:
            out.register_hook(lambda g: self.grads.append(g.detach().clone()))
        return out


@pytest.fixture(scope="module")
def data():
    return digits(public_fraction=0.0, seed=0)


def _fit(tmp_path, data, steps=1, eps=10.0, sampling="poisson", resume=None, max_steps=None, **kw):
    probe: dict = {}

    def make(**a):
        probe["g"] = ProbeGenerator(**a)
        return probe["g"]

    defaults = dict(batch_size=20, steps=steps, lr=1e-3, reg=0.5, scaling=0.8, debias="semi", debias_ratio=0.4,
                    clip_norm=0.5, noise_multiplier=1.0)
    method = DPSinkhorn(make, **{**defaults, **kw})
    ledger = PrivacyLedger(eps, 1e-4, sampling)
    ctx = train_context(tmp_path, log_every=1, checkpoint_every=2, resume_from=resume, max_steps=max_steps)
    out = loop.train(method, data, ledger, ctx)
    return method, ledger, out, probe["g"]


def test_noise_only_on_the_cross_group_with_std_2_c_sigma_and_debias_rows_clipped(tmp_path, data, monkeypatch):
    _, _, _, g = _fit(tmp_path, data, noise_multiplier=50.0, clip_norm=0.5)
    grad = g.grads[0].flatten(1)
    n, n_extra = 20, 8  # n' = floor(0.4 * 20)
    assert grad.shape[0] == n + n_extra
    assert float(grad[:n].std()) == pytest.approx(2 * 0.5 * 50.0, rel=0.1)  # noise dominates the clipped part
    assert float(grad[n:].norm()) <= 0.5 + 1e-5  # debias rows: clipped, not noised
    # the same step with the noise switched off inside the mechanism: the cross group arrives clipped to C
    from dpgen.privacy.mechanisms import ImageGradientSanitiser

    seen = {}
    real = ImageGradientSanitiser.release

    def no_noise(self, grad_in):
        seen["raw"], seen["sigma"] = float(grad_in.norm()), self.sigma
        std, self.noise_std = self.noise_std, 0.0
        try:
            return real(self, grad_in)
        finally:
            self.noise_std = std

    monkeypatch.setattr(ImageGradientSanitiser, "release", no_noise)
    _, _, _, g2 = _fit(tmp_path / "nonoise", data, clip_norm=1e-3)
    assert seen["sigma"] == 1.0 and seen["raw"] > 1e-3  # the raw gradient was larger than C
    assert float(g2.grads[0].flatten(1)[:n].norm()) == pytest.approx(1e-3, rel=1e-4)


def test_accounting_follows_the_configured_sampling_and_clipping(tmp_path, data):
    _, ledger, out, _ = _fit(tmp_path / "a", data, steps=3, noise_multiplier=1.3)
    s = ledger.summary()
    assert s["private_steps"] == 3 and s["sampling"] == "poisson" and s["epsilon_pld"] is not None
    e = ledger.entries[0]
    assert e.noise_multiplier == pytest.approx(1.3) and e.sample_rate == pytest.approx(20 / len(data.private))
    _, ledger_r, out_r, _ = _fit(tmp_path / "b", data, steps=3, noise_multiplier=5.0, clip="per_row")
    assert ledger_r.entries[0].noise_multiplier == pytest.approx(5.0 / math.sqrt(20))
    assert out_r["sensitivity"] == pytest.approx(2 * 0.5 * math.sqrt(20))
    _, ledger_w, _, _ = _fit(tmp_path / "c", data, steps=2, sampling="without_replacement")
    assert ledger_w.summary()["sampling"] == "without_replacement" and ledger_w.summary()["epsilon_pld"] is None


def test_training_stops_before_the_target_epsilon_is_exceeded(tmp_path, data):
    method, ledger, out, _ = _fit(tmp_path, data, steps=None, eps=0.6, noise_multiplier=2.0, batch_size=64)
    assert out["stopped_by_budget"] and ledger.epsilon() <= 0.6
    extra = PrivacyLedger(0.6, 1e-4, "poisson")
    extra.record(2.0, 64 / len(data.private), out["train_steps"] + 1)
    assert extra.epsilon() > 0.6  # one more step would have exceeded it


def test_calibrated_sigma_spends_the_target_epsilon_in_the_configured_steps(tmp_path, data):
    _, ledger, out, _ = _fit(tmp_path, data, steps=4, eps=3.0, noise_multiplier=None)
    assert out["sigma_calibrated"] and ledger.summary()["private_steps"] == 4
    # the sanitiser calibrates with the ledger's calibrating accountant (PLD for Poisson), which also stops
    assert 0.97 * 3.0 <= ledger.epsilon() <= 3.0


def test_resume_continues_the_ledger_and_the_step_count(tmp_path, data):
    _fit(tmp_path, data, steps=6, max_steps=2)
    _, ledger, out, _ = _fit(tmp_path, data, steps=6, resume=tmp_path / "checkpoints" / "last.pt")
    assert out["train_steps"] == 6 and ledger.summary()["private_steps"] == 6
    with pytest.raises(ValueError, match="cannot resume"):
        _fit(tmp_path, data, steps=6, resume=tmp_path / "checkpoints" / "last.pt", clip_norm=0.3)


def test_a_non_finite_private_loss_neither_stops_nor_steers_the_run(tmp_path, data, monkeypatch):
    """Defect 4: the run aborted when the UN-noised private loss was not finite (a one-bit release).
    Now nothing branches on it: the sanitiser maps non-finite gradient entries to 0 before clipping
    (the release is then noise only), the run goes on and every step is recorded."""
    import dpgen.methods.dpsinkhorn as mod

    real = mod.sinkhorn_generator_loss

    def nan_cross_term(ot, rows_gen, rows_real, n, debias, ratio):  # NaN through the private cross term only
        return real(ot, rows_gen, rows_real, n, debias, ratio) + rows_gen[:n].sum() * rows_real.sum() * float("nan")

    monkeypatch.setattr(mod, "sinkhorn_generator_loss", nan_cross_term)
    method, ledger, out, _ = _fit(tmp_path, data, steps=3, noise_multiplier=2.0)
    assert out["train_steps"] == 3 == ledger.steps and math.isfinite(out["train_released_grad_norm"])
    assert all(torch.isfinite(p).all() for p in method.G.parameters())


def test_a_non_finite_private_pixel_cannot_crash_the_run(tmp_path, data):
    """Real images enter through the PUBLIC value range (NaN -> the range's low end, clamp), so a bad
    private record cannot abort the run (GeomLoss raises on a NaN diameter)."""
    from dpgen.data.base import DataSplits, PrivateSplit

    x, y = data.private._gather(torch.arange(len(data.private)))
    x = x.clone()
    x[:, :, 0, 0] = float("nan")
    bad = DataSplits(data.name, PrivateSplit(x, y), data.test, None, data.num_classes, data.image_shape,
                     data.value_range)
    _, ledger, out, _ = _fit(tmp_path, bad, steps=2, noise_multiplier=2.0)
    assert out["train_steps"] == 2 == ledger.steps


def test_bad_settings_name_the_setting():
    for kw, key in [({"cost": "l3"}, "model.cost"), ({"debias": "half"}, "model.debias"),
                    ({"clip": "col"}, "model.clip"), ({"clip_norm": 0}, "model.clip_norm"),
                    ({"debias_ratio": 1.5}, "model.debias_ratio")]:
        with pytest.raises(ValueError, match=key):
            DPSinkhorn(ProbeGenerator, **kw)


# -- generators ------------------------------------------------------------------------------
def test_generators_produce_images_of_the_data_shape_in_minus1_1():
    y = torch.arange(6) % 2
    g = DCGANCondGenerator((1, 28, 28), n_labels=10)
    x = g(g.latent(6), y)
    assert x.shape == (6, 1, 28, 28) and float(x.abs().max()) <= 1
    assert sum(p.numel() for p in g.net[0].parameters()) == 24 * 256 * 7 * 7  # ConvT(24->4h, 7x7), no bias
    b = BigGANCondGenerator((3, 32, 32), n_labels=2)
    xb = b(b.latent(6), y)
    assert xb.shape == (6, 3, 32, 32) and float(xb.abs().max()) <= 1 and len(b.blocks) == 3


# -- end to end ------------------------------------------------------------------------------
@pytest.mark.slow  # the fast suite runs this preset end to end in tests/e2e/test_presets_e2e.py
def test_digits_dpsinkhorn_run_writes_results_json(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "1", "DPGEN_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=digits_dpsinkhorn", "logger=local",
                        "trainer.max_steps=15", "trainer.log_every=5", "trainer.progress=false",
                        "evaluator.n_synthetic=500", "evaluator.mlp_max_iter=20", "evaluator.logreg_max_iter=50",
                        "evaluator.cnn.epochs=1", "evaluator.cnn.min_steps=5", "evaluator.fid.n_fid=300",
                        "evaluator.fid.domain.min_steps=100", f"hydra.run.dir={out}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]
    assert all(math.isfinite(m[key]) for key in ("acc_logreg", "acc_mlp", "acc_cnn")), m  # 15 steps: near chance
    assert m["fid_extractor"] == "domain" and math.isfinite(m["fid"])
    assert res["privacy"]["private_steps"] == 15 and 0 < res["privacy"]["epsilon"] <= 10.0
    assert (out / "samples.png").exists() and (out / "generator.pt").exists()


def test_ablation_preset_sweeps_the_nine_cost_and_debias_cells():
    from tests.helpers.configs import compose_cfg

    cfg = compose_cfg(["experiment=mnist_dpsinkhorn_ablation"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert params["model.cost"].split(",") == ["l2", "l1", "l1+l2"]
    assert params["model.debias"].split(",") == ["none", "full", "semi"]
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN" and cfg.model._target_.endswith("DPSinkhorn")


@pytest.mark.parametrize("exp", ["mnist_dpsinkhorn", "fmnist_dpsinkhorn", "celeba32_dpsinkhorn", "mnist_sinkhorn",
                                 "digits_dpsinkhorn", "digits_dpsinkhorn_dct"])
def test_presets_compose_with_the_spec_hyperparameters(exp):
    from hydra.utils import instantiate

    from tests.helpers.configs import compose_cfg

    cfg = compose_cfg([f"experiment={exp}"])
    m = instantiate(cfg.model, _convert_="all")
    assert m.ratio == 0.4 and m.embed_multiplier == 15.0
    expected = {"mnist_dpsinkhorn": (1.0, 1.1, 0.5, 0.05, 50), "fmnist_dpsinkhorn": (3.0, 0.9, 0.5, 0.05, 50),
                "celeba32_dpsinkhorn": (1.0, 0.8, 0.1, 5.0, 200)}
    if exp in expected:
        assert (m.ot.m, m.sigma, m.clip_norm, m.ot.reg, m.batch_size) == expected[exp]
    assert m.private == (exp != "mnist_sinkhorn")


# -- representation --------------------------------------------------------
def test_dct_representation_runs_and_the_ledger_records_the_same_mechanism(tmp_path, data):
    rep = {"kind": "dct", "n_components": 16}
    method, ledger, out, g = _fit(tmp_path / "dct", data, steps=2, noise_multiplier=50.0, representation=rep)
    _, ledger_px, out_px, _ = _fit(tmp_path / "px", data, steps=2, noise_multiplier=50.0)
    assert method.basis.shape == (64, 16) and out["representation"] == "dct-16" and out_px["representation"] is None
    assert ledger.steps == ledger_px.steps == 2
    for e, e_px in zip(ledger.entries, ledger_px.entries, strict=True):  # same mechanism, same rate, same multiplier
        assert e.same_release(e_px) and e.steps == e_px.steps and e.mechanism
    assert out["sensitivity"] == out_px["sensitivity"] == pytest.approx(2 * 0.5)
    assert ledger.epsilon() == pytest.approx(ledger_px.epsilon())
    grad = g.grads[0].flatten(1)  # the release is still on the IMAGES: (n + n', 64), noise std 2 C sigma
    assert grad.shape == (28, 64) and float(grad[:20].std()) == pytest.approx(2 * 0.5 * 50.0, rel=0.1)
    assert float(grad[20:].norm()) <= 0.5 + 1e-5


def test_pixels_mode_is_the_default_and_a_full_dct_is_a_rotation_of_the_l2_cost(tmp_path, data, monkeypatch):
    """``representation: null`` keeps the pixel features (no basis, no signature key: old checkpoints
    resume).  All 64 DCT frequencies are a rotation, so under the L2 cost the released gradient of the
    first step is the same as with pixels: the codes path computes the same loss on rotated features."""
    from dpgen.privacy.mechanisms import ImageGradientSanitiser

    seen = []
    real = ImageGradientSanitiser.release

    def no_noise(self, grad_in):
        seen.append(grad_in.detach().clone())
        std, self.noise_std = self.noise_std, 0.0
        try:
            return real(self, grad_in)
        finally:
            self.noise_std = std

    monkeypatch.setattr(ImageGradientSanitiser, "release", no_noise)
    torch.manual_seed(0)  # same generator weights, latents and labels in the three runs
    px, _, _, _ = _fit(tmp_path / "px", data, cost="l2", clip_norm=1e3)
    assert px.basis is None and "representation" not in px.signature()
    torch.manual_seed(0)
    full, _, _, _ = _fit(tmp_path / "dct", data, cost="l2", clip_norm=1e3, representation={"kind": "dct"})
    assert full.basis.shape == (64, 64) and full.signature()["representation"] == {"kind": "dct"}
    torch.testing.assert_close(seen[1], seen[0], rtol=1e-3, atol=1e-4)
    torch.manual_seed(0)
    part, _, _, _ = _fit(tmp_path / "dct8", data, cost="l2", clip_norm=1e3,
                         representation={"kind": "dct", "n_components": 8})
    assert not torch.allclose(seen[2], seen[0], rtol=1e-3, atol=1e-4)  # a truncated basis changes the loss


def test_the_representation_is_a_public_constant_never_read_from_private_data(data):
    import dataclasses

    from dpgen.data.representations import dct_basis
    from dpgen.methods.dpsinkhorn import sinkhorn_representation

    class NoAccess:
        def __getattr__(self, name):
            raise AssertionError(f"the representation read the private split ({name})")

        def __len__(self):
            raise AssertionError("the representation read the private split (len)")

    blind = dataclasses.replace(data, private=NoAccess())
    v, c = sinkhorn_representation({"kind": "dct", "n_components": 16}, blind, torch.device("cpu"))
    torch.testing.assert_close(v, torch.from_numpy(dct_basis((1, 8, 8), 16)).float())
    assert float(c.abs().max()) == 0.0
    torch.testing.assert_close(v.T @ v, torch.eye(16))
    with pytest.raises(ValueError, match="PUBLIC split"):
        sinkhorn_representation({"kind": "pca", "n_components": 8}, blind, torch.device("cpu"))
    with pytest.raises(ValueError, match="model.representation.kind"):
        DPSinkhorn(ProbeGenerator, representation={"kind": "identity"})
    with pytest.raises(ValueError, match="model.representation accepts"):
        DPSinkhorn(ProbeGenerator, representation={"kind": "dct", "radius": 3.0})


@pytest.mark.slow  # compiles KeOps kernels into a tmp build folder
def test_online_backend_runs_the_private_step(tmp_path, tmp_path_factory, data):
    """model.sinkhorn_backend=online (KeOps) through the whole private step (embedding, semi-debiased loss,
    clipping, noise, ledger).  The loss itself is checked against tensorized in tests/ot/test_sinkhorn.py; the
    runs cannot be compared parameter by parameter here because the sampler's seed is secret (OS entropy)."""
    pykeops = pytest.importorskip("pykeops")
    old = pykeops.get_build_folder()
    pykeops.set_build_folder(str(tmp_path_factory.mktemp("keops")))  # hermetic: never the user's cache
    try:
        method, ledger, out, g = _fit(tmp_path, data, steps=2, sinkhorn_backend="online")
        assert method.ot.backend == "online" and out["train_steps"] == 2 == ledger.steps
        assert len(g.grads) == 2 and all(bool(torch.isfinite(x).all()) for x in g.grads)
        assert all(bool(torch.isfinite(p).all()) for p in g.parameters())
    finally:
        pykeops.set_build_folder(old)


def test_the_sinkhorn_schedule_starts_at_the_public_bound_of_the_features(tmp_path, data):
    """ε-scaling starts at the largest cost of the features' declared box (pixels in [−1, 1] and the label
    embedding), the same at every step whatever the private batch: the MNIST bound is 5184."""
    m = DPSinkhorn(DCGANCondGenerator, batch_size=20, steps=3, noise_multiplier=1.0)
    m.setup(data, PrivacyLedger(10.0, 1e-4), train_context(tmp_path))
    d = math.prod(data.image_shape)
    assert m.ot.diameter == 4.0 * d + 2 * 15.0 ** 2 + 1.0 * (2.0 * d + 2 * 15.0)
    assert m.feature_box((1, 28, 28)) == (4.0 * 784 + 450, 2.0 * 784 + 30)
