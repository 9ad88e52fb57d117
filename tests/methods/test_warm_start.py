"""Warm start from the DP class-Gaussian (dpgen/methods/warm_start.py): two releases in one ledger composed
within the target, a warm-up that reads the release only, resume in either phase, every family end to end."""

from __future__ import annotations

import inspect
from dataclasses import fields
from functools import partial
from pathlib import Path

import pytest
import torch

from dpgen.data.base import PrivateSplit
from dpgen.data.datasets import digits
from dpgen.errors import ConfigError
from dpgen.logging import RunLogger
from dpgen.methods import (
    DPSinkhorn,
    DPSWDGenerator,
    DPSWFlow,
    DPSWFlowR,
    DPSWGen,
    TrainContext,
    loop,
)
from dpgen.methods import warm_start as ws
from dpgen.models import ConvCondGen
from dpgen.models.autoencoder import LatentMLPGen, LiutkusAutoencoder
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.ledger import LedgerEntry
from dpgen.privacy.moments import ClassMomentRelease
from dpgen.privacy.projection import ProjectionDP

WARM = dict(kind="class_gaussian", epsilon_share=0.25, steps=4, batch_size=40, num_projections=16)
AE = partial(LiutkusAutoencoder, latent_dim=4, width=4, pad_to=8)
LATENT = dict(autoencoder=AE, ae_steps=5, ae_batch_size=32, autoencoder_cache=None,
              dp=ProjectionDP(16, bound="bernstein", directions="orthogonal"), batch_size=40, epochs=1)


@pytest.fixture(scope="module")
def data():
    return digits(public_fraction=0.0, seed=0)


@pytest.fixture(scope="module")
def data_public():
    return digits(public_fraction=0.5, seed=0)


def _ctx(tmp_path, **kw) -> TrainContext:
    base = dict(device=torch.device("cpu"), logger=RunLogger(tmp_path), run_dir=tmp_path, log_every=2,
                checkpoint_every=3, progress=False, deterministic=True)
    return TrainContext(**{**base, **kw})


def _dpswd(warm: dict | None = WARM, **kw) -> DPSWDGenerator:
    base = dict(generator=partial(ConvCondGen, d_code=4, hidden=16), dp=ProjectionDP(64, bound="bernstein", directions="orthogonal"),
                batch_size=40, epochs=1, lr=1e-3, label_mode="partition", warm_start=warm)
    return DPSWDGenerator(**{**base, **kw})


def test_the_ledger_holds_the_moment_release_then_the_ot_releases_composed_within_the_target(tmp_path, data):
    ledger = PrivacyLedger(4.0, 1e-4)
    m = _dpswd()
    out = loop.train(m, data, ledger, _ctx(tmp_path, max_steps=6))
    first, second = ledger.entries
    assert (first.mechanism, first.steps, first.sample_rate) == ("class_moments", 1, 1.0)
    assert (second.mechanism, second.steps) == ("gaussian_projection", 6)
    assert first.relation == second.relation == "add_remove"
    alone = PrivacyLedger(4.0, 1e-4)
    alone.entries = [first]
    assert alone.epsilon() == pytest.approx(0.25 * 4.0, rel=2e-3) and alone.epsilon() <= 1.0
    # phase 2 calibrated for what is LEFT: the full planned schedule composed with phase 1 spends the target
    planned = m.steps_planned(len(data.private))
    full = PrivacyLedger(4.0, 1e-4)
    full.entries = [first, LedgerEntry(second.noise_multiplier, second.sample_rate, planned, second.delta_per_step)]
    assert 0.99 * 4.0 <= full.epsilon() <= 4.0
    assert ledger.epsilon() <= 4.0
    cold = PrivacyLedger(4.0, 1e-4)
    cold_m = _dpswd(warm=None)
    loop.train(cold_m, data, cold, _ctx(tmp_path / "cold", max_steps=1))
    assert m.projection.noise_multiplier > cold_m.projection.noise_multiplier  # less budget left, more noise
    assert out["warm_start"]["phase"] == 2 and out["mechanisms_warm_start"]["moments"]["releases"] == 1


def test_each_phase_is_shown_and_recorded_with_its_epsilon_noise_and_mechanism(tmp_path, data, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # each console line on one line
    seen: list[int] = []
    real_fit = ws.fit
    monkeypatch.setattr(ws, "fit", lambda *a, progress=None, **k: real_fit(
        *a, progress=lambda i: (seen.append(i), progress(i)), **k))
    ledger = PrivacyLedger(4.0, 1e-4)
    m = _dpswd()
    loop.train(m, data, ledger, _ctx(tmp_path, max_steps=3))
    one, two = ledger.summary()["by_mechanism"]
    assert (one["mechanism"], one["releases"], two["mechanism"], two["releases"]) == \
        ("class_moments", 1, "gaussian_projection", 3)
    assert one["epsilon"] == pytest.approx(0.25 * 4.0, rel=2e-3) and 0 < two["epsilon"] < ledger.epsilon()
    assert two["noise_multiplier"] == pytest.approx(m.projection.noise_multiplier)
    err = " ".join(capsys.readouterr().err.split())
    assert "warm start, phase 1: one class_moments release" in err and "share 0.25 of ε = 4" in err
    assert f"noise multiplier {one['noise_multiplier']:.4g}" in err
    assert f"phase 2: gaussian_projection noise multiplier {two['noise_multiplier']:.4g}" in err
    assert seen == list(range(WARM["steps"] + 1))  # the fit reports every step (a progress bar while it runs)


def test_the_warm_up_reads_the_release_only(tmp_path, data, monkeypatch):
    """A spy on the one read path of private records fails the run if the warm-up touches them."""
    reads = {"phase1": 0, "ot": 0, "warm_up": False}
    real_gather, real_warm_up = PrivateSplit._gather, ws.WarmStart.warm_up

    def gather(self, idx):
        if reads["warm_up"]:
            raise AssertionError("the warm-up read private records")
        reads["ot" if reads["phase1"] else "phase1"] += 1
        return real_gather(self, idx)

    def warm_up(self, target, seed, **kw):
        reads["warm_up"] = True
        try:
            return real_warm_up(self, target, seed, **kw)
        finally:
            reads["warm_up"] = False

    monkeypatch.setattr(PrivateSplit, "_gather", gather)
    monkeypatch.setattr(ws.WarmStart, "warm_up", warm_up)
    m = _dpswd()
    g0 = [p.detach().clone() for p in m.make_generator(image_shape=(1, 8, 8), n_labels=10).parameters()]
    loop.train(m, data, PrivacyLedger(4.0, 1e-4), _ctx(tmp_path, max_steps=2))
    assert reads["phase1"] == 1 and reads["ot"] == 2  # phase 1 read once, then one batch per OT step
    assert len(g0) == len(list(m.G.parameters()))
    # structurally: the warm-up's inputs are the release (moments + public map) and the method's public target
    assert list(inspect.signature(ws.fit).parameters)[:2] == ["target", "release"]
    assert [f.name for f in fields(ws.ClassGaussianRelease)] == ["moments", "rep", "num_classes"]


@pytest.mark.slow
def test_the_warm_up_fits_the_generator_to_the_released_class_gaussians(tmp_path, data):
    """Post-processing does what it says: class means of the warmed-up generator move toward the release's."""
    m = _dpswd(warm={**WARM, "steps": 60, "epsilon_share": 0.5}, lr=3e-3)
    loop.train(m, data, PrivacyLedger(50.0, 1e-4), _ctx(tmp_path, max_steps=0))
    rel = m.warm_start.release_
    x, y = m.sample(500, torch.arange(500) % 10)
    target = rel.rep.decode(rel.moments.means.float()).flatten(1)  # the released class means, as images
    fitted = torch.stack([x[y == c].flatten(1).mean(0) for c in range(10)])
    cold = _dpswd(warm=None)
    loop.train(cold, data, PrivacyLedger(50.0, 1e-4), _ctx(tmp_path / "cold", max_steps=0))
    xc, yc = cold.sample(500, torch.arange(500) % 10)
    unfitted = torch.stack([xc[yc == c].flatten(1).mean(0) for c in range(10)])
    assert (fitted - target).norm() < 0.8 * (unfitted - target).norm()


def _killed_at(monkeypatch, obj, name, when):
    real, calls = getattr(obj, name), {"n": 0}

    def dying(*a, **k):
        calls["n"] += 1
        if calls["n"] == when:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(obj, name, dying)
    return real


@pytest.mark.parametrize("phase", [1, 2])
def test_a_run_killed_in_either_phase_resumes_without_releasing_the_moments_again(tmp_path, data, monkeypatch,
                                                                                phase):
    torch.manual_seed(0)
    full_ledger, full = PrivacyLedger(4.0, 1e-4), _dpswd()
    loop.train(full, data, full_ledger, _ctx(tmp_path / "a", max_steps=7))

    releases = {"n": 0}
    real_release = ClassMomentRelease.release

    def counted(self, *a, **k):
        releases["n"] += 1
        return real_release(self, *a, **k)

    monkeypatch.setattr(ClassMomentRelease, "release", counted)
    torch.manual_seed(0)
    # phase 1: killed inside the warm-up (after the moment release); phase 2: after the OT checkpoint at step 3
    real = (_killed_at(monkeypatch, ws, "fit", 1) if phase == 1
            else _killed_at(monkeypatch, torch.optim.Adam, "step", WARM["steps"] + 5))
    with pytest.raises(KeyboardInterrupt):
        loop.train(_dpswd(), data, PrivacyLedger(4.0, 1e-4), _ctx(tmp_path / "b", max_steps=7))
    monkeypatch.setattr(ws, "fit", real) if phase == 1 else monkeypatch.setattr(torch.optim.Adam, "step", real)
    ck = torch.load(tmp_path / "b" / "checkpoints" / "last.pt", weights_only=False)
    assert ck["warm_start"]["phase"] == phase and ("method" in ck) == (phase == 2)

    torch.manual_seed(123)  # the state must come from the checkpoint
    ledger, resumed = PrivacyLedger(4.0, 1e-4), _dpswd()
    loop.train(resumed, data, ledger, _ctx(tmp_path / "b", max_steps=7,
                                           resume_from=tmp_path / "b" / "checkpoints" / "last.pt"))
    assert releases["n"] == 1 and ledger.entries == full_ledger.entries
    assert resumed.projection.noise_multiplier == full.projection.noise_multiplier
    for p, q in zip(full.G.parameters(), resumed.G.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5)


def test_resume_with_another_share_is_refused(tmp_path, data):
    loop.train(_dpswd(), data, PrivacyLedger(4.0, 1e-4), _ctx(tmp_path, max_steps=3))
    with pytest.raises(ConfigError, match="warm start had other settings"):
        loop.train(_dpswd(warm={**WARM, "epsilon_share": 0.5}), data, PrivacyLedger(4.0, 1e-4),
                   _ctx(tmp_path, max_steps=3, resume_from=tmp_path / "checkpoints" / "last.pt"))


def _family(name: str):
    if name == "dpsinkhorn":
        class Tiny(torch.nn.Module):
            conditional = True

            def __init__(self, image_shape=(1, 8, 8), n_labels=10, **_):
                super().__init__()
                self.image_shape, self.n_labels = tuple(image_shape), n_labels
                self.lin = torch.nn.Linear(4 + n_labels, 64)

            def latent(self, n, device="cpu", generator=None):
                return torch.randn(n, 4, device=device, generator=generator)

            def forward(self, z, y):
                h = torch.cat([z, torch.nn.functional.one_hot(y, self.n_labels).float()], 1)
                return torch.tanh(self.lin(h)).view(-1, *self.image_shape)

        return DPSinkhorn(Tiny, batch_size=20, steps=4, lr=1e-3, reg=0.5, scaling=0.8, noise_multiplier=None,
                          warm_start=WARM)
    if name == "dpswgen":
        return DPSWGen(generator=LatentMLPGen, **LATENT, warm_start=WARM)
    if name == "dpswflow_r":
        return DPSWFlowR(**LATENT, num_percentiles=32, n_particles=60, warm_start=WARM)
    return _dpswd()


@pytest.mark.parametrize("name", ["dpswd", "dpsinkhorn", "dpswgen", "dpswflow_r"])
def test_every_family_runs_warm_started_end_to_end(tmp_path, data, data_public, name):
    m = _family(name)
    d = data_public if name in ("dpswgen", "dpswflow_r") else data
    ledger = PrivacyLedger(6.0, 1e-4)
    out = loop.train(m, d, ledger, _ctx(tmp_path, max_steps=3))
    assert [e.mechanism for e in ledger.entries][0] == "class_moments" and len(ledger.entries) == 2
    assert ledger.entries[1].steps == out["train_steps"] == 3 and ledger.epsilon() <= 6.0
    x, y = m.sample(20, torch.arange(20) % 10)
    assert x.shape == (20, 1, 8, 8) and torch.isfinite(x).all()
    if name == "dpswflow_r":  # particles placed on latent rows of the release's samples, per class
        assert out["warm_start"]["warm_start_particles"] == 60


def test_a_particle_flow_stopped_after_its_warm_up_states_no_drift(tmp_path, data_public):
    """With no flow step run there is no last drift to report: the summary leaves it out (no "nan")."""
    out = loop.train(_family("dpswflow_r"), data_public, PrivacyLedger(6.0, 1e-4), _ctx(tmp_path, max_steps=0))
    assert out["train_steps"] == 0 and "final_drift_norm" not in out
    moved = loop.train(_family("dpswflow_r"), data_public, PrivacyLedger(6.0, 1e-4), _ctx(tmp_path / "b", max_steps=2))
    assert moved["final_drift_norm"] > 0


def test_dpswflow_one_shot_and_bad_shares_are_refused_before_any_data():
    with pytest.raises(ConfigError, match="replace-one"):
        DPSWFlow(**LATENT, warm_start=WARM)
    for share in (0.0, 1.0, 1.5):
        with pytest.raises(ConfigError, match="epsilon_share"):
            _dpswd(warm={**WARM, "epsilon_share": share})
    with pytest.raises(ConfigError, match="kind"):
        _dpswd(warm={**WARM, "kind": "pca"})


def test_a_method_without_a_warm_start_is_refused_by_the_config_check():
    from dpgen.config import validate
    from tests.helpers.configs import compose_cfg

    out = Path("unused-output")
    validate(compose_cfg(["experiment=mnist_dpswd_partition", "model/warm_start=class_gaussian"], out_dir=out))
    for exp in ("mnist_moments", "mnist_dpswflow"):
        prefix = "+" if exp == "mnist_moments" else ""
        with pytest.raises(ConfigError, match="model/warm_start is for"):
            validate(compose_cfg([f"experiment={exp}", f"{prefix}model/warm_start=class_gaussian"], out_dir=out))
