"""Empirical privacy audit: Clopper-Pearson, eps lower bounds, and that the audit can fail."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import torch

from dpgen.audit import (
    audit_noisy_sum,
    audit_projection_boundary,
    audit_projection_release,
    audit_sanitizer,
    clopper_pearson,
    epsilon_lower_bound,
    gaussian_delta,
    gaussian_epsilon,
)
from dpgen.audit.bounds import randomized_response_epsilon
from dpgen.audit.releases import noisy_sum_canary
from dpgen.privacy.sensitivity import l2_sensitivity


def test_clopper_pearson_known_values():
    lo, hi = clopper_pearson(0, 10, 0.05)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** 0.1, rel=1e-9)  # 0.3085
    lo, hi = clopper_pearson(10, 10, 0.05)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** 0.1, rel=1e-9)
    lo, hi = clopper_pearson(5, 10, 0.05)  # textbook: (0.1871, 0.8129)
    assert lo == pytest.approx(0.18709, abs=1e-4) and hi == pytest.approx(0.81291, abs=1e-4)
    with pytest.raises(ValueError):
        clopper_pearson(11, 10)


def test_gaussian_curve_matches_balle_wang():
    from autodp import dp_bank

    for mu in (0.3, 1.0, 2.5):
        eps = gaussian_epsilon(mu, 1e-5)
        assert eps == pytest.approx(dp_bank.get_eps_ana_gaussian(1.0 / mu, 1e-5), rel=1e-6)
        assert gaussian_delta(eps, mu) == pytest.approx(1e-5, rel=1e-6)


def test_bound_from_known_counts():
    """Perfect separation of n = 1000 evaluation runs: eps_lower = log((lo - delta) / hi) exactly."""
    s_out, s_in = np.zeros(2000), np.ones(2000)
    b = epsilon_lower_bound(s_out, s_in, delta=1e-5)
    hi = 1 - 0.025 ** (1 / 1000)
    assert b.tp == 1000 and b.fp == 0
    assert b.epsilon_lower == pytest.approx(math.log((1 - hi - 1e-5) / hi), rel=1e-9)


def test_randomized_response_approaches_but_does_not_exceed_epsilon():
    rng = np.random.default_rng(1)
    p = 0.75  # eps = log 3, pure DP
    r = 200_000
    s_out = (rng.random(r) > p).astype(float)   # true bit 0, kept with probability p
    s_in = (rng.random(r) < p).astype(float)    # true bit 1
    b = epsilon_lower_bound(s_out, s_in, delta=0.0)
    eps = randomized_response_epsilon(p)
    assert 0.9 * eps < b.epsilon_lower <= eps


def test_gaussian_sum_honest_below_claim_and_halved_noise_above():
    g = torch.randn(6, 12, generator=torch.Generator().manual_seed(0))
    honest = audit_noisy_sum(g, clip_norm=1.0, noise_multiplier=1.0, delta=1e-5, runs=1_000_000, seed=1)
    assert honest.epsilon_lower <= honest.epsilon_exact <= honest.epsilon_claimed
    assert honest.epsilon_lower > 0.5 * honest.epsilon_claimed  # close to the claim, not vacuous
    halved = audit_noisy_sum(g, clip_norm=1.0, noise_multiplier=1.0, delta=1e-5, runs=1_000_000, seed=2,
                             noise_scale=0.5, configuration="halved noise")
    assert halved.epsilon_lower > halved.epsilon_claimed


def test_replace_one_needs_twice_the_sensitivity():
    g = torch.randn(6, 12, generator=torch.Generator().manual_seed(0))
    kw = dict(clip_norm=1.0, noise_multiplier=2.0, delta=1e-5, relation="replace_one", runs=100_000, seed=3)
    ok = audit_noisy_sum(g, **kw)
    assert ok.epsilon_lower <= ok.epsilon_claimed
    wrong = audit_noisy_sum(g, claimed_sensitivity=1.0, **kw)  # an accountant that assumes C
    assert wrong.epsilon_lower > wrong.epsilon_claimed


def test_sanitizer_honest_and_halved():
    kw = dict(shape=(2, 4), clip_norm=0.5, sigma=1.0, delta=1e-5, runs=1_000_000)
    honest = audit_sanitizer(seed=4, **kw)
    assert 0.5 * honest.epsilon_claimed < honest.epsilon_lower <= honest.epsilon_claimed
    assert audit_sanitizer(seed=5, noise_scale=0.5, **kw).epsilon_lower > honest.epsilon_claimed


def test_composition_over_steps_stays_below_the_composed_claim():
    g = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    r = audit_noisy_sum(g, clip_norm=1.0, noise_multiplier=1.0, delta=1e-5, steps=5, sample_rate=0.5,
                        runs=40_000, seed=6)
    assert 0 < r.epsilon_lower <= r.epsilon_claimed
    one = audit_noisy_sum(g, clip_norm=1.0, noise_multiplier=1.0, delta=1e-5, steps=1, sample_rate=0.5,
                          runs=40_000, seed=6)
    assert r.epsilon_lower > one.epsilon_lower  # the summed LLR sees the composition


def test_projection_release_honest_and_violated_row_bound():
    d, k, delta, beta = 10, 20, 1e-5, 1e-6
    sens = l2_sensitivity(k, d, beta, "chernoff", 1.0)
    rows = torch.randn(3, d, generator=torch.Generator().manual_seed(0))
    noise = 1.0 * sens  # noise multiplier 1
    honest = audit_projection_boundary("DP-SWD", rows, 0.5, k=k, noise_std=noise, sensitivity=sens, delta=delta,
                                       delta_per_step=beta, runs=20_000, seed=7)
    assert honest.epsilon_lower <= honest.epsilon_claimed
    assert honest.extra["fraction_runs_above_bound"] <= 0.001
    # rows that break ||x - x'|| <= 1 (e.g. raw pixels without the normalisation): the audit shows it
    d0, d1 = rows.clone(), rows.clone()
    d0[0], d1[0] = 4 * torch.ones(d) / math.sqrt(d), -4 * torch.ones(d) / math.sqrt(d)  # ||x - x'|| = 8
    broken = audit_projection_release("DP-SWD", d0, d1, k=k, noise_std=noise, sensitivity=sens, delta=delta,
                                      delta_per_step=beta, runs=20_000, seed=8, configuration="rows not normalised")
    assert broken.epsilon_lower > broken.epsilon_claimed


def test_canary_never_leaves_the_audit(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    g = 3.0 + torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    res = audit_noisy_sum(g, clip_norm=1.0, noise_multiplier=1.0, delta=1e-5, runs=2000, seed=9)
    rows = torch.randn(3, 6, generator=torch.Generator().manual_seed(1))
    res2 = audit_projection_boundary("DP-SWD", rows, 0.5, k=4, noise_std=2.0, sensitivity=1.0, delta=1e-5, runs=500)
    from dpgen.audit import audit_class_moments

    z = rows[:, :4].double() / 4.0
    res3 = audit_class_moments(_moment_mechanism(), z, torch.tensor([0, 1, 2]), runs=1000, fidelity_reps=2)
    assert os.listdir(tmp_path) == []  # nothing written
    out = capsys.readouterr()
    assert out.out == "" and out.err == "" and caplog.records == []
    for r in (res, res2, res3):
        json.dumps(r.asdict())  # serialisable: scalars and strings only

        def walk(x):
            if isinstance(x, dict):
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                assert len(x) <= 2 and all(isinstance(v, int) for v in x)  # only shapes
            else:
                assert x is None or isinstance(x, (int, float, str, bool))

        walk(r.asdict())
    canary = noisy_sum_canary(g, 1.0)
    for v in canary.tolist() + rows[0].tolist() + g.flatten().tolist():
        assert f"{v:.6g}" not in json.dumps(res.asdict()) + json.dumps(res2.asdict()) + json.dumps(res3.asdict())


def _projection_mechanism(seed: int = 0):
    from dpgen.privacy.ledger import PrivacyLedger
    from dpgen.privacy.mechanisms import GaussianProjectionRelease
    from dpgen.privacy.noise import Calibrated

    led = PrivacyLedger(10.0, 1e-5, "poisson")
    mech = GaussianProjectionRelease(led, dim=10, num_projections=20, steps=100, sample_rate=0.01, n_private=1000,
                                     bound="chernoff", row_diameter=1.0, seed=seed, noise=Calibrated())
    return mech


def test_mechanism_object_audit_and_fidelity():
    from dpgen.audit import audit_projection_mechanism
    from dpgen.audit.releases import antipodal_rows

    mech = _projection_mechanism()
    rows = torch.randn(3, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    d0, d1 = antipodal_rows(rows, 0, 0.5)
    r = audit_projection_mechanism(mech, d0, d1, name="DP-SWD", runs=20_000, seed=1)
    assert r.extra["fidelity"]["ok"], r.extra["fidelity"]
    assert r.extra["noise_source"] == "mechanism object's noise()"
    assert r.noise_multiplier_claimed == pytest.approx(mech.noise_multiplier)
    assert r.epsilon_lower <= r.epsilon_claimed


def test_fidelity_check_catches_a_release_that_adds_less_noise():
    from dpgen.audit import audit_projection_mechanism
    from dpgen.audit.releases import antipodal_rows

    mech = _projection_mechanism()
    real_noise = mech.noise

    def release(rows, u):  # a buggy release: half the declared noise
        p = rows @ u
        return p + 0.5 * real_noise(p.shape, p)

    mech.release = release
    rows = torch.randn(3, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    d0, d1 = antipodal_rows(rows, 0, 0.5)
    r = audit_projection_mechanism(mech, d0, d1, name="DP-SWD", runs=1000, seed=1)
    assert not r.extra["fidelity"]["ok"]
    assert r.extra["fidelity"]["ratio"] == pytest.approx(0.5, rel=0.1)


def test_sanitiser_mechanism_object():
    from dpgen.audit import audit_sanitiser_mechanism
    from dpgen.privacy.ledger import PrivacyLedger
    from dpgen.privacy.mechanisms import ImageGradientSanitiser
    from dpgen.privacy.noise import FixedStd

    led = PrivacyLedger(10.0, 1e-5, "poisson")
    mech = ImageGradientSanitiser(led, clip_norm=0.5, n_rows=2, sample_rate=0.1, clip="whole", seed=0,
                                  noise=FixedStd(2 * 0.5 * 1.0))  # sigma 1: std 2 C sigma
    honest = audit_sanitiser_mechanism(mech, shape=(2, 4), runs=1_000_000, seed=2)
    assert honest.extra["fidelity"]["ok"]
    assert 0.5 * honest.epsilon_claimed < honest.epsilon_lower <= honest.epsilon_claimed
    halved = audit_sanitiser_mechanism(mech, shape=(2, 4), runs=1_000_000, seed=3, noise_scale=0.5)
    assert halved.epsilon_lower > halved.epsilon_claimed


def _moment_mechanism(epsilon: float = 2.0, seed: int = 0):
    from dpgen.privacy.ledger import PrivacyLedger
    from dpgen.privacy.moments import ClassMomentRelease
    from dpgen.privacy.noise import Calibrated

    led = PrivacyLedger(epsilon, 1e-5, "poisson")
    mech = ClassMomentRelease(led, n_classes=3, radius=1.5, seed=seed, noise=Calibrated())
    return mech


def test_class_moment_release_honest_below_claim_and_halved_noise_above():
    from dpgen.audit import audit_class_moments

    z = torch.randn(12, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = z * (1.5 / z.norm(dim=1, keepdim=True)).clamp(max=1.0)  # codes clipped to the radius, like encode()
    y = torch.arange(12) % 3
    mech = _moment_mechanism()
    honest = audit_class_moments(mech, z, y, canary_class=1, runs=2_000_000, seed=1)
    assert honest.extra["fidelity"]["ok"], honest.extra["fidelity"]
    assert honest.extra["moment_difference_norm"] == pytest.approx(1.0)  # the canary attains Delta = 1
    assert honest.extra["calibrating_accountant"] == "pld" and honest.epsilon_claimed <= 2.0 + 1e-9
    assert honest.epsilon_claimed <= honest.extra["epsilon_rdp"]
    assert 0.5 * honest.epsilon_claimed < honest.epsilon_lower <= honest.epsilon_claimed
    halved = audit_class_moments(_moment_mechanism(), z, y, canary_class=1, runs=2_000_000, seed=2, noise_scale=0.5)
    assert halved.epsilon_lower > halved.epsilon_claimed


def test_noisy_gradient_sum_mechanism_both_relations():
    from dpgen.audit import audit_gradient_sum_mechanism
    from dpgen.privacy.ledger import PrivacyLedger
    from dpgen.privacy.mechanisms import NoisyGradientSum
    from dpgen.privacy.noise import FixedMultiplier

    g = torch.randn(6, 12, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for sampling, relation in (("poisson", "add_remove"), ("without_replacement", "replace_one")):
        mech = NoisyGradientSum(PrivacyLedger(10.0, 1e-5, sampling), clip_norm=0.7, sample_rate=0.1,
                                expected_batch_size=6.0, seed=0, noise=FixedMultiplier(1.0))
        assert mech.relation == relation
        honest = audit_gradient_sum_mechanism(mech, g, runs=1_000_000, seed=1)
        assert honest.extra["fidelity"]["ok"], honest.extra["fidelity"]
        assert honest.relation == relation and honest.noise_multiplier_claimed == pytest.approx(1.0)
        assert 0.5 * honest.epsilon_claimed < honest.epsilon_lower <= honest.epsilon_claimed
        halved = audit_gradient_sum_mechanism(mech, g, runs=1_000_000, seed=2, noise_scale=0.5)
        assert halved.epsilon_lower > halved.epsilon_claimed


@pytest.mark.parametrize("preset", ["digits_moments", "digits_shift_dp_dann", "digits_shift_dpswd"])
def test_script_audits_the_presets_mechanism_objects(preset):
    """dpgen/audit/cli.py builds the run's own mechanism (method.setup) and claims its calibrating accountant's
    epsilon: for one Gaussian release at the preset's target epsilon that claim is the target itself."""
    from dpgen.audit import cli as mod

    rows = mod.audit_preset([f"experiment={preset}"], runs=20_000, seed=0, steps=2, compose_runs=2000)
    assert rows and all(r["extra"]["fidelity"]["ok"] for r in rows)
    for r in rows:
        assert r["epsilon_lower"] <= r["epsilon_claimed"]
        assert r["claimed_by"].startswith(("PLD", "RDP")) and r["extra"]["epsilon_rdp"] >= r["epsilon_claimed"] - 1e-9
    if preset == "digits_moments":
        assert rows[0]["claimed_by"].startswith("PLD") and rows[0]["epsilon_claimed"] == pytest.approx(10.0, abs=0.05)
    elif preset == "digits_shift_dpswd":  # the DP-SWD alignment: its projection release, at the clip's diameter 1
        assert [r["mechanism"] for r in rows] == ["DP-SWD alignment projection release (DA)"]
        assert rows[0]["extra"]["row_difference"] == pytest.approx(1.0)  # the clip's diameter: rows of norm <= 1/2
    else:
        assert {r["relation"] for r in rows} == {"add_remove", "replace_one"}
        assert rows[-1]["sample_rate"] < 1


def test_orthogonal_directions_are_drawn_as_the_mechanism_draws_them():
    """A mechanism with orthonormal directions has sensitivity exactly its row diameter: the audit must draw
    orthonormal blocks too (random unit directions exceed that bound in about half the runs)."""
    from dpgen.audit import audit_projection_mechanism
    from dpgen.audit.releases import antipodal_rows, batched_directions
    from dpgen.privacy.ledger import PrivacyLedger
    from dpgen.privacy.mechanisms import GaussianProjectionRelease
    from dpgen.privacy.noise import FixedMultiplier

    u = batched_directions(3, 6, 9, torch.Generator().manual_seed(0), "orthogonal")
    assert u.shape == (3, 6, 9)
    torch.testing.assert_close(u[:, :, :6].transpose(1, 2) @ u[:, :, :6], torch.eye(6, dtype=torch.float64).expand(3, 6, 6))
    mech = GaussianProjectionRelease(PrivacyLedger(10.0, 1e-5), dim=10, num_projections=10, steps=1, sample_rate=1.0,
                                     n_private=100, directions="orthogonal", seed=0, noise=FixedMultiplier(1.0))
    rows = torch.randn(3, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    d0, d1 = antipodal_rows(rows, 0, 0.5)
    r = audit_projection_mechanism(mech, d0, d1, name="DP-SWD", runs=2000, seed=1)
    assert r.extra["directions"] == "orthogonal" and r.extra["fraction_runs_above_bound"] == 0.0
    assert r.extra["projected_difference_max"] == pytest.approx(1.0) and r.extra["fidelity"]["ok"]


def test_a_warm_started_preset_is_audited_on_the_runs_whole_ledger():
    """Phase 1 (the moment release) is replayed into the audit's ledger and audited; phase 2 is calibrated for
    what it left, as in the run (more noise than a cold start at the same target)."""
    from dpgen.audit import cli as mod

    common = ["experiment=digits_dpswd", "model.dp.directions=orthogonal", "model.dp.num_projections=64"]
    warm = mod.audit_preset([*common, "model/warm_start=class_gaussian"], runs=500, seed=0, steps=2, compose_runs=200)
    cold = mod.audit_preset(common, runs=500, seed=0, steps=2, compose_runs=200)
    one, two = warm
    assert one["mechanism"] == "DP class-Gaussian moment release (warm start, phase 1)"
    assert one["epsilon_claimed"] == pytest.approx(0.5 * 10.0, rel=1e-3)  # the share of the target, alone
    assert one["extra"]["moment_difference_norm"] <= 1.0 + 1e-9  # a canary record through the run's map
    assert two["mechanism"].endswith("(warm start, phase 2)") and two["extra"]["directions"] == "orthogonal"
    assert two["noise_multiplier_claimed"] > cold[0]["noise_multiplier_claimed"]
    assert all(r["extra"]["fidelity"]["ok"] and r["epsilon_lower"] <= r["epsilon_claimed"] for r in warm)


@pytest.mark.parametrize("overrides", [["experiment=toy_dpswflow"], ["experiment=digits_dpswd", "model.private=false",
                                                                        "accountant.epsilon=null"]])
def test_a_non_private_preset_has_nothing_to_audit_in_one_line(overrides):
    from dpgen.audit import cli as mod
    from dpgen.errors import ConfigError

    with pytest.raises(ConfigError, match="model.private=false.*nothing private to audit"):
        mod.audit_preset(overrides, runs=200, seed=0, steps=2, compose_runs=200)


@pytest.mark.parametrize("flag", ["--runs", "--compose-runs", "--blackbox"])
def test_too_few_runs_for_the_bound_is_one_error_line(flag, capsys):
    """`dpgen audit --runs 2` used to end in a traceback from the bound's own check, after composing the preset."""
    from dpgen.cli import main as dpgen_main

    assert dpgen_main(["audit", "experiment=digits_dpswd", flag, "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {flag} 2: the audit's lower bound needs at least 4 runs per side") and "\n" not in err
