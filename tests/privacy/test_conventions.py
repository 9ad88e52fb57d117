"""privacy.convention=paper: never a default, never labelled rigorous, ε under the TRUE sensitivity."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from dpgen.config import validate
from dpgen.errors import ConfigError
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.conventions import (
    METHODS,
    PaperConvention,
    RawPixelRows,
    batch_max_scale,
    batch_scaling_diameter,
    convention_of,
    raw_pixel_diameter,
    true_epsilon,
)
from dpgen.privacy.guarantee import PAPER_CONVENTION, RIGOROUS
from dpgen.privacy.mechanisms import GaussianProjectionRelease
from dpgen.privacy.noise import FixedStd, PaperNoise
from dpgen.privacy.projection import ProjectionDP
from tests.helpers.configs import CONFIGS, compose_cfg
from tests.helpers.runs import FAST, train_here

PRESETS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
PAPER_PRESETS = [p for p in PRESETS if p.endswith("_paper")]


# ------------------------------------------------------------------ the true-epsilon function
def test_raw_pixel_diameter_is_28_on_mnist_and_batch_scaling_diameter_is_sqrt_b():
    assert raw_pixel_diameter(784, (0.0, 1.0)) == pytest.approx(28.0)
    assert raw_pixel_diameter(784, (-1.0, 1.0)) == pytest.approx(56.0)
    assert batch_scaling_diameter(128) == pytest.approx(math.sqrt(128))


def test_true_epsilon_equals_the_ledger_at_the_stated_sensitivity_and_grows_with_the_diameter():
    q, steps, delta = 100 / 60000, 600, 1e-5
    led = PrivacyLedger(None, delta, "poisson")
    led.record(1.2, q, steps)
    same = true_epsilon(3.0, 2.5, sample_rate=q, steps=steps, delta=delta, sampling="poisson")
    assert same["noise_multiplier_true"] == pytest.approx(1.2)
    assert same["epsilon_true"] == pytest.approx(led.epsilon())
    assert same["epsilon_true_rdp"] == pytest.approx(led.epsilon(accountant="rdp"))
    worse = true_epsilon(3.0, 2.5 * 28, sample_rate=q, steps=steps, delta=delta, sampling="poisson")
    assert worse["noise_multiplier_true"] == pytest.approx(1.2 / 28)
    assert worse["epsilon_true"] > 10 * same["epsilon_true"]
    assert same["epsilon_true_accountant"] == "pld"
    assert worse["epsilon_true_accountant"] == "rdp" and worse["epsilon_true_pld"] is None  # multiplier 0.04
    assert true_epsilon(3.0, math.inf, sample_rate=q, steps=steps, delta=delta, sampling="poisson")[
        "epsilon_true"] == math.inf


def test_true_epsilon_reserves_the_sensitivity_failure_probability():
    kw = dict(sample_rate=0.01, steps=100, delta=1e-5, sampling="poisson")
    assert true_epsilon(1.0, 1.0, delta_per_step=1e-8, **kw)["epsilon_true"] > true_epsilon(1.0, 1.0, **kw)[
        "epsilon_true"]
    assert true_epsilon(1.0, 1.0, delta_per_step=1e-7, **kw)["epsilon_true"] == math.inf  # 100 * 1e-7 >= delta


def test_row_maps_of_the_conventions():
    x = torch.rand(5, 1, 28, 28)
    assert torch.equal(RawPixelRows(784)(x), x.flatten(1))
    f = torch.rand(6, 320)
    rows, m = batch_max_scale(f)
    assert m == f.norm(dim=1).max() and rows.norm(dim=1).max() == pytest.approx(0.5)


def test_paper_convention_rejects_a_missing_noise():
    with pytest.raises(ValueError, match="sigma"):
        PaperConvention(0.0, 10.0)
    with pytest.raises(ValueError, match="epsilon"):
        PaperConvention(1.0, 0.0)
    with pytest.raises(ValueError, match="sensitivity dimension"):
        PaperConvention(1.0, 10.0, 0)


# ------------------------------------------------------------------ label
def test_a_convention_release_is_never_labelled_rigorous():
    led = PrivacyLedger(None, 1e-5, "poisson")
    mech = GaussianProjectionRelease(led, dim=784, num_projections=100, steps=10, sample_rate=0.01, n_private=1000,
                                     bound="bernstein", noise=FixedStd(3.0))
    assert mech.guarantee == RIGOROUS  # a fixed std is accounted against the rows' true sensitivity
    mech = GaussianProjectionRelease(led, dim=784, num_projections=100, steps=10, sample_rate=0.01, n_private=1000,
                                     bound="bernstein", noise=PaperNoise(3.0))
    assert mech.noise_std == pytest.approx(3.0) and mech.guarantee == PAPER_CONVENTION
    mech.release(torch.zeros(5, 784), mech.draw_directions())
    assert led.guarantee == PAPER_CONVENTION and led.summary()["guarantee"] == PAPER_CONVENTION


# ------------------------------------------------------------------ never a default
@pytest.mark.parametrize("preset", PRESETS)
def test_only_paper_presets_compose_with_a_convention(preset):
    cfg = compose_cfg([f"experiment={preset}"], out_dir=Path("unused-output"))
    validate(cfg)
    if not preset.endswith("_paper"):
        assert cfg.privacy.convention == "honest", f"{preset}: a paper convention must never be a default"
        assert cfg.privacy.paper_sigma is None and cfg.privacy.paper_epsilon is None
        assert cfg.privacy.paper_sensitivity_dim is None
    elif "dpswgen" in preset:  # the released latent trainer's bound at C·W² = 1024 and 64-d generator input
        assert cfg.privacy.paper_sensitivity_dim == 1024 and cfg.model.d_code == 64
    elif cfg.privacy.convention == "paper":
        assert convention_of(cfg.model._target_) in METHODS and cfg.accountant.epsilon is None


def test_the_default_config_is_honest():
    cfg = compose_cfg([], out_dir=Path("unused-output"))
    assert cfg.privacy.convention == "honest"


def test_the_paper_presets_exist():
    assert set(PAPER_PRESETS) >= {"mnist_usps_dpswd_paper", "usps_mnist_dpswd_paper", "mnist_dpswd_paper",
                                  "mnist_dpswd_clt_paper", "mnist_dpswflow_r_paper", "mnist_dpswflow_paper",
                                  "mnist_dpswgen_paper", "mnist_dpsinkhorn_paper", "fmnist_dpsinkhorn_paper"}


@pytest.mark.parametrize("overrides,match", [
    (["experiment=mnist_dpsinkhorn", "privacy.convention=paper", "privacy.paper_sigma=1.1",
      "privacy.paper_epsilon=10", "accountant.epsilon=null"], "privacy.convention=paper: DP-Sinkhorn"),
    (["experiment=digits_moments", "privacy.convention=paper", "privacy.paper_sigma=1",
      "privacy.paper_epsilon=10", "accountant.epsilon=null"], "privacy.convention=paper is defined for"),
    (["experiment=mnist_usps_dann", "privacy.convention=paper", "privacy.paper_sigma=1",
      "privacy.paper_epsilon=10", "accountant.epsilon=null"], "privacy.convention=paper is defined for|dpswd"),
    (["experiment=mnist_dpswd", "privacy.convention=papers"], "privacy.convention='papers'"),
    (["experiment=mnist_dpswd", "privacy.paper_sigma=2.94"], "privacy.paper_sigma is used only"),
    (["experiment=mnist_dpswd_paper", "accountant.epsilon=10"], "accountant.epsilon=null"),
    (["experiment=mnist_dpswd_paper", "privacy.paper_sigma=null"], "privacy.paper_sigma"),
    (["experiment=mnist_dpswd_paper", "model.private=false"], "model.private=false"),
    (["experiment=mnist_dpswgen", "privacy.paper_sensitivity_dim=1024"], "privacy.paper_sensitivity_dim is used only"),
    (["experiment=mnist_dpswflow_r_paper", "privacy.paper_sensitivity_dim=1024"], "only the released DPSWgen"),
    (["experiment=mnist_dpswgen_paper", "privacy.paper_sensitivity_dim=0"], "positive integer"),
    (["experiment=mnist_dpswgen_paper", "privacy.paper_sensitivity_dim=1.5"], "positive integer"),
])
def test_bad_convention_settings_fail_naming_the_setting(overrides, match):
    cfg = compose_cfg(overrides, out_dir=Path("unused-output"))
    with pytest.raises(ConfigError, match=match):
        validate(cfg)


# ------------------------------------------------------------------ end to end (shrunk)
def test_convention_run_reports_label_and_true_epsilon_end_to_end(tmp_path):
    """digits_dpswd with the DP-SWD generator convention (raw 8x8 pixel rows, fixed sigma), 20 steps."""
    out = tmp_path / "run"
    r = train_here(["experiment=digits_dpswd", "logger=local", "model.dp.bound=bernstein", "privacy.convention=paper",
               "privacy.paper_sigma=2.0", "privacy.paper_epsilon=10", "accountant.epsilon=null", *FAST,
               f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    p = res["privacy"]
    assert p["guarantee"] == PAPER_CONVENTION and p["convention"] == "paper" and p["private_steps"] == 20
    assert res["train"]["noise_std"] == pytest.approx(2.0)
    assert p["sensitivity_stated"] == pytest.approx(res["train"]["sensitivity"])
    # digits: 64 pixels in [0, 1] -> row diameter 8: multiplier / 8, a much larger epsilon
    assert p["noise_multiplier_true"] == pytest.approx(res["train"]["noise_multiplier"] / 8.0)
    assert p["epsilon_true"] > 5 * p["epsilon"] > 0
    assert res["train"]["guarantee"] == PAPER_CONVENTION
    out_text = " ".join(r.stdout.split())  # the printed table wraps long cells
    assert "paper convention — not (ε," in out_text and "epsilon under the data's true" in out_text


def test_da_batch_max_convention_scales_by_the_private_max_and_reports_infinite_epsilon():
    from dpgen.methods.domain_adaptation import (
        AlignmentContext,
        DomainAdaptation,
        DPSWDAlignment,
        SWDAlignment,
    )

    g = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Sigmoid())
    g.out_dim, g.feature_bound = 6, math.sqrt(6)
    led = PrivacyLedger(None, 1e-5, "poisson")
    al = DPSWDAlignment(weight=1.0, dp=ProjectionDP(20, bound="bernstein"))
    DomainAdaptation(feature_extractor=None, classifier=None, alignment=al, epochs=2, start_align=0, lr=5e-4,
                     private=True, convention={"sigma": 0.5, "epsilon": 10.0})
    assert al.convention == PaperConvention(0.5, 10.0)
    al.setup(AlignmentContext(g, 1000, 0.008, 50, 8, led, torch.device("cpu"), seed=0))
    assert al.mechanism.noise_std == pytest.approx(0.5) and al.mechanism.guarantee == PAPER_CONVENTION
    x_s, x_t = torch.randn(8, 4), torch.randn(8, 4)
    out = al(g, x_s, g(x_s), x_t)
    assert out.loss.requires_grad and math.isfinite(float(out.loss.detach()))
    rep = al.convention_report()
    assert rep["epsilon_true"] == math.inf and rep["sensitivity_true"] == math.inf
    assert rep["epsilon_worst_case_rows"] > led.epsilon() > 0  # all B rows moving: far more than one row
    with pytest.raises(ValueError, match="dpswd alignment"):
        DomainAdaptation(feature_extractor=None, classifier=None, alignment=SWDAlignment(), private=False, lr=5e-4,
                         convention={"sigma": 0.5, "epsilon": 10.0})
