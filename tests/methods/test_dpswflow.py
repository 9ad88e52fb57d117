"""DPSWflow-r / DPSWflow / DPSWgen: latent normalisation, noisings counted, accounting, resume, end to end."""

from __future__ import annotations

import json
import math
from functools import partial

import pytest
import torch

import dpgen.methods.latent as latentmod
from dpgen.data.datasets import digits
from dpgen.methods import DPSWFlow, DPSWFlowR, DPSWGen, loop
from dpgen.methods.latent import LatentSpace
from dpgen.models.autoencoder import LatentMLPGen, LiutkusAutoencoder
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.accountants import analytic_gaussian_epsilon
from dpgen.privacy.dpswflow import (
    flow_r_noise,
    moments_accountant_epsilon,
    one_shot_noise,
    paper_flow_noise_std,
    paper_one_shot_sigma,
)
from dpgen.privacy.errors import PrivacySettingError
from dpgen.privacy.noise import build_policy
from dpgen.privacy.projection import ProjectionDP
from tests.helpers.context import assert_holds_no_record, train_context

AE = partial(LiutkusAutoencoder, latent_dim=4, width=4, pad_to=8)
COMMON = dict(autoencoder=AE, ae_steps=20, ae_batch_size=32, autoencoder_cache=None, num_percentiles=64,
              n_particles=64)


@pytest.fixture(scope="module")
def data():
    return digits(public_fraction=0.5)


# -- latent rows ------------------------------------------------------------------------------
@pytest.mark.parametrize("label_mode", ["concat", "none"])
def test_private_latent_rows_have_unit_norm(label_mode):
    ae = LiutkusAutoencoder((1, 28, 28), latent_dim=8, width=8).eval()
    space = LatentSpace(ae, (1, 28, 28), 10, label_mode, 1.5, 1.0)
    x = torch.rand(64, 1, 28, 28)
    rows = space.rows(x, torch.randint(10, (64,)))
    assert rows.shape == (64, 8 + (10 if label_mode == "concat" else 0))
    assert torch.allclose(rows.norm(dim=1), torch.ones(64), atol=1e-5)
    assert torch.cdist(rows, rows).max() <= 2.0 + 1e-5  # the factor 2 of the sensitivity
    # decoding goes back to the image shape and [0, 1]
    img = space.decode(rows)
    assert img.shape == (64, 1, 28, 28) and 0 <= img.min() and img.max() <= 1


def test_rows_without_autoencoder_are_clipped_into_the_unit_ball():
    space = LatentSpace(None, (1, 1, 2), 5, "none", 1.0, 2.0)  # clip=True: every private run
    rows = space.rows(torch.randn(500, 1, 1, 2) * 5, None)
    assert (rows.norm(dim=1) <= 1 + 1e-6).all()


def test_autoencoder_needs_a_public_split(tmp_path):
    m = DPSWFlowR(**COMMON, epochs=1)
    with pytest.raises(ValueError, match="public_fraction"):
        loop.train(m, digits(), PrivacyLedger(10.0, 1e-4), train_context(tmp_path))


def test_autoencoder_is_trained_on_the_public_split_only(data, tmp_path, monkeypatch):
    seen = []
    real = latentmod.train_autoencoder

    def spy(ae, x_public, **kw):
        seen.append(x_public)
        return real(ae, x_public, **kw)

    monkeypatch.setattr(latentmod, "train_autoencoder", spy)
    loop.train(DPSWFlowR(**COMMON, epochs=1), data, PrivacyLedger(10.0, 1e-4), train_context(tmp_path, max_steps=1))
    assert len(seen) == 1 and seen[0] is data.public.x


# -- private releases counted ---------------------------------------------------------------
def test_dpswflow_noises_the_private_projections_exactly_once(data, tmp_path, release_spy):
    calls = release_spy()
    ledger = PrivacyLedger(10.0, 1e-4)
    m = DPSWFlow(**COMMON, dp=ProjectionDP(31, bound="chernoff"), projections_per_step=25, steps=30, label_mode="concat")
    out = loop.train(m, data, ledger, train_context(tmp_path))
    assert out["train_steps"] == 30
    assert len(calls) == 1  # one release for 30 flow steps
    (call,) = calls
    assert call.rows.shape == (len(data.private), m.space.dim)  # the whole private set
    assert call.noise_std == out["noise_std"] > 0
    assert call.noise.std().item() == pytest.approx(call.noise_std, rel=0.03)  # the noise added equals the calibrated noise
    assert ledger.steps == 1 and ledger.entries[0].sample_rate == 1.0
    assert ledger.epsilon() <= 10.0


def test_dpswflow_one_shot_release_is_recorded_replace_one_not_poisson(data, tmp_path):
    """Defect 7: the one-shot release (whole set, N public) was labelled with the sampler's poisson."""
    ledger = PrivacyLedger(10.0, 1e-4, "poisson")
    m = DPSWFlow(**COMMON, dp=ProjectionDP(31, bound="chernoff"), projections_per_step=25, steps=3)
    out = loop.train(m, data, ledger, train_context(tmp_path))
    assert [(e.relation, e.sample_rate) for e in ledger.entries] == [("replace_one", 1.0)]
    assert ledger.summary()["neighbouring_relation"] == "replace_one"
    assert out["mechanisms"]["one_shot"]["relation"] == "replace_one"
    art = torch.load(tmp_path / "release.pt", weights_only=False)  # weights only: particles and the public AE
    assert set(art) == {"particles", "autoencoder", "signature"}
    again = DPSWFlow(**COMMON, dp=ProjectionDP(31, bound="chernoff"), projections_per_step=25, steps=3)
    again.restore(data, tmp_path / "release.pt")  # a sampler from the published artefact alone
    assert torch.equal(again.X, m.X)


def test_dpswflow_r_noises_a_fresh_private_batch_every_step(data, tmp_path, release_spy):
    calls = release_spy()
    ledger = PrivacyLedger(10.0, 1e-4)
    m = DPSWFlowR(**COMMON, dp=ProjectionDP(40, bound="chernoff"), batch_size=32, epochs=2, label_mode="concat")
    out = loop.train(m, data, ledger, train_context(tmp_path, max_steps=12))
    assert out["train_steps"] == 12 and len(calls) == 12 and ledger.steps == 12
    assert all(c.rows.shape == (32, m.space.dim) and c.noise_std == out["noise_std"] for c in calls)
    noise = torch.cat([c.noise for c in calls])
    assert noise.std().item() == pytest.approx(out["noise_std"], rel=0.05)


def test_dpswgen_releases_one_private_batch_per_step(data, tmp_path, release_spy):
    calls = release_spy()
    ledger = PrivacyLedger(10.0, 1e-4)
    m = DPSWGen(generator=LatentMLPGen, **{k: v for k, v in COMMON.items() if k not in ("num_percentiles",
                                                                                           "n_particles")},
                dp=ProjectionDP(40, bound="chernoff"), batch_size=32, epochs=1)
    out = loop.train(m, data, ledger, train_context(tmp_path, max_steps=8))
    assert len(calls) == 8 == ledger.steps == out["train_steps"]
    x, y = m.sample(50, torch.arange(50) % 10)
    assert x.shape == (50, 1, 8, 8) and torch.equal(y, torch.arange(50) % 10)


@pytest.mark.parametrize("stated_dim", [None, 1024])
def test_dpswgen_paper_convention_noise_follows_the_stated_sensitivity_dimension(data, tmp_path, release_spy,
                                                                                 stated_dim):
    """privacy.paper_sensitivity_dim: the released DPSWgen trainer evaluates its CLT bound at C·W² = 1024, not at
    the latent d; the noise shrinks accordingly, the stated ε uses that bound, the TRUE ε the rows' own d."""
    from dpgen.privacy.conventions import PaperConvention

    calls = release_spy()
    ledger = PrivacyLedger(None, 1e-4)
    m = DPSWGen(generator=LatentMLPGen, **{k: v for k, v in COMMON.items() if k not in ("num_percentiles",
                                                                                           "n_particles")},
                dp=ProjectionDP(40, bound="clt"), batch_size=32, epochs=1, label_mode="none", d_code=16,
                convention=PaperConvention(0.67, 10.0, stated_dim))
    loop.train(m, data, ledger, train_context(tmp_path, max_steps=6))
    d = m.space.dim  # the latent rows' dimension (4 here)
    assert len(calls) == 6 and m.G.d_code == 16
    mech = m.projection
    assert mech.noise_std == pytest.approx(paper_flow_noise_std(0.67, stated_dim or d, 40, 1e-4))
    assert all(c.noise_std == pytest.approx(mech.noise_std) for c in calls)
    rep = m.convention_report()
    assert rep.get("paper_sensitivity_dim") == stated_dim
    if stated_dim:  # the stated bound is ~10x below the latent's own: the true epsilon is far above the stated one
        assert mech.noise_std < paper_flow_noise_std(0.67, d, 40, 1e-4) / 3
        assert rep["sensitivity_true"] > 3 * rep["sensitivity_stated"]
        assert rep["epsilon_true"] > 3 * ledger.epsilon()
        assert mech.describe()["stated_sensitivity_dim"] == 1024 and mech._config()["noise"]["stated_dim"] == 1024
    else:
        assert mech._config()["noise"]["stated_dim"] is None


def test_a_stated_sensitivity_dimension_is_a_paper_convention_only():
    """Only the PaperNoise policy carries a stated dimension, and only a projection release takes one."""
    from dpgen.privacy.mechanisms import GaussianProjectionRelease, NoisyGradientSum
    from dpgen.privacy.noise import PaperNoise
    from dpgen.privacy.sensitivity import l2_sensitivity

    def proj(noise):
        return GaussianProjectionRelease(PrivacyLedger(None, 1e-5), dim=8, num_projections=70, steps=100,
                                         sample_rate=0.01, n_private=1000, bound="clt", row_diameter=2.0, noise=noise)

    own = proj(PaperNoise(1.0)).sensitivity
    with pytest.raises(ValueError, match="positive integer"):
        PaperNoise(1.0, stated_dim=0)
    with pytest.raises(ValueError, match="no stated sensitivity dimension"):
        NoisyGradientSum(PrivacyLedger(None, 1e-5), clip_norm=1.0, sample_rate=0.01, expected_batch_size=10.0,
                         noise=PaperNoise(1.0, stated_dim=1024))
    mech = proj(PaperNoise(1.0, stated_dim=1024))
    assert mech.paper_convention and mech.noise_multiplier == pytest.approx(1.0 / mech.sensitivity)
    beta = mech.beta / mech.partners(mech.relation)
    assert mech.sensitivity == pytest.approx(l2_sensitivity(70, 1024, beta, "clt", 2.0)) and mech.sensitivity < own / 5


# -- accounting -------------------------------------------------------------------------------
def test_dpswflow_r_accounting_matches_the_configured_schedule(data, tmp_path):
    ledger = PrivacyLedger(6.0, 1e-4)
    m = DPSWFlowR(**COMMON, dp=ProjectionDP(40, bound="chernoff"), batch_size=64, epochs=2)
    out = loop.train(m, data, ledger, train_context(tmp_path))
    n = len(data.private)
    planned = 2 * math.ceil(n / 64)
    assert out["steps_planned"] == planned == out["train_steps"] == ledger.steps
    assert ledger.entries == ledger.entries[:1]  # one kind of release, merged
    e = ledger.entries[0]
    assert e.sample_rate == pytest.approx(64 / n)
    noise = flow_r_noise(6.0, 1e-4, d=m.space.dim, k=40, sample_rate=64 / n, steps=planned, partners=n + 1)
    assert e.noise_multiplier == pytest.approx(noise.noise_multiplier)
    assert out["noise_std"] == pytest.approx(noise.noise_std)
    assert ledger.delta_reserved == pytest.approx(0.5e-4)
    assert 5.8 <= ledger.epsilon() <= 6.0  # the whole budget, not more


def test_dpswflow_r_stops_before_the_target_epsilon_is_exceeded(data, tmp_path):
    ledger = PrivacyLedger(3.0, 1e-4)
    ledger.record(2.0, 0.05, 100)  # spent elsewhere before this run
    m = DPSWFlowR(**COMMON, dp=ProjectionDP(40, bound="chernoff"), batch_size=64, epochs=3)
    out = loop.train(m, data, ledger, train_context(tmp_path))
    assert out["stopped_by_budget"] and out["train_steps"] < out["steps_planned"]
    assert ledger.epsilon() <= 3.0


def test_one_shot_calibration_and_the_papers_classic_sigma():
    # DPSWflow paper, one-shot release of Alg. 2: the released code's get_sigma (CLT, delta/2, classic formula)
    assert paper_one_shot_sigma(10, 1e-5, 8, 31) == pytest.approx(2.733, abs=2e-3)
    assert paper_one_shot_sigma(5, 1e-5, 8, 31) == pytest.approx(5.466, abs=2e-3)
    assert paper_one_shot_sigma(10, 1e-6, 48, 250) == pytest.approx(2.957, abs=2e-3)
    assert paper_flow_noise_std(0.67, 8, 70, 1e-5) == pytest.approx(5.05, abs=0.01)
    classic = one_shot_noise(10.0, 1e-5, d=8, k=31, bound="clt", calibration="classic")
    assert analytic_gaussian_epsilon(classic.noise_multiplier, classic.delta_conversion) > 10.0  # not valid at eps 10
    for cal in ("rdp", "analytic"):
        n = one_shot_noise(10.0, 1e-5, d=8, k=31, bound="chernoff", calibration=cal)
        assert analytic_gaussian_epsilon(n.noise_multiplier, n.delta_conversion) <= 10.0 + 1e-6
    led = PrivacyLedger(10.0, 1e-5)
    n = one_shot_noise(10.0, 1e-5, d=8, k=31, calibration="rdp")
    led.record(n.noise_multiplier, 1.0, 1, n.delta_sensitivity)
    assert 9.9 <= led.epsilon(accountant="rdp") <= 10.0 and led.epsilon() <= 10.0


@pytest.mark.parametrize("sigma, n, epochs, bugged, correct", [
    (0.67, 30000, 35, 11.52, 10.31), (0.80, 30000, 20, 6.20, 5.09), (0.58, 81385, 30, 11.37, 10.52)])
def test_moments_accountant_reproduces_the_spec_sigma_epsilon_table(sigma, n, epochs, bugged, correct):
    delta = 1e-5 if n < 80000 else 1e-6
    steps, q = int(epochs * n / 250), 250 / n
    assert moments_accountant_epsilon(sigma, q, steps, delta, accumulate_bug=True) == pytest.approx(bugged, abs=0.01)
    assert moments_accountant_epsilon(sigma, q, steps, delta) == pytest.approx(correct, abs=0.01)


# -- resume, sampling -------------------------------------------------------------------------
def test_killed_and_resumed_flow_r_ends_with_the_same_particles_and_ledger(data, tmp_path):
    kw = dict(COMMON, dp=ProjectionDP(40, bound="chernoff"), batch_size=32, epochs=2)
    full_ledger = PrivacyLedger(8.0, 1e-4)
    full = DPSWFlowR(**kw)
    loop.train(full, data, full_ledger, train_context(tmp_path / "a", max_steps=20))
    part_ledger = PrivacyLedger(8.0, 1e-4)
    loop.train(DPSWFlowR(**kw), data, part_ledger, train_context(tmp_path / "b", max_steps=10))
    resumed_ledger = PrivacyLedger(8.0, 1e-4)
    resumed = DPSWFlowR(**kw)
    torch.manual_seed(123)  # the state must come from the checkpoint
    loop.train(resumed, data, resumed_ledger, train_context(tmp_path / "b", max_steps=20,
                                           resume_from=tmp_path / "b" / "checkpoints" / "last.pt"))
    assert resumed_ledger.entries == full_ledger.entries
    assert torch.allclose(resumed.X, full.X, atol=1e-5)


def test_flow_samples_have_the_requested_labels_shape_and_range(data, tmp_path):
    m = DPSWFlowR(**COMMON, dp=ProjectionDP(40, bound="chernoff"), batch_size=32, epochs=1, sample_jitter=0.05)
    loop.train(m, data, PrivacyLedger(10.0, 1e-4), train_context(tmp_path, max_steps=5))
    labels = torch.arange(200) % 10
    x, y = m.sample(200, labels)  # more than the 64 particles: resampled with jitter
    assert x.shape == (200, 1, 8, 8) and torch.equal(y, labels) and 0 <= x.min() and x.max() <= 1
    again = DPSWFlowR(**COMMON, dp=ProjectionDP(40, bound="chernoff"), batch_size=32, epochs=1)
    again.restore(data, tmp_path / "checkpoints" / "last.pt")  # sampling from a run folder, no private data
    assert torch.equal(again.X, m.X)
    assert torch.allclose(again.space.decode(again.X), m.space.decode(m.X))


@pytest.mark.parametrize("cls", [DPSWFlowR, DPSWFlow])
def test_checkpoint_holds_no_private_record_nor_private_latent(data, tmp_path, cls):
    m = cls(**COMMON, dp=ProjectionDP(31, bound="chernoff"), projections_per_step=25, steps=6) if cls is DPSWFlow else \
        cls(**COMMON, dp=ProjectionDP(40, bound="chernoff"), batch_size=32, epochs=1)
    loop.train(m, data, PrivacyLedger(10.0, 1e-4), train_context(tmp_path, max_steps=6))
    ck = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    x, y = data.private._gather(torch.arange(len(data.private)))  # test-only access to the records
    assert_holds_no_record(ck, x.flatten(1), m.space.rows(x, y))


def test_non_private_flow_records_infinite_epsilon(data, tmp_path):
    ledger = PrivacyLedger(None, 1e-4)
    m = DPSWFlow(**COMMON, private=False, dp=ProjectionDP(31, bound="chernoff"), projections_per_step=25, steps=3)
    out = loop.train(m, data, ledger, train_context(tmp_path))
    assert ledger.epsilon() == math.inf and out["noise_std"] == 0.0 and ledger.steps == 1


def test_private_flow_refuses_a_hand_set_noise_std():
    with pytest.raises(PrivacySettingError) as err:  # the run's policy, decided from its settings (the pipeline)
        build_policy(DPSWFlowR(**COMMON, noise_std=0.5).noise_settings())
    assert err.value.setting == "noise_std"  # model.noise_std in the one error line


@pytest.mark.parametrize("preset", [f"{ds}_{m}" for ds in ("mnist", "fmnist", "celeba") for m in
                                    ("dpswflow_r", "dpswflow", "dpswgen")] + ["digits_dpswflow_r", "toy_dpswflow"])
def test_dpswflow_presets_build_their_method_and_autoencoder(preset):
    from hydra.utils import instantiate

    from tests.helpers.configs import compose_cfg

    cfg = compose_cfg([f"experiment={preset}"], out_dir=__import__("pathlib").Path("unused-output"))
    m = instantiate(cfg.model, _convert_="all")
    assert isinstance(m, (DPSWFlowR, DPSWFlow, DPSWGen))
    if m.make_ae is not None:
        shape = (3, 64, 64) if preset.startswith("celeba") else (1, 8, 8) if preset.startswith("digits") else (1, 28, 28)
        ae = m.make_ae(image_shape=shape).eval()
        z = ae.encode(torch.rand(2, *shape))
        assert torch.allclose(z.norm(dim=1), torch.ones(2), atol=1e-5) and ae.decode(z).shape == (2, *shape)


# -- end to end -------------------------------------------------------------------------------
@pytest.mark.slow  # the fast suite runs this preset end to end in tests/e2e/test_presets_e2e.py
def test_digits_dpswflow_r_preset_writes_results(tmp_path):
    from tests.helpers.runs import train

    out = tmp_path / "run"
    r = train(["experiment=digits_dpswflow_r", "logger=local", "trainer.max_steps=15", "trainer.progress=false",
               "model.ae_steps=30", "model.n_particles=200", "evaluator.n_synthetic=500",
               "evaluator.classifiers=[logreg]", "evaluator.fid.enabled=false", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert math.isfinite(res["metrics"]["acc_logreg"]), res["metrics"]  # 15 steps: evaluated, not yet useful
    assert res["privacy"]["private_steps"] == 15 and 0 < res["privacy"]["epsilon"] <= 10.0
    # label_mode=partition (the default): image-only latent rows (d = 8), labels decide the class block
    assert res["train"]["row_dim"] == 8 and res["train"]["guarantee"] == "rigorous"
    assert (out / "samples.png").exists() and (out / "autoencoder_public_reconstructions.png").exists()


def test_the_flow_settings_check_their_own_values_and_name_the_setting():
    from dpgen.methods.dpswflow import FlowSettings, OneShotSettings

    for make, key in [(lambda: FlowSettings(n_particles=1), "model.n_particles"),
                      (lambda: FlowSettings(step_size=0), "model.step_size"),
                      (lambda: OneShotSettings(calibration="classic"), "model.calibration"),
                      (lambda: OneShotSettings(block_slack=0), "model.block_slack"),
                      (lambda: DPSWFlow(**COMMON, dp=ProjectionDP(31, bound="chernoff"), projections_per_step=32),
                       "model.projections_per_step")]:
        with pytest.raises(ValueError, match=key):
            make()
    m = DPSWFlow(**{**COMMON, "num_percentiles": "64"}, dp=ProjectionDP(31, bound="chernoff"),
                 projections_per_step="25", step_size=2)
    assert m.flow == FlowSettings(n_particles=64, step_size=2.0, num_percentiles=64)
    assert m.one_shot_settings == OneShotSettings(projections_per_step=25) and isinstance(m.flow.step_size, float)



def test_the_shared_latent_settings_check_their_own_values_and_name_the_setting():
    from dpgen.methods.latent import AutoencoderSettings, LatentPrivacy, LatentRows, LatentSchedule

    latent = {k: v for k, v in COMMON.items() if k not in ("num_percentiles", "n_particles")}
    for make, key in [(lambda: AutoencoderSettings(batch_size=0), "model.ae_batch_size"),
                      (lambda: AutoencoderSettings(lr=0), "model.ae_lr"),
                      (lambda: LatentSchedule(batch_size=0), "model.batch_size"),
                      (lambda: LatentSchedule(steps=-1), "model.steps"),
                      (lambda: LatentRows(label_mode="onehot"), "model.label_mode"),
                      (lambda: LatentRows(sample_jitter=-0.1), "model.sample_jitter"),
                      (lambda: LatentPrivacy(noise_std=-1.0), "model.noise_std"),
                      (lambda: DPSWGen(generator=LatentMLPGen, **{**latent, "ae_batch_size": 0}), "model.ae_batch_size"),
                      (lambda: DPSWFlowR(**COMMON, batch_size=0), "model.batch_size")]:
        with pytest.raises(ValueError, match=key):
            make()
    # the config keys stay flat; each method holds its groups, with the values converted once
    m = DPSWGen(generator=LatentMLPGen, **{**latent, "ae_steps": "20"}, batch_size="40", epochs=1, sample_jitter=0,
                private=False, noise_std=1)
    assert m.ae_settings == AutoencoderSettings(steps=20, batch_size=32, cache=None)
    assert m.schedule == LatentSchedule(batch_size=40, epochs=1) and m.latent == LatentRows(sample_jitter=0.0)
    assert (m.privacy.private, m.privacy.noise_std, m.privacy.convention) == (False, 1.0, None)
    assert isinstance(m.privacy.noise_std, float) and m.k == m.privacy.dp.num_projections

@pytest.mark.slow  # train.py subprocess; make test-all
def test_toy_dpswflow_preset_runs_and_plots_particles(tmp_path):
    from tests.helpers.runs import train

    out = tmp_path / "toy"
    r = train(["experiment=toy_dpswflow", "logger=local", "trainer.max_steps=20", "trainer.progress=false",
               "model.n_particles=300", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["privacy"]["epsilon_rdp"] == "inf" and res["train"]["noise_std"] == 0.5
    assert (out / "particles.png").stat().st_size > 1000
