"""The private sampler draws batches exactly as the accountant assumes."""

from __future__ import annotations

import pickle

import pytest
import torch
from scipy import stats

from dpgen.data import PrivateSplit
from dpgen.privacy import PrivateSampler


def _source(n: int = 500) -> PrivateSplit:
    return PrivateSplit(torch.arange(n, dtype=torch.float32)[:, None], torch.zeros(n, dtype=torch.long))


def test_poisson_batch_sizes_follow_binomial_distribution():
    n, b, draws = 500, 25, 4000
    s = PrivateSampler(_source(n), b, "poisson", seed=3)
    sizes = torch.tensor([len(s.sample_indices()) for _ in range(draws)]).numpy()
    q = b / n
    assert sizes.mean() == pytest.approx(n * q, rel=0.02)
    assert sizes.var() == pytest.approx(n * q * (1 - q), rel=0.1)
    # goodness of fit against Binomial(n, q) on the central bins
    lo, hi = 12, 38
    obs = [((sizes == k).sum()) for k in range(lo, hi)] + [((sizes < lo) | (sizes >= hi)).sum()]
    pmf = [stats.binom.pmf(k, n, q) for k in range(lo, hi)]
    exp = [p * draws for p in pmf] + [(1 - sum(pmf)) * draws]
    assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_poisson_inclusion_is_uniform_over_records():
    n, b, draws = 200, 20, 3000
    s = PrivateSampler(_source(n), b, "poisson", seed=4)
    counts = torch.zeros(n)
    for _ in range(draws):
        counts[s.sample_indices()] += 1
    freq = counts / draws
    assert freq.mean().item() == pytest.approx(b / n, rel=0.02)
    assert stats.chisquare(counts.numpy()).pvalue > 1e-3


def test_without_replacement_batches_are_fixed_size_and_distinct():
    s = PrivateSampler(_source(100), 10, "without_replacement", seed=0)
    counts = torch.zeros(100)
    for _ in range(2000):
        idx = s.sample_indices()
        assert len(idx) == 10 and len(set(idx.tolist())) == 10
        counts[idx] += 1
    assert stats.chisquare(counts.numpy()).pvalue > 1e-3


def test_sampler_state_round_trip_reproduces_batches():
    a = PrivateSampler(_source(), 30, "poisson", seed=7)
    for _ in range(5):
        a.sample_indices()
    state = a.state_dict()
    expected = [a.sample_indices() for _ in range(3)]
    b = PrivateSampler(_source(), 30, "poisson", seed=999)
    b.load_state_dict(state)
    for e in expected:
        assert torch.equal(b.sample_indices(), e)


def test_sample_rate_is_batch_over_n():
    assert PrivateSampler(_source(400), 20, "poisson").sample_rate == pytest.approx(0.05)
    with pytest.raises(ValueError, match="batch_size"):
        PrivateSampler(_source(10), 11, "poisson")


def test_private_split_exposes_no_records():
    p = _source(10)
    assert not hasattr(p, "__getitem__") and not hasattr(p, "__iter__")
    assert "n=10" in repr(p)
    with pytest.raises(TypeError):
        pickle.dumps(p)
