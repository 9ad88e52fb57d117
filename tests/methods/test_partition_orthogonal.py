"""Class-partitioned projection releases and orthonormal directions."""

from __future__ import annotations

import math

import pytest
import torch

from dpgen.methods import loop
from dpgen.ot.sliced import (
    orthogonal_directions,
    sliced_wasserstein_blocks,
    sliced_wasserstein_projected,
)
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.guarantee import RIGOROUS
from dpgen.privacy.mechanisms import GaussianProjectionRelease
from dpgen.privacy.noise import Calibrated
from dpgen.privacy.projection import ProjectionDP
from dpgen.privacy.rows import class_blocks, clip_rows
from tests.helpers.context import train_context


@pytest.mark.parametrize("d,k", [(8, 8), (8, 5), (8, 20), (3, 9)])
def test_orthogonal_directions_bound_is_exact_and_deterministic(d, k):
    u = orthogonal_directions(d, k, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert u.shape == (d, k)
    assert torch.allclose(u.norm(dim=0), torch.ones(k, dtype=u.dtype), atol=1e-12)
    v = torch.randn(500, d, dtype=torch.float64)
    ratio = (v @ u).norm(dim=1) ** 2 / v.norm(dim=1) ** 2
    blocks = math.ceil(k / d)
    assert float(ratio.max()) <= blocks * (1 + 1e-12)
    if k % d == 0:  # full blocks: equality for every v
        assert torch.allclose(ratio, torch.full_like(ratio, float(blocks)), rtol=1e-10)


def test_orthogonal_release_has_exact_sensitivity_no_beta_and_is_rigorous_even_with_clt():
    led = PrivacyLedger(10.0, 1e-5, "poisson")
    m = GaussianProjectionRelease(led, dim=10, num_projections=25, steps=100, sample_rate=0.01, n_private=1000,
                                  bound="clt", directions="orthogonal", seed=0, noise=Calibrated())
    assert m.beta == 0.0 and m.guarantee == RIGOROUS
    assert m.sensitivity_under("add_remove") == pytest.approx(math.sqrt(3.0))
    assert m.sensitivity_under("replace_one") == pytest.approx(math.sqrt(3.0))
    rnd = GaussianProjectionRelease(led, dim=10, num_projections=25, steps=100, sample_rate=0.01, n_private=1000,
                                    bound="chernoff", seed=0, noise=Calibrated())
    assert rnd.beta > 0 and rnd.sensitivity > 0
    u = m.draw_directions()
    out = m.release(torch.zeros(4, 10), u)
    assert out.shape == (4, 25) and led.entries[-1].delta_per_step == 0.0
    assert led.delta_reserved == 0.0


def test_orthogonal_release_neighbouring_pair_check():
    """Monte Carlo over U: ||(X - X') U||_F <= sensitivity for rows of norm <= 1/2 differing in one row."""
    led = PrivacyLedger(10.0, 1e-5, "poisson")
    m = GaussianProjectionRelease(led, dim=6, num_projections=14, steps=10, sample_rate=0.1, n_private=100,
                                  directions="orthogonal", noise=Calibrated())
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for _ in range(300):
        x = clip_rows(torch.randn(5, 6, generator=g, dtype=torch.float64), 0.5)
        x2 = x.clone()
        x2[2] = -x[2] / x[2].norm() * 0.5  # antipodal: difference of norm up to 1
        x[2] = x[2] / x[2].norm() * 0.5
        u = m.draw_directions().double()
        worst = max(worst, float(((x - x2) @ u).norm()))
    assert worst <= m.sensitivity * (1 + 1e-9)
    assert worst > 0.7 * m.sensitivity  # the bound is not vacuous


def test_class_blocks_add_one_record_changes_one_row_of_one_block():
    g = torch.Generator().manual_seed(2)
    rows = clip_rows(torch.randn(12, 4, generator=g), 0.5)
    y = torch.tensor([0, 0, 1, 1, 1, 2, 0, 1, 2, 2, 0, 1])
    m = 6  # every class has < 6 rows: padded
    a = class_blocks(rows, y, 3, m)
    x = clip_rows(torch.randn(1, 4, generator=g), 0.5)
    b = class_blocks(torch.cat([rows, x]), torch.cat([y, torch.tensor([2])]), 3, m)
    assert a.shape == b.shape == (3 * m, 4)
    diff = (a - b).norm(dim=1)
    assert int((diff > 0).sum()) == 1 and float(diff.max()) == pytest.approx(float(x.norm()))
    assert int((diff > 0).nonzero()[0]) // m == 2  # in the block of the added record's class
    # cut: a class with more than m rows keeps exactly m of its own rows
    c = class_blocks(rows, torch.zeros(12, dtype=torch.long), 3, m)
    assert c.shape == (3 * m, 4) and float(c[m:].abs().sum()) == 0.0
    kept = {tuple(r.tolist()) for r in c[:m]}
    assert kept <= {tuple(r.tolist()) for r in rows}


def test_sliced_wasserstein_blocks_is_the_mean_of_per_block_sw2():
    g = torch.Generator().manual_seed(3)
    ps, pt = torch.randn(15, 7, generator=g), torch.randn(15, 7, generator=g)
    per = torch.stack([sliced_wasserstein_projected(ps[i:i + 5], pt[i:i + 5]) ** 2 for i in (0, 5, 10)])
    assert float(sliced_wasserstein_blocks(ps, pt, 3)) == pytest.approx(float(per.mean().sqrt()), rel=1e-6)
    assert float(sliced_wasserstein_blocks(ps, pt, 1)) == pytest.approx(float(sliced_wasserstein_projected(ps, pt)),
                                                                        rel=1e-6)
    with pytest.raises(ValueError, match="C = 4"):
        sliced_wasserstein_blocks(ps, pt, 4)


def test_one_shot_release_accepts_orthogonal_directions():
    from dpgen.privacy.mechanisms import OneShotProjectionRelease

    led = PrivacyLedger(10.0, 1e-5, "poisson")
    m = OneShotProjectionRelease(led, dim=8, num_projections=31, directions="orthogonal", noise=Calibrated())
    assert m.relation == "replace_one" and m.beta == 0.0
    assert m.sensitivity == pytest.approx(2.0 * math.sqrt(4.0))  # unit latents (diameter 2), ceil(31/8) = 4 blocks
    u = m.draw_directions()
    assert u.shape == (8, 31) and torch.allclose(u.norm(dim=0), torch.ones(31), atol=1e-5)


def _dpswd(tmp_path, **kw):
    from functools import partial

    from dpgen.methods import DPSWDGenerator
    from dpgen.models import ConvCondGen

    kw.setdefault("dp", ProjectionDP(64, bound="bernstein"))
    kw.setdefault("label_mode", "concat")
    m = DPSWDGenerator(generator=partial(ConvCondGen, d_code=4, hidden=32), batch_size=30, epochs=2, lr=1e-3, **kw)
    return m, train_context(tmp_path, max_steps=6)


def test_dpswd_partition_releases_class_blocks_with_exact_orthogonal_calibration(tmp_path, release_spy):
    from dpgen.data.datasets import digits

    released = release_spy()
    m, ctx = _dpswd(tmp_path, label_mode="partition", dp=ProjectionDP(64, bound="bernstein", directions="orthogonal"))
    ledger = PrivacyLedger(10.0, 1e-4, "poisson")
    out = loop.train(m, digits(), ledger, ctx)
    assert out["released_rows"] == 30 and out["directions"] == "orthogonal"
    assert m.projection.sensitivity == pytest.approx(1.0) and m.projection.beta == 0.0  # k = D = 64: one block
    assert ledger.delta_reserved == 0.0 and ledger.epsilon() <= 10.0
    assert len(released) == 6 and all(r.rows.shape == (30, 64) for r in released)
    assert all(float(r.rows.norm(dim=1).max()) <= 0.5 + 1e-6 for r in released)


def test_dpswd_partition_needs_the_add_remove_relation(tmp_path):
    from dpgen.data.datasets import digits

    m, ctx = _dpswd(tmp_path, label_mode="partition")
    with pytest.raises(ValueError, match="sampling=poisson"):
        loop.train(m, digits(), PrivacyLedger(10.0, 1e-4, "without_replacement"), ctx)


def test_dpswflow_r_partition_moves_each_class_toward_its_own_block(tmp_path, release_spy, monkeypatch):
    from functools import partial

    from dpgen.data.datasets import digits
    from dpgen.methods.dpswflow import DPSWFlow, DPSWFlowR
    from dpgen.models.autoencoder import LiutkusAutoencoder

    released = release_spy()
    common = dict(autoencoder=partial(LiutkusAutoencoder, latent_dim=4, width=4, pad_to=8), ae_steps=20,
                  ae_batch_size=32, autoencoder_cache=None, num_percentiles=64, n_particles=60)
    m = DPSWFlowR(**common, batch_size=40, epochs=1, label_mode="partition",
                  dp=ProjectionDP(8, bound="chernoff", directions="orthogonal"))
    moves = []  # the target quantiles (C, k, M) of every particle update (all classes at once)
    real_move = m._move_classes

    def move(u, tq, sigma):
        moves.append(tq.clone())
        return real_move(u, tq, sigma)

    monkeypatch.setattr(m, "_move_classes", move)
    ledger = PrivacyLedger(10.0, 1e-4, "poisson")
    loop.train(m, digits(public_fraction=0.5), ledger, train_context(tmp_path, max_steps=3))
    assert len(released) == 3 and all(r.rows.shape == (40, 4) for r in released)  # 10 blocks of ceil(40/10) = 4 rows
    # each step moves the particles of class c (i = c mod 10) toward block c: its released projections (the
    # transport map reads their quantiles where it needs them)
    assert len(moves) == 3 and m.target_sample
    for tq, release in zip(moves, released, strict=True):
        for c in range(10):
            block = release.out[4 * c:4 * (c + 1)].transpose(0, 1).contiguous()
            torch.testing.assert_close(tq[c], block)
    # all classes at once = class by class (particles i = c mod 10 only), without the public smoothing noise
    x0, u, tq = m.X.clone(), torch.linalg.qr(torch.randn(4, 4))[0][:, :3], moves[-1][:, :3]
    real_move(u, tq, 0.0)
    batched, m.X = m.X, x0.clone()
    for c in range(10):
        m._move(u, tq[c], 0.0, 0, torch.arange(c, 60, 10))
    torch.testing.assert_close(batched, m.X)
    assert m.projection.sensitivity == pytest.approx(2.0 * math.sqrt(2.0)) and ledger.delta_reserved == 0.0
    x, y = m.sample(30)
    assert x.shape[0] == 30 and torch.equal(y, torch.arange(30) % 10)
    assert DPSWFlow(**common).latent.label_mode == "partition"  # the default of every projection method


def test_dpswflow_r_partition_needs_the_add_remove_relation(tmp_path):
    from dpgen.data.datasets import digits
    from dpgen.methods.dpswflow import DPSWFlowR

    m = DPSWFlowR(**_latent_common(), batch_size=40, epochs=1, dp=ProjectionDP(8, bound="chernoff"))
    with pytest.raises(ValueError, match="sampling=poisson"):
        loop.train(m, digits(public_fraction=0.5), PrivacyLedger(10.0, 1e-4, "without_replacement"), train_context(tmp_path, max_steps=3))


# -- DPSWflow (one-shot) and DPSWgen, class-partitioned --------------------------------------
def _latent_common():
    from functools import partial

    from dpgen.models.autoencoder import LiutkusAutoencoder

    return dict(autoencoder=partial(LiutkusAutoencoder, latent_dim=4, width=4, pad_to=8), ae_steps=20,
                ae_batch_size=32, autoencoder_cache=None)


@pytest.mark.parametrize("k,d", [(8, 4), (31, 8), (5, 8)])
def test_one_shot_class_blocks_sensitivity_is_sqrt2_times_one_row(k, d):
    from dpgen.privacy.mechanisms import OneShotProjectionRelease
    from dpgen.privacy.sensitivity import l2_sensitivity

    led = PrivacyLedger(10.0, 1e-5, "poisson")
    n = 500
    orth = OneShotProjectionRelease(led, dim=d, num_projections=k, directions="orthogonal", class_blocks=True,
                                    n_private=n, noise=Calibrated())
    assert orth.relation == "replace_one" and orth.beta == 0.0
    assert orth.sensitivity == pytest.approx(math.sqrt(2.0) * 2.0 * math.sqrt(math.ceil(k / d)))
    assert orth.sensitivity_under("add_remove") == pytest.approx(2.0 * math.sqrt(math.ceil(k / d)))
    rnd = OneShotProjectionRelease(led, dim=d, num_projections=k, bound="chernoff", class_blocks=True, n_private=n,
                                   noise=Calibrated())
    plain = OneShotProjectionRelease(led, dim=d, num_projections=k, bound="chernoff", noise=Calibrated())
    assert rnd.partners("replace_one") == 2 * (n + 1) and plain.partners("replace_one") == 1
    assert rnd.sensitivity == pytest.approx(
        math.sqrt(2.0) * l2_sensitivity(k, d, rnd.beta / (2 * (n + 1)), "chernoff", 2.0))
    assert rnd.sensitivity > math.sqrt(2.0) * plain.sensitivity  # the union bound over partners costs too
    with pytest.raises(ValueError, match="n_private"):
        OneShotProjectionRelease(led, dim=d, num_projections=k, class_blocks=True, noise=Calibrated())


def _multiset_changes(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    """Norms of the row changes between two blocks seen as multisets (paired by the assignment minimising
    the squared Frobenius distance): the release is invariant to the order inside a block (the sampler
    permutes the records uniformly)."""
    from scipy.optimize import linear_sum_assignment

    cost = torch.cdist(a.double(), b.double())
    r, c = linear_sum_assignment((cost ** 2).numpy())
    return [float(cost[i, j]) for i, j in zip(r, c, strict=True) if float(cost[i, j]) > 1e-9]


@pytest.mark.parametrize("same_class", [False, True])
def test_one_shot_class_blocks_replace_one_exact_pair(same_class):
    """Exact neighbouring pairs (padded blocks): replacing one record changes <= 2 rows of <= 2 blocks,
    each by <= 2 (unit rows), so ||(X - X') U||_F <= sensitivity for every orthonormal U."""
    from dpgen.privacy.mechanisms import OneShotProjectionRelease

    g = torch.Generator().manual_seed(5)
    n, d, c_n = 40, 4, 3
    rows = torch.nn.functional.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    y = torch.arange(n) % c_n
    m = math.ceil(1.2 * n / c_n)  # padded: every class has < m rows
    rows2, y2 = rows.clone(), y.clone()
    rows2[7] = -rows[7]  # antipodal: the row moves by exactly 2
    y2[7] = y[7] if same_class else (y[7] + 1) % c_n
    a, b = class_blocks(rows, y, c_n, m), class_blocks(rows2, y2, c_n, m)
    changes = [ch for blk in range(c_n) for ch in _multiset_changes(a[blk * m:(blk + 1) * m], b[blk * m:(blk + 1) * m])]
    assert 1 <= len(changes) <= 2 and max(changes) <= 2.0 + 1e-9
    assert sum(ch ** 2 for ch in changes) <= (1 if same_class else 2) * 4.0 + 1e-9  # <= rows_changed * 2^2
    mech = OneShotProjectionRelease(PrivacyLedger(10.0, 1e-5, "poisson"), dim=d, num_projections=10,
                                    directions="orthogonal", class_blocks=True, n_private=n, noise=Calibrated())
    # aligned worst case: the changed rows of both blocks in the same positions
    diff = torch.zeros(2, d, dtype=torch.float64)
    diff[0] = rows[7] - rows2[7] if same_class else rows[7]  # row -> padding zero (or -> x')
    diff[1] = 0.0 if same_class else rows2[7]                # padding zero -> x'
    worst = 0.0
    for _ in range(200):
        u = mech.draw_directions().double()
        worst = max(worst, float((diff @ u).norm()))
    assert worst <= mech.sensitivity * (1 + 1e-9)
    # cut blocks: the kept rows are a subset of the class's own rows, and any two rows differ by <= 2
    cut = class_blocks(rows, torch.zeros(n, dtype=torch.long), c_n, m)
    assert {tuple(r.tolist()) for r in cut[:m]} <= {tuple(r.tolist()) for r in rows}
    two = torch.stack([rows[0] - rows2[7], rows2[7] + rows[0]])  # two rows each moved by <= 2
    assert float(two.norm(dim=1).max()) <= 2.0 + 1e-9
    assert max(float((two @ mech.draw_directions().double()).norm()) for _ in range(200)) <= mech.sensitivity + 1e-9


def test_one_shot_class_blocks_monte_carlo_random_directions():
    """Random directions (Chernoff): the sqrt(2)-scaled bound holds for two rows each of norm 2."""
    from dpgen.privacy.mechanisms import OneShotProjectionRelease

    mech = OneShotProjectionRelease(PrivacyLedger(10.0, 1e-5, "poisson"), dim=6, num_projections=20,
                                    bound="chernoff", class_blocks=True, n_private=100, noise=Calibrated())
    g = torch.Generator().manual_seed(7)
    v = 2.0 * torch.nn.functional.normalize(torch.randn(2, 6, generator=g), dim=1)
    norms = torch.tensor([float((v @ mech.draw_directions()).norm()) for _ in range(2000)])
    assert float(norms.max()) <= mech.sensitivity
    assert float(norms.mean()) > 0.3 * mech.sensitivity  # not vacuous


@pytest.mark.parametrize("sampling", ["poisson", "without_replacement"])
def test_dpswflow_partition_one_release_of_class_blocks(tmp_path, release_spy, sampling):
    from dpgen.data.datasets import digits
    from dpgen.methods.dpswflow import DPSWFlow
    from dpgen.privacy.mechanisms import OneShotProjectionRelease

    released = release_spy(OneShotProjectionRelease)
    m = DPSWFlow(**_latent_common(), num_percentiles=64, n_particles=60, dp=ProjectionDP(8, bound="chernoff", directions="orthogonal"), projections_per_step=6,
                 steps=4)
    ledger = PrivacyLedger(10.0, 1e-4, sampling)  # one-shot: replace-one whatever the sampler
    data = digits(public_fraction=0.5)
    loop.train(m, data, ledger, train_context(tmp_path, max_steps=4))
    n = len(data.private)
    mb = math.ceil(n / 10)
    assert len(released) == 1 and released[0].rows.shape == (10 * mb, 4)  # C blocks of ceil(N/C) rows, once
    assert float(released[0].rows.norm(dim=1).max()) <= 1.0 + 1e-5
    assert m.one_shot.relation == "replace_one" and m.one_shot.class_blocks
    assert m.one_shot.sensitivity == pytest.approx(math.sqrt(2.0) * 2.0 * math.sqrt(2.0))  # ceil(8/4) = 2 blocks
    assert m.tq_all.shape == (10, 8, 64) and ledger.epsilon() <= 10.0
    x, y = m.sample(30)
    assert x.shape[0] == 30 and torch.equal(y, torch.arange(30) % 10)


def test_dpswflow_concat_keeps_the_one_row_one_shot(tmp_path, release_spy):
    from dpgen.data.datasets import digits
    from dpgen.methods.dpswflow import DPSWFlow
    from dpgen.privacy.mechanisms import OneShotProjectionRelease

    released = release_spy(OneShotProjectionRelease)
    m = DPSWFlow(**_latent_common(), num_percentiles=64, n_particles=60, dp=ProjectionDP(14, bound="chernoff", directions="orthogonal"), projections_per_step=6,
                 steps=2, label_mode="concat")
    data = digits(public_fraction=0.5)
    loop.train(m, data, PrivacyLedger(10.0, 1e-4, "poisson"), train_context(tmp_path, max_steps=2))
    assert released[0].rows.shape == (len(data.private), 14) and not m.one_shot.class_blocks
    assert m.one_shot.sensitivity == pytest.approx(2.0)  # ceil(14/14) = 1 block, one row


def test_dpswgen_partition_releases_class_blocks_and_needs_poisson(tmp_path, release_spy):
    from functools import partial

    from dpgen.data.datasets import digits
    from dpgen.methods.dpswgen import DPSWGen
    from dpgen.models.autoencoder import LatentMLPGen

    released = release_spy()
    gen = partial(LatentMLPGen, hidden=(16, 16, 16))
    m = DPSWGen(generator=gen, **_latent_common(), batch_size=40, epochs=1, dp=ProjectionDP(8, bound="chernoff", directions="orthogonal"))
    assert m.latent.label_mode == "partition"
    ledger = PrivacyLedger(10.0, 1e-4, "poisson")
    loop.train(m, digits(public_fraction=0.5), ledger, train_context(tmp_path, max_steps=3))
    assert len(released) == 3 and all(r.rows.shape == (40, 4) for r in released)  # 10 blocks of 4 unit latents
    assert m.projection.sensitivity == pytest.approx(2.0 * math.sqrt(2.0)) and ledger.delta_reserved == 0.0
    assert m.G.d_code == 4 + 10  # noise || onehot(label)
    x, y = m.sample(25)
    assert x.shape[0] == 25 and torch.equal(y, torch.arange(25) % 10)
    m2 = DPSWGen(generator=gen, **_latent_common(), batch_size=40, epochs=1, dp=ProjectionDP(8, bound="chernoff"))
    with pytest.raises(ValueError, match="sampling=poisson"):
        loop.train(m2, digits(public_fraction=0.5), PrivacyLedger(10.0, 1e-4, "without_replacement"), train_context(tmp_path / "b", max_steps=3))


def test_dpswflow_in_a_fixed_dct_representation_needs_no_public_data(tmp_path, release_spy):
    """Rows = clip_r(DCT codes) / r (norm <= 1) with no public split at all."""
    from dpgen.data.datasets import digits
    from dpgen.methods.dpswflow import DPSWFlow
    from dpgen.privacy.mechanisms import OneShotProjectionRelease

    released = release_spy(OneShotProjectionRelease)
    m = DPSWFlow(representation={"kind": "dct", "n_components": 16, "center": 0.5}, num_percentiles=64,
                 n_particles=60, dp=ProjectionDP(16, bound="chernoff", directions="orthogonal"), projections_per_step=12, steps=3)
    data = digits()
    assert data.public is None
    loop.train(m, data, PrivacyLedger(10.0, 1e-4, "poisson"), train_context(tmp_path, max_steps=3))
    assert m.space.d == 16 and released[0].rows.shape == (10 * math.ceil(len(data.private) / 10), 16)
    assert float(released[0].rows.norm(dim=1).max()) <= 1.0 + 1e-5
    assert m.one_shot.sensitivity == pytest.approx(2.0 * math.sqrt(2.0))
    x, y = m.sample(20)
    assert x.shape == (20, *data.image_shape) and float(x.min()) >= data.value_range[0]
    with pytest.raises(ValueError, match="replaces the autoencoder"):
        DPSWFlow(representation={"kind": "dct"}, **_latent_common())
