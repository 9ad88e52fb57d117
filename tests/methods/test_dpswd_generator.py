"""The DP-SWD generator: sensitivity enforcement, calibrated noise, ledger, budget stop, resume."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from dpgen.data.datasets import digits, toy_gaussians
from dpgen.methods import DPSWDGenerator, NonFiniteLossError, loop
from dpgen.models import ConvCondGen, DCGANDecoder, DCGANFeatureMap
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.projection import ProjectionDP
from dpgen.privacy.rows import RowMap, fixed_size
from tests.helpers.context import assert_holds_no_record, train_context


def _method(**kw) -> DPSWDGenerator:
    base = dict(generator=partial(ConvCondGen, d_code=4, hidden=32), dp=ProjectionDP(50, bound="bernstein"), batch_size=32, epochs=2,
                lr=1e-3, label_mode="concat")
    base.update(kw)
    return DPSWDGenerator(**base)


@pytest.mark.parametrize("label_mode", ["concat", "none"])
def test_private_rows_have_norm_at_most_half_so_neighbours_differ_by_at_most_one(label_mode):
    rm = RowMap(64, 10, (0.0, 1.0), None, None, label_mode, 2.0)
    x = torch.rand(500, 1, 8, 8) * 3 - 1  # even out-of-range pixels are clipped
    y = torch.randint(10, (500,))
    r = rm(x, y)
    assert r.shape[1] == rm.out_dim
    assert (r.norm(dim=1) <= 0.5 + 1e-6).all()
    assert torch.cdist(r, r).max() <= 1.0 + 1e-6


def test_in_range_images_are_not_clipped_by_the_default_radius():
    rm = RowMap(64, 10, (0.0, 1.0), None, None, "none", 1.0)
    x = torch.rand(100, 1, 8, 8)
    assert torch.allclose(rm(x, None), (x.flatten(1) - 0.5) / (2 * rm.radius))


def test_fixed_size_release_pads_and_truncates():
    rows = torch.randn(7, 3)
    assert fixed_size(rows, 10).shape == (10, 3) and torch.equal(fixed_size(rows, 10)[7:], torch.zeros(3, 3))
    sub = fixed_size(rows, 4, torch.Generator().manual_seed(0))
    assert sub.shape == (4, 3) and all(any(torch.equal(s, r) for r in rows) for s in sub)


def test_noise_added_to_private_projections_equals_calibrated_noise(tmp_path, release_spy):
    private_noise = release_spy()
    m = _method(dp=ProjectionDP(200, bound="bernstein"))
    loop.train(m, digits(), PrivacyLedger(10.0, 1e-4), train_context(tmp_path, max_steps=25))
    assert len(private_noise) == 25
    assert all(c.noise_std == m.projection.noise_std for c in private_noise)
    noise = torch.cat([c.noise for c in private_noise])
    assert noise.std().item() == pytest.approx(m.projection.noise_std, rel=0.03)


def test_every_private_step_is_recorded_and_epsilon_stays_below_target(tmp_path):
    data = digits()
    ledger = PrivacyLedger(4.0, 1e-4)
    m = _method()
    out = loop.train(m, data, ledger, train_context(tmp_path))
    planned = m.steps_planned(len(data.private))
    assert out["train_steps"] == planned == ledger.steps
    assert ledger.epsilon() <= 4.0
    assert ledger.delta_reserved == pytest.approx(0.5e-4)
    assert ledger.entries[0].noise_multiplier == pytest.approx(m.projection.noise_multiplier)
    assert ledger.entries[0].sample_rate == pytest.approx(32 / len(data.private))


def test_training_stops_before_target_epsilon_would_be_exceeded(tmp_path):
    data = digits()
    ledger = PrivacyLedger(3.0, 1e-4)
    ledger.record(2.0, 0.05, 100)  # eps 1.3 already spent elsewhere before this run
    m = _method(epochs=5)
    out = loop.train(m, data, ledger, train_context(tmp_path, log_every=10**6))  # no log line: an epsilon each
    assert out["stopped_by_budget"] and out["train_steps"] < m.steps_planned(len(data.private))
    assert ledger.epsilon() <= 3.0


def test_killed_and_resumed_run_ends_with_same_ledger_and_weights(tmp_path, monkeypatch):
    data = digits()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    torch.manual_seed(0)
    full_ledger = PrivacyLedger(5.0, 1e-4)
    full = _method()
    loop.train(full, data, full_ledger, train_context(a_dir, max_steps=30))

    torch.manual_seed(0)
    ledger1 = PrivacyLedger(5.0, 1e-4)
    calls = {"n": 0}
    real_step = torch.optim.Adam.step

    def dying_step(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 13:  # killed mid-way, after the checkpoint at step 10
            raise KeyboardInterrupt
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.Adam, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        loop.train(_method(), data, ledger1, train_context(b_dir, max_steps=30))
    monkeypatch.setattr(torch.optim.Adam, "step", real_step)

    torch.manual_seed(123)  # the RNG state must come from the checkpoint, not from here
    ledger2 = PrivacyLedger(5.0, 1e-4)
    resumed = _method()
    loop.train(resumed, data, ledger2, train_context(b_dir, max_steps=30, resume_from=b_dir / "checkpoints" / "last.pt"))
    assert ledger2.entries == full_ledger.entries
    assert ledger2.epsilon() == pytest.approx(full_ledger.epsilon())
    for p, q in zip(full.G.parameters(), resumed.G.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_checkpoint_holds_no_private_record(tmp_path):
    data = digits()
    m = _method()
    loop.train(m, data, PrivacyLedger(5.0, 1e-4), train_context(tmp_path, max_steps=10))
    ck = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    private_x, _ = data.private._gather(torch.arange(len(data.private)))
    assert_holds_no_record(ck, private_x.flatten(1))


def test_nan_loss_raises_a_clear_error(tmp_path, monkeypatch):
    import dpgen.methods.dpswd_generator as mod

    monkeypatch.setattr(mod, "sliced_cost_blocks",
                        lambda *a, **k: torch.tensor(float("nan"), requires_grad=True))
    with pytest.raises(NonFiniteLossError, match="NaN"):
        loop.train(_method(), digits(), PrivacyLedger(5.0, 1e-4), train_context(tmp_path, max_steps=3))


def test_non_private_run_records_infinite_epsilon(tmp_path):
    ledger = PrivacyLedger(None, 1e-4)
    m = _method(private=False)
    loop.train(m, digits(), ledger, train_context(tmp_path, max_steps=5))
    assert ledger.epsilon() == math.inf and m.projection.noise_std == 0.0


def test_generator_samples_have_requested_labels_and_range(tmp_path):
    m = _method()
    loop.train(m, digits(), PrivacyLedger(5.0, 1e-4), train_context(tmp_path, max_steps=3))
    y = torch.tensor([0, 1, 2, 9])
    x, yy = m.sample(4, y)
    assert x.shape == (4, 1, 8, 8) and torch.equal(yy, y) and x.min() >= 0 and x.max() <= 1


def test_toy_mlp_generator_trains_on_vector_data(tmp_path):
    from dpgen.models import MLPGen

    data = toy_gaussians(n_train=400, n_test=100)
    m = _method(generator=partial(MLPGen, d_code=5, hidden=16), center=0.0, radius=8.0)
    out = loop.train(m, data, PrivacyLedger(5.0, 1e-3), train_context(tmp_path, max_steps=5))
    assert math.isfinite(out["train_loss"])


def test_feature_space_variant_needs_public_data_and_trains_feature_map_on_it(tmp_path):
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit

    x = torch.rand(80, 3, 32, 32)
    y = torch.randint(2, (80,))
    mk = lambda pub: DataSplits("fake", PrivateSplit(x[:60], y[:60]), TensorSplit(x[60:], y[60:]), pub, 2,  # noqa: E731
                                (3, 32, 32))
    built, seen = [], []  # (feature map, its initial parameters); the batches its real/fake loss saw

    class SpiedFeatureMap(DCGANFeatureMap):
        def logits(self, batch):
            seen.append(batch.detach().clone())
            return super().logits(batch)

    def feature_map(**kw):
        f = SpiedFeatureMap(width=8, **kw)
        built.append((f, [q.detach().clone() for q in f.parameters()]))
        return f

    kw = dict(generator=partial(DCGANDecoder, d_code=8, width=8), feature_map=feature_map,
              label_mode="none", dp=ProjectionDP(20, bound="bernstein"), batch_size=16, epochs=1)
    with pytest.raises(ValueError, match="public_fraction"):
        loop.train(DPSWDGenerator(**kw), mk(None), PrivacyLedger(5.0, 1e-3), train_context(tmp_path))
    m = DPSWDGenerator(**kw)
    public = x[60:70]
    loop.train(m, mk(TensorSplit(public, y[60:70])), PrivacyLedger(5.0, 1e-3), train_context(tmp_path, max_steps=3))
    (fmap, initial), = built
    assert m.fmap is fmap and any(not torch.equal(q, q0) for q, q0 in zip(fmap.parameters(), initial, strict=True))
    # one real/fake step per training step; its real half (min(batch, 10) = 10 rows) is public images only
    assert len(seen) == 3 and all(b.shape[0] == 20 for b in seen)
    assert all(any(torch.equal(r, p) for p in public) for b in seen for r in b[:10])
    assert m.sample(4)[0].shape == (4, 3, 32, 32)


def test_poisson_release_bounds_sensitivity_for_every_possible_partner(tmp_path):
    from dpgen.privacy import l2_sensitivity

    data = digits()
    n = len(data.private)
    m = _method(dp=ProjectionDP(50, bound="chernoff"))
    loop.train(m, data, PrivacyLedger(5.0, 1e-4, "poisson"), train_context(tmp_path, max_steps=1))
    steps = m.steps_planned(n)
    beta = 0.5 * 1e-4 / steps
    assert m.projection.sensitivity == pytest.approx(l2_sensitivity(50, 74, beta / (n + 1), "chernoff"))
    m_wor = _method(dp=ProjectionDP(50, bound="chernoff"))
    loop.train(m_wor, data, PrivacyLedger(5.0, 1e-4, "without_replacement"), train_context(tmp_path / "wor", max_steps=1))
    assert m_wor.projection.sensitivity == pytest.approx(l2_sensitivity(50, 74, beta, "chernoff"))


def test_private_runs_draw_secret_randomness_unless_deterministic(tmp_path):
    data = digits()
    runs = []
    for i in range(2):
        torch.manual_seed(0)
        m = _method()
        loop.train(m, data, PrivacyLedger(5.0, 1e-4), train_context(tmp_path / str(i), max_steps=3, deterministic=False))
        runs.append(torch.cat([p.detach().flatten() for p in m.G.parameters()]))
    assert not torch.allclose(runs[0], runs[1])


def test_resume_refuses_a_checkpoint_written_with_other_settings(tmp_path):
    data = digits()
    loop.train(_method(), data, PrivacyLedger(5.0, 1e-4), train_context(tmp_path, max_steps=5))
    with pytest.raises(ValueError, match="batch_size"):
        loop.train(_method(batch_size=16), data, PrivacyLedger(5.0, 1e-4),
                                   train_context(tmp_path, max_steps=10, resume_from=tmp_path / "checkpoints" / "last.pt"))


def test_label_concat_needs_a_conditional_generator(tmp_path):
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit

    x, y = torch.rand(40, 3, 32, 32), torch.randint(2, (40,))
    data = DataSplits("fake", PrivateSplit(x, y), TensorSplit(x, y), None, 2, (3, 32, 32))
    m = DPSWDGenerator(generator=partial(DCGANDecoder, d_code=8, width=8), label_mode="concat", batch_size=8)
    with pytest.raises(ValueError, match="label_mode=none"):
        loop.train(m, data, PrivacyLedger(5.0, 1e-3), train_context(tmp_path))


def test_release_artifact_holds_generator_weights_only(tmp_path):
    loop.train(_method(), digits(), PrivacyLedger(5.0, 1e-4), train_context(tmp_path, max_steps=2))
    art = torch.load(tmp_path / "generator.pt", weights_only=False)
    assert set(art) == {"generator", "signature"}
