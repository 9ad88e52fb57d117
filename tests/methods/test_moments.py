"""Class-moment releases, representations and the DP class-Gaussian method."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from dpgen.data.datasets import digits
from dpgen.data.representations import build_representation, dct_basis, zigzag_order
from dpgen.methods import loop
from dpgen.methods.dp_class_gaussian import DPClassGaussian
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.moments import (
    ClassBlockProjectionRelease,
    ClassMomentRelease,
    block_projection_sensitivity,
    class_moment_vector,
    moment_sensitivity,
    moment_weights,
    moments_from_vector,
    orthogonal_matrix,
    spiked_shrinkage,
)
from dpgen.privacy.noise import Calibrated, FixedMultiplier, NotPrivate
from tests.helpers.context import train_context


def _codes(n, k, r, g, c=3):
    z = torch.randn(n, k, generator=g, dtype=torch.float64)
    z = z / z.norm(dim=1, keepdim=True) * r * torch.rand(n, 1, generator=g, dtype=torch.float64)
    return z, torch.randint(c, (n,), generator=g)


# -- sensitivity: exact neighbouring-pair checks ----------------------------------------------------
@pytest.mark.parametrize("shares", [(1 / 3, 1 / 3, 1 / 3), (0.05, 0.25, 0.7)])
def test_moment_vector_add_remove_sensitivity_is_exactly_one(shares):
    g = torch.Generator().manual_seed(0)
    r, k, c = 2.5, 6, 3
    w = moment_weights(r, shares)
    z, y = _codes(40, k, r, g, c)
    worst = 0.0
    for t in range(200):
        x = torch.randn(1, k, generator=g, dtype=torch.float64)
        x = x / x.norm() * r * (1.0 if t % 2 == 0 else float(torch.rand(1, generator=g)))
        yx = torch.randint(c, (1,), generator=g)
        diff = class_moment_vector(torch.cat([z, x]), torch.cat([y, yx]), c, w) - class_moment_vector(z, y, c, w)
        nx = float(x.norm())
        tot = sum(shares)
        expect = math.sqrt(shares[0] / tot + shares[1] / tot * nx**2 / r**2 + shares[2] / tot * nx**4 / r**4)
        assert float(diff.norm()) == pytest.approx(expect, rel=1e-9)
        worst = max(worst, float(diff.norm()))
    assert worst == pytest.approx(moment_sensitivity(shares, "add_remove"), rel=1e-9)  # tight at ||x|| = r


def test_moment_vector_replace_one_sensitivity_bound_holds_and_is_reached():
    g = torch.Generator().manual_seed(1)
    r, k, c = 1.0, 5, 3
    w = moment_weights(r)
    z, y = _codes(30, k, r, g, c)
    bound = moment_sensitivity(relation="replace_one")
    assert bound == pytest.approx(math.sqrt(2.0))
    worst = 0.0
    for _ in range(300):
        i = int(torch.randint(30, (1,), generator=g))
        x = torch.randn(k, generator=g, dtype=torch.float64)
        x = x / x.norm() * r
        z2, y2 = z.clone(), y.clone()
        z2[i], y2[i] = x, torch.randint(c, (1,), generator=g)
        d = float((class_moment_vector(z2, y2, c, w) - class_moment_vector(z, y, c, w)).norm())
        assert d <= bound * (1 + 1e-9)
        worst = max(worst, d)
    assert worst > 0.9 * bound


def test_block_projection_release_padded_neighbours_within_sensitivity():
    """Add one record to a class whose block is padded: same U and noise -> outputs differ by <= Delta."""
    g = torch.Generator().manual_seed(2)
    r, k, c, m = 1.5, 4, 3, 20
    z, y = _codes(30, k, r, g, c)  # ~10 per class < m: every block padded
    led = PrivacyLedger(10.0, 1e-5)
    x = torch.randn(1, k, generator=g, dtype=torch.float64)
    x = x / x.norm() * r
    outs = []
    for zz, yy in ((z, y), (torch.cat([z, x]), torch.cat([y, torch.tensor([1])]))):
        mech = ClassBlockProjectionRelease(led, n_classes=c, radius=r, block_size=m, seed=5, noise=NotPrivate())
        b, counts = mech.blocks(zz, yy)
        us = torch.stack([orthogonal_matrix(k, torch.Generator().manual_seed(9)) for _ in range(c)])
        outs.append(torch.cat([(mech.count_weight * counts)[:, None], (b @ us).flatten(1)], 1))
    d = float((outs[1] - outs[0]).norm())
    assert d == pytest.approx(math.sqrt(r**2 + r**2), rel=1e-9)  # count weight r, one padding row -> x
    assert d <= block_projection_sensitivity(r, r, "add_remove")


def test_orthogonal_projection_preserves_norms_exactly():
    u = orthogonal_matrix(7, torch.Generator().manual_seed(3))
    assert torch.allclose(u.T @ u, torch.eye(7, dtype=u.dtype), atol=1e-12)
    v = torch.randn(50, 7, dtype=torch.float64)
    assert torch.allclose((v @ u).norm(dim=1), v.norm(dim=1), rtol=1e-12)


# -- post-processing ---------------------------------------------------------------------------------
def test_noiseless_release_recovers_empirical_moments():
    g = torch.Generator().manual_seed(4)
    r, k, c = 1.0, 4, 3
    z, y = _codes(300, k, r, g, c)
    led = PrivacyLedger(None, 1e-5)
    out = ClassMomentRelease(led, n_classes=c, radius=r, noise=NotPrivate()).release(z, y, eig_floor=0.0)
    proj = ClassBlockProjectionRelease(led, n_classes=c, radius=r, block_size=300, noise=NotPrivate()).release(
        z, y, eig_floor=0.0)
    assert led.epsilon(accountant="rdp") == math.inf  # non-private releases are recorded as such
    for cc in range(c):
        zc = z[y == cc]
        mu, cov = zc.mean(0), torch.cov(zc.T, correction=0)
        for o in (out, proj):
            assert torch.allclose(o.means[cc], mu, atol=1e-10)
            assert torch.allclose(o.covariances[cc], cov, atol=1e-10)
            assert float(o.counts[cc]) == pytest.approx(zc.shape[0])


def test_projection_moment_mode_debiases_the_known_noise_variance():
    """Large sample, large noise: the debiased covariance is close to the truth (bias sigma^2 I removed)."""
    g = torch.Generator().manual_seed(5)
    k, n = 3, 40000
    cov = torch.tensor([[0.04, 0.01, 0.0], [0.01, 0.02, 0.0], [0.0, 0.0, 0.01]], dtype=torch.float64)
    z = torch.randn(n, k, generator=g, dtype=torch.float64) @ torch.linalg.cholesky(cov).T
    z = z.clamp(-0.5, 0.5)
    y = torch.zeros(n, dtype=torch.long)
    led = PrivacyLedger(10.0, 1e-5)
    # replace-one (N public): Delta = sqrt 2 sqrt(1 + 4)
    mech = ClassBlockProjectionRelease(led, n_classes=1, radius=1.0, block_size=n, seed=1,
                                       noise=FixedMultiplier(0.1 / math.sqrt(2.0)))
    est = mech.release(z, y, eig_floor=0.0)
    emp = torch.cov(z.T, correction=0)
    # noise std 0.1 * sqrt(1 + 4) = 0.22 per coordinate: variance 0.05 would dominate without debiasing
    assert torch.allclose(est.covariances[0], emp, atol=6e-3)
    assert mech.noise_std == pytest.approx(0.1 * math.sqrt(5.0))
    assert not torch.allclose(emp + mech.noise_std**2 * torch.eye(k, dtype=emp.dtype), emp, atol=6e-3)


def test_spiked_shrinkage_inverts_the_bbp_map_and_drops_the_bulk():
    s, k = torch.tensor([0.1]), 50
    theta = 2.0
    lam = theta + s**2 * k / theta
    out = spiked_shrinkage(torch.tensor([[0.5 * float(2 * s * math.sqrt(k)), float(lam)]]), s, k)
    assert float(out[0, 0]) == 0.0
    assert float(out[0, 1]) == pytest.approx(theta, rel=1e-6)


def test_moments_from_vector_returns_psd_covariances():
    v = torch.randn(2, 1 + 3 + 9, dtype=torch.float64)
    v[:, 0] = 10.0
    out = moments_from_vector(v, 3, (1.0, 1.0, 1.0), 1e-6, noise_std=0.5)
    assert float(torch.linalg.eigvalsh(out.covariances).min()) >= 1e-6 * (1 - 1e-6)


# -- the mechanism object: ledger and guards ---------------------------------------------------------
def test_class_moment_release_records_one_gaussian_and_stays_within_budget():
    led = PrivacyLedger(10.0, 1e-4)
    mech = ClassMomentRelease(led, n_classes=3, radius=1.0, seed=0, noise=Calibrated())
    assert mech.relation == "add_remove" and mech.sensitivity == 1.0
    z, y = _codes(50, 4, 1.0, torch.Generator().manual_seed(6))
    mech.release(z, y)
    assert led.steps == 1 and led.entries[0].sample_rate == 1.0 and led.entries[0].relation == "add_remove"
    assert led.entries[0].noise_multiplier == pytest.approx(mech.noise_multiplier)
    assert led.epsilon() <= 10.0  # the calibrating accountant (the guarantee)
    with pytest.raises(RuntimeError, match="single release"):
        mech.release(z, y)


def test_release_refuses_unclipped_rows():
    led = PrivacyLedger(10.0, 1e-4)
    z = torch.ones(5, 4, dtype=torch.float64)  # norm 2 > radius 1
    with pytest.raises(ValueError, match="clipped"):
        ClassMomentRelease(led, n_classes=2, radius=1.0, noise=NotPrivate()).release(z, torch.zeros(5, dtype=torch.long))
    assert led.steps == 0


# -- representations ---------------------------------------------------------------------------------
def test_dct_basis_is_orthonormal_and_lowest_frequency_first():
    v = dct_basis((1, 8, 8), 64)
    assert torch.allclose(torch.from_numpy(v.T @ v), torch.eye(64, dtype=torch.float64), atol=1e-10)
    assert zigzag_order(3, 3)[:3] == [(0, 0), (0, 1), (1, 0)]
    assert abs(v[:, 0] - v[0, 0]).max() < 1e-12  # DC component is constant


def test_representation_full_dct_roundtrip_and_never_clips_in_range():
    x = torch.rand(20, 1, 8, 8)
    rep = build_representation("dct", (1, 8, 8), (0.0, 1.0), center=0.5)
    assert rep.radius == pytest.approx(4.0)
    z = rep.encode(x)
    assert float(z.norm(dim=1).max()) <= rep.radius
    assert torch.allclose(rep.decode(z), x, atol=1e-5)


def test_pca_needs_public_split_and_radius_quantile_uses_it():
    with pytest.raises(ValueError, match="PUBLIC"):
        build_representation("pca", (1, 8, 8), (0.0, 1.0), n_components=4)
    pub = torch.rand(100, 1, 8, 8)
    rep = build_representation("pca", (1, 8, 8), (0.0, 1.0), n_components=4, radius_quantile=0.5, public_x=pub)
    norms = ((pub.flatten(1).double() - rep.center) @ rep.basis).norm(dim=1)
    assert rep.radius == pytest.approx(float(norms.median()), rel=0.05)


# -- the method --------------------------------------------------------------------------------------
def test_dp_class_gaussian_on_digits_is_useful_at_eps_10(tmp_path: Path):
    from dpgen.eval.downstream import downstream_accuracy

    data = digits()
    led = PrivacyLedger(10.0, 1e-4, "poisson")
    m = DPClassGaussian(representation={"kind": "dct", "center": 0.5})
    info = loop.train(m, data, led, train_context(tmp_path))
    assert info["sensitivity"] == 1.0 and info["relation"] == "add_remove" and info["train_steps"] == 1
    assert led.epsilon() <= 10.0  # the calibrating accountant (the guarantee)
    x, y = m.sample(2000)
    assert x.shape == (2000, 1, 8, 8) and float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    acc = downstream_accuracy(x, y, data.test.x, data.test.y, classifiers=("logreg",))["acc_logreg"]
    assert acc > 0.6


def test_default_train_run_is_the_private_class_gaussian_and_is_useful(tmp_path: Path):
    """`python train.py` with no experiment: the default demo (digits_moments), eps <= 10, one release."""
    import json

    from tests.helpers.runs import train_here

    out = tmp_path / "run"
    r = train_here(["logger=local", "evaluator.fid.enabled=false", "evaluator.class_grids=false",
               "evaluator.classifiers=[logreg]", "evaluator.n_synthetic=2000", "trainer.progress=false",
               f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["experiment"] == "digits_moments"
    p = res["privacy"]
    assert p["private_steps"] == 1 and 0 < p["epsilon"] <= 10.0 and p["epsilon_rdp"] > 0
    assert res["metrics"]["acc_logreg"] > 0.6
    assert (out / "samples.png").stat().st_size > 500 and (out / "generator.pt").exists()
    assert res["train"]["mechanisms"]["moments"]["kind"] == "class_moments"
