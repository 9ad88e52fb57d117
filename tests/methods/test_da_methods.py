"""Domain adaptation: gradient reversal, the DP-SWD adapter's privacy boundary, DP-DANN's
per-sample clipping and calibration, schedules and presets."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from hydra.utils import instantiate

from dpgen.data import PrivateSplit, TensorSplit
from dpgen.data.domain import DomainSplits
from dpgen.methods import loop
from dpgen.methods.domain_adaptation import (
    AlignmentContext,
    DANNAlignment,
    DomainAdaptation,
    DPDANNAlignment,
    DPSWDAlignment,
    SWDAlignment,
)
from dpgen.models.da import (
    DigitsClassifier,
    DigitsFeatureExtractor,
    DomainDiscriminator,
    MLPClassifier,
    MLPFeatureExtractor,
    grad_reverse,
)
from dpgen.privacy import PrivacyLedger, RDPAccountant, Release
from dpgen.privacy.projection import ProjectionDP
from tests.helpers.configs import compose_cfg
from tests.helpers.context import train_context

PRESETS = [f"{d}_{v}" for d in ("mnist_usps", "usps_mnist", "office31", "visda", "digits_shift")
           for v in ("swd", "dpswd", "dann", "dp_dann")]


def _mlp_g(seed: int = 0) -> MLPFeatureExtractor:
    torch.manual_seed(seed)
    return MLPFeatureExtractor((12,), hidden=16, out_dim=8, out_relu=False)


def _actx(g, n=200, b=20, steps=50, eps=10.0, delta=1e-5, calibrate_with="auto") -> AlignmentContext:
    return AlignmentContext(g, n, b / n, steps, b, PrivacyLedger(eps, delta, "poisson", calibrate_with=calibrate_with),
                            torch.device("cpu"))


# ----------------------------------------------------------------------------- gradient reversal
def test_gradient_reversal_is_identity_forward_and_flips_the_gradient_sign():
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(4, 3)
    y = grad_reverse(x, 0.7)
    assert torch.equal(y, x)
    (y * w).sum().backward()
    assert torch.allclose(x.grad, -0.7 * w)


@pytest.mark.parametrize("per_sample", ["auto", "ghost"])
def test_gradient_reversal_flips_the_feature_extractor_part_of_per_sample_gradients(per_sample):
    g = _mlp_g()
    align = DPDANNAlignment(partial(DomainDiscriminator, hidden=6), weight=1.0, per_sample=per_sample)
    align.setup(_actx(g))
    x = torch.randn(3, 12)
    per = align.per_sample_target_grads(x)
    for i in range(3):  # reference: ordinary backward of one sample WITHOUT reversal
        g.zero_grad()
        align._mods["disc"].zero_grad()
        logits = align._mods["disc"](g(x[i:i + 1]))
        torch.nn.functional.cross_entropy(logits, torch.zeros(1, dtype=torch.long)).backward()
        for name, p in g.named_parameters():
            assert torch.allclose(per[f"g.{name}"][i], -p.grad, atol=1e-6), name
        for name, p in align._mods["disc"].named_parameters():
            assert torch.allclose(per[f"disc.{name}"][i], p.grad, atol=1e-6), name


# ------------------------------------------------------------------------------- DP-SWD adapter
def _dpswd(g, sigma=None, n=200, b=20):
    a = DPSWDAlignment(weight=1.0, dp=ProjectionDP(30, bound="bernstein"))
    a.setup(_actx(g, n=n, b=b))
    if sigma is not None:
        a.mechanism.noise_std = sigma  # the same release with another std (a test-only change)
    return a


def test_dpswd_adapter_has_no_autograd_path_from_target_records_to_weights():
    torch.manual_seed(0)
    g = DigitsFeatureExtractor()
    a = _dpswd(g)
    x_s = torch.rand(20, 1, 28, 28)
    x_t = torch.rand(20, 1, 28, 28, requires_grad=True)  # would receive a gradient through any autograd path
    modes = []
    g.register_forward_pre_hook(lambda m, inp: modes.append((inp[0] is x_t, m.training)))
    out = a(g, x_s, g(x_s), x_t)
    out.loss.backward()
    assert x_t.grad is None
    assert out.private_grads is None
    assert all(not training for is_target, training in modes if is_target), "target features must use eval mode"
    assert any(is_target for is_target, _ in modes)
    assert g.training, "the adapter restores train mode"
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in g.parameters())


def test_dpswd_adapter_target_rows_are_clipped_by_the_public_radius():
    g = _mlp_g()
    a = DPSWDAlignment(weight=1.0, dp=ProjectionDP(30, bound="bernstein"), feature_radius=0.01)  # tiny public R: every row clipped
    a.setup(_actx(g))
    rows = a._target_rows(g, torch.randn(35, 12) * 100)  # Poisson batch larger than B is cut to B rows
    assert rows.shape == (20, 8)
    assert (rows.norm(dim=1) <= 0.5 + 1e-6).all()


def test_dpswd_adapter_noisy_release_hides_the_target_batch_as_sigma_grows():
    """With the same directions and noise draws, swapping the whole target batch changes the weight
    gradient by O(1/sigma): the target reaches the weights only through the noisy projections."""
    torch.manual_seed(0)
    g = DigitsFeatureExtractor()
    x_s = torch.rand(20, 1, 28, 28)
    batch_a, batch_b = torch.rand(20, 1, 28, 28), torch.rand(20, 1, 28, 28) * 0.2

    def grads(a, x_t):
        g.zero_grad()
        torch.manual_seed(123)  # same source smoothing noise for both target batches
        a.mechanism.generator.manual_seed(123)  # the release's own noise generator
        a.mechanism.directions_generator.manual_seed(123)  # and its own directions generator
        a(g, x_s, g(x_s), x_t).loss.backward()
        return torch.cat([p.grad.flatten() for p in g.parameters()])

    rel = {}
    for sigma in (0.0, 1e5):
        a = _dpswd(g, sigma)
        ga, gb = grads(a, batch_a), grads(a, batch_b)
        rel[sigma] = float((ga - gb).norm() / ga.norm())
    assert rel[0.0] > 0.05, rel  # without noise the target batch matters
    assert rel[1e5] < 1e-3, rel


def test_dpswd_adapter_accounts_with_the_feature_dimension_and_private_steps():
    g = DigitsFeatureExtractor()
    a = DPSWDAlignment(dp=ProjectionDP(200, bound="bernstein"))
    rep = a.setup(_actx(g, n=7291, b=128, steps=8 * 57, delta=1e-5))
    assert rep["feature_dim"] == 320 and rep["feature_radius"] == pytest.approx(math.sqrt(320))
    led = PrivacyLedger(10.0, 1e-5, "poisson")
    led.record(a.noise_multiplier, 128 / 7291, 8 * 57, a.delta_per_step)
    assert 9.5 < led.epsilon() <= 10.0


def test_dpswd_needs_a_public_radius_for_unbounded_features():
    a = DPSWDAlignment(feature_radius=None)
    with pytest.raises(ValueError, match="feature_radius"):
        a.setup(_actx(_mlp_g()))


# ------------------------------------------------------------------------------------- DP-DANN
def test_dp_dann_clips_each_target_sample_jointly_over_extractor_and_discriminator():
    g = _mlp_g()
    a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6), weight=1.0, clip_norm=0.05)
    a.setup(_actx(g))
    per = a.per_sample_target_grads(torch.randn(9, 12) * 10)
    names = {f"g.{k}" for k, _ in g.named_parameters()} | {f"disc.{k}" for k, _ in a._mods["disc"].named_parameters()}
    assert set(per) == names  # every parameter with a target-dependent gradient is covered
    from dpgen.privacy.dpsgd import clip_per_sample, per_sample_norms

    assert (per_sample_norms(per) > 0.05).all()
    clipped, _ = clip_per_sample(per, a.clip_norm)
    assert (per_sample_norms(clipped) <= 0.05 * (1 + 1e-5)).all()


@pytest.mark.parametrize("per_sample", ["auto", "ghost"])
def test_dp_dann_one_target_record_moves_the_noiseless_gradient_by_at_most_c_over_qn(per_sample):
    g = _mlp_g()
    a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6), weight=0.3, clip_norm=0.1, per_sample=per_sample)
    a.setup(_actx(g))
    assert a.grads.rule == "ghost"  # auto on the CPU
    a.mechanism.noise_std = 0.0  # the noiseless release (the sensitivity is a property of the clipped sum)
    x = torch.randn(10, 12) * 5
    extra = torch.randn(1, 12) * 50
    g1, g2 = a._private_grads(x), a._private_grads(torch.cat([x, extra]))
    diff = torch.cat([(g2[k] - g1[k]).flatten() for k in g1]).norm()
    assert 0 < diff <= 0.3 * 0.1 / a.expected_batch * (1 + 1e-4)


def test_dp_dann_public_part_has_no_autograd_path_from_target_records():
    g = _mlp_g()
    a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6))
    a.setup(_actx(g))
    x_s, x_t = torch.randn(20, 12), torch.randn(18, 12, requires_grad=True)
    out = a(g, x_s, g(x_s), x_t)
    out.loss.backward()
    assert x_t.grad is None and out.private_grads is not None


def test_dp_dann_calibrated_epsilon_is_at_most_the_target():
    a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6))
    a.setup(_actx(_mlp_g(), n=7291, b=128, steps=8 * 57, eps=10.0, calibrate_with="rdp"))
    eps = RDPAccountant("poisson").epsilon_of([Release(a.noise_multiplier, 128 / 7291, 8 * 57)], 1e-5)
    assert 9.9 <= eps <= 10.0


def test_released_dp_dann_sigma_overspends_epsilon_10():
    """DP-SWD paper, domain-adaptation baselines: sigma = 17 for M-U under the released accounting (WOR, E*N compositions) gives 14.2."""
    eps = RDPAccountant("without_replacement").epsilon_of([Release(17.0, 128 / 7438, 100 * 7438)], 1e-5)
    assert eps == pytest.approx(14.2, abs=0.1)


# --------------------------------------------------------------------------------- the method
def _tiny_data(n_s=60, n_t=40, d=12, seed=0) -> DomainSplits:
    gen = torch.Generator().manual_seed(seed)
    y_s, y_t = torch.randint(3, (n_s,), generator=gen), torch.randint(3, (30,), generator=gen)
    x_s = torch.randn(n_s, d, generator=gen) + y_s[:, None]
    x_t = torch.randn(n_t, d, generator=gen) + 2
    x_te = torch.randn(30, d, generator=gen) + 2 + y_t[:, None]
    return DomainSplits(name="tiny", private=PrivateSplit(x_t, torch.full((n_t,), -1)), test=TensorSplit(x_te, y_t),
                        public=TensorSplit(x_s, y_s), num_classes=3, image_shape=(1, 1, d), input_shape=(d,))


def _method(alignment, epochs=3, start_align=1, private=True):
    return DomainAdaptation(partial(MLPFeatureExtractor, hidden=16, out_dim=8), partial(MLPClassifier, hidden=8),
                            alignment, batch_size=10, epochs=epochs, start_align=start_align, lr=1e-3, private=private)


def test_warm_up_epochs_never_touch_the_private_target(tmp_path):
    data = _tiny_data()
    m = _method(DPSWDAlignment(dp=ProjectionDP(10, bound="bernstein"), feature_radius=5.0), epochs=3, start_align=2)
    led = PrivacyLedger(10.0, 1e-4, "poisson")
    out = loop.train(m, data, led, train_context(tmp_path, max_steps=8))  # 4 steps/epoch: the first 8 are warm-up
    assert out["warmup_steps"] == 8 and led.steps == 0
    led2 = PrivacyLedger(10.0, 1e-4, "poisson")
    out2 = loop.train(_method(DPSWDAlignment(dp=ProjectionDP(10, bound="bernstein"), feature_radius=5.0), epochs=3, start_align=2),
        data, led2, train_context(tmp_path / "b"))
    assert out2["private_steps_planned"] == 4 and led2.steps == 4 and led2.epsilon() <= 10.0


@pytest.mark.parametrize("alignment", [SWDAlignment(num_projections=10),
                                       DANNAlignment(partial(DomainDiscriminator, hidden=6))])
def test_non_private_variants_report_infinite_epsilon(tmp_path, alignment):
    data = _tiny_data()
    led = PrivacyLedger(None, 1e-4, "poisson")
    loop.train(_method(alignment, private=False), data, led, train_context(tmp_path))
    assert led.steps == 8 and math.isinf(led.epsilon())


def test_private_flag_must_match_the_alignment():
    with pytest.raises(ValueError, match="model.private"):
        _method(SWDAlignment(), private=True)


def test_dp_dann_fit_stops_before_the_budget_is_exceeded(tmp_path):
    data = _tiny_data()
    a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6), noise_multiplier=2.0)  # fixed sigma: 6 steps fit in eps = 2
    led = PrivacyLedger(2.0, 1e-4, "poisson")
    out = loop.train(_method(a, epochs=30, start_align=1), data, led, train_context(tmp_path))
    assert out["stopped_by_budget"] and 0 < led.steps < out["private_steps_planned"]
    assert led.epsilon() <= 2.0


def test_prediction_shape_and_classes(tmp_path):
    data = _tiny_data()
    m = _method(SWDAlignment(num_projections=10), private=False)
    loop.train(m, data, PrivacyLedger(None, 1e-4, "poisson"), train_context(tmp_path))
    p = m.predict(data.test.x)
    assert p.shape == (30,) and p.min() >= 0 and p.max() < 3


# ------------------------------------------------------------------------------------ presets
@pytest.mark.parametrize("preset", PRESETS)
def test_every_da_preset_composes_and_builds_its_method(preset, tmp_path):
    cfg = compose_cfg([f"experiment={preset}"], out_dir=tmp_path)
    m = instantiate(cfg.model, _convert_="all")
    assert isinstance(m, DomainAdaptation) and m.private == (cfg.accountant.epsilon is not None)
    assert cfg.evaluator._target_.endswith("DomainAdaptationEvaluator") and cfg.optimized_metric == "acc_target"
    in_shape = (1, 28, 28) if preset.startswith(("mnist", "usps", "digits")) else (2048,)
    g = m.make_g(in_shape=in_shape)
    h = m.make_h(in_dim=g.out_dim, num_classes=10)
    assert h(g(torch.rand(2, *in_shape))).shape == (2, 10)


def test_digits_networks_match_the_spec_sizes():
    g = DigitsFeatureExtractor()
    assert g.out_dim == 320 and g(torch.rand(3, 1, 28, 28)).shape == (3, 320)
    assert DigitsClassifier is MLPClassifier  # one class; the old name stays readable in stored configs
    assert DigitsClassifier(320, 10)(torch.rand(3, 320)).shape == (3, 10)
    with pytest.raises(ValueError, match="28x28"):
        DigitsFeatureExtractor(in_shape=(1, 16, 16))


# ------------------------------------------------------------------- replace-one DP-DANN
@pytest.mark.parametrize("fixed", [None, 3.0])
def test_replace_one_dp_dann_accounts_with_twice_the_sensitivity(tmp_path, fixed):
    """Sampling without replacement = replace-one: the clipped sum moves by up to 2C, so noise of std
    sigma*C is a Gaussian mechanism with multiplier sigma/2; the reported epsilon is the RDP epsilon of
    sigma/2 (sigma = noise std / C, the DP-SGD convention)."""
    data = _tiny_data()
    a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6), noise_multiplier=fixed)
    led = PrivacyLedger(50.0, 1e-4, "without_replacement")
    out = loop.train(_method(a, epochs=3, start_align=1), data, led, train_context(tmp_path))
    sigma, q = out["noise_std_on_sum"] / a.clip_norm, 10 / len(data.private)
    want = RDPAccountant("without_replacement").epsilon_of([Release(sigma / 2, q, led.steps)], 1e-4)
    assert led.steps == 8 and led.epsilon() == pytest.approx(want, rel=1e-9)
    assert out["noise_multiplier"] == pytest.approx(sigma / 2)  # noise std / sensitivity
    assert out["sensitivity_on_sum"] == pytest.approx(2.0 * a.clip_norm)
    if fixed is None:  # calibrated: sigma/2 meets the target, sigma/2 is the smallest that does
        assert want <= 50.0
        assert RDPAccountant("without_replacement").epsilon_of([Release(sigma / 2 * 0.98, q, 8)], 1e-4) > 50.0


def test_poisson_dp_dann_accounts_with_sigma_itself(tmp_path):
    data = _tiny_data()
    a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6), noise_multiplier=3.0)
    led = PrivacyLedger(50.0, 1e-4, "poisson")
    out = loop.train(_method(a, epochs=3, start_align=1), data, led, train_context(tmp_path))
    assert out["noise_std_on_sum"] == 3.0 * a.clip_norm and led.entries[0].noise_multiplier == 3.0


def test_short_epochs_clamp_start_align_with_a_warning_naming_both_settings():
    """A preset's start_align with a short model.epochs override runs (aligning in the last epoch)."""
    with pytest.warns(UserWarning, match=r"model\.start_align=10 >= model\.epochs=2.*model\.start_align=1"):
        m = _method(SWDAlignment(num_projections=10), epochs=2, start_align=10, private=False)
    assert m.start_align == 1 and m.schedule(40)[1] == 4  # 4 warm-up steps of 8
    with pytest.raises(ValueError, match="model.start_align"):
        _method(SWDAlignment(num_projections=10), epochs=2, start_align=-1, private=False)


def test_da_preset_with_a_short_epochs_override_builds(tmp_path):
    cfg = compose_cfg(["experiment=mnist_usps_dpswd", "model.epochs=1"], out_dir=tmp_path)
    with pytest.warns(UserWarning, match="model.start_align"):
        m = instantiate(cfg.model, _convert_="all")
    assert m.start_align == 0 and m.epochs == 1


def test_dp_dann_with_ghost_norms_releases_the_same_noiseless_gradient_and_takes_a_static_step(tmp_path):
    """``model.alignment.per_sample=ghost``: the same clipped sum as the layer rules' (noiseless release), and a step
    fit for one captured graph (``trainer.graph=on``: same ops both steps, no device read)."""
    from dpgen.bench.step_overhead import family_steps, static_check

    x = torch.randn(10, 12) * 5
    released = {}
    for rule in ("unfold", "ghost"):
        a = DPDANNAlignment(partial(DomainDiscriminator, hidden=6), weight=0.3, clip_norm=0.1, per_sample=rule)
        g = _mlp_g()
        torch.manual_seed(1)  # the same discriminator on both paths
        a.setup(_actx(g))
        a.mechanism.noise_std = 0.0
        released[rule] = a._private_grads(x)
    for k, v in released["unfold"].items():
        torch.testing.assert_close(released["ghost"][k], v, rtol=1e-5, atol=1e-8)
    fs = family_steps("dp_dann", tmp_path / "run", ["trainer.graph=on", "model.alignment.per_sample=ghost"])
    assert fs.method.alignment.grads.rule == "ghost"
    faults = static_check(fs)
    assert not faults, "\n".join(faults)
