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
    with pytest.raises(ValueError, match="batch size 11 is larger"):
        PrivateSampler(_source(10), 11, "poisson")


def test_private_split_exposes_no_records():
    p = _source(10)
    assert not hasattr(p, "__getitem__") and not hasattr(p, "__iter__")
    assert "n=10" in repr(p)
    with pytest.raises(TypeError):
        pickle.dumps(p)


# -- fixed-size and class-block batches formed on the device (no host sync) -------------------------------
def _law(draw, reps: int) -> dict:
    """Counts of each released tuple (record ids, 0 = a padding row) over ``reps`` draws."""
    from collections import Counter

    return Counter(tuple(draw()) for _ in range(reps))


def _same_law_p(a: dict, b: dict) -> float:
    """p-value of the chi-square test that two samples of tuples come from one law (fixed seeds: deterministic)."""
    keys = sorted(a.keys() | b.keys())
    return stats.chi2_contingency([[a.get(k, 0) for k in keys], [b.get(k, 0) for k in keys]]).pvalue


def _shuffled(rows: torch.Tensor, g: torch.Generator, block: int) -> list[int]:
    """``rows`` (ids) with each block of ``block`` rows in a uniformly random order (the post-processing)."""
    blocks = rows.view(-1, block)
    return torch.cat([b[torch.randperm(block, generator=g)] for b in blocks]).tolist()


def test_fixed_batch_has_the_law_of_fixed_size_followed_by_a_row_shuffle():
    """The selection draw releases, in law, today's cut-or-pad construction (``rows.fixed_size`` of the Poisson
    batch) with its rows shuffled: every ordered tuple of record ids / padding has the same frequency (a batch
    larger than B and one smaller both occur at N = 6, B = 3, q = 1/2)."""
    from dpgen.privacy.rows import fixed_size

    n, b, reps = 6, 3, 3000
    src = PrivateSplit(torch.arange(1, n + 1, dtype=torch.float32)[:, None], torch.zeros(n, dtype=torch.long))
    new = PrivateSampler(src, b, "poisson", seed=1, device="cpu")
    old, g = PrivateSampler(src, b, "poisson", seed=2), torch.Generator().manual_seed(3)

    def draw_new():
        x, _, valid = new.fixed_batch(b)
        return torch.where(valid, x[:, 0], 0.0).long().tolist()

    def draw_old():
        x, _ = old.sample()
        return _shuffled(fixed_size(x, b, g)[:, 0].long(), g, b)

    p_new, p_old = _law(draw_new, reps), _law(draw_old, reps)
    assert _same_law_p(p_new, p_old) > 1e-3
    # the test can fail: without the shuffle, the padding of a small batch sits at the end (another law)
    p_unshuffled = _law(lambda: fixed_size(old.sample()[0], b, g)[:, 0].long().tolist(), reps)
    assert _same_law_p(p_unshuffled, p_old) < 1e-9


@pytest.mark.parametrize("m", [2, 5])
def test_class_batch_has_the_law_of_class_blocks_followed_by_a_shuffle_within_each_block(m):
    """Per class, a batch larger than m (cut to a uniform m-subset) and one smaller (padded) both occur at m = 2;
    m = 5 is wider than every class (the class layout is m wide, every block padded)."""
    from dpgen.privacy.rows import class_blocks

    labels = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2])
    n, c, reps = 8, 3, 3000
    src = PrivateSplit(torch.arange(1, n + 1, dtype=torch.float32)[:, None], labels)
    new = PrivateSampler(src, 4, "poisson", seed=1, device="cpu")
    old, g = PrivateSampler(src, 4, "poisson", seed=2), torch.Generator().manual_seed(3)
    sizes = []

    def draw_new():
        x, y, valid = new.class_batch(c, m)
        assert torch.equal(y[valid], torch.arange(c).repeat_interleave(m)[valid])  # block c holds class c
        return torch.where(valid, x[:, 0], 0.0).long().tolist()

    def draw_old():
        x, y = old.sample()
        sizes.append(torch.bincount(y, minlength=c))
        return _shuffled(class_blocks(x, y, c, m, g)[:, 0].long(), g, m)

    p_new, p_old = _law(draw_new, reps), _law(draw_old, reps)
    assert _same_law_p(p_new, p_old) > 1e-3
    sizes = torch.stack(sizes)
    assert (sizes < m).any() and (sizes > m).any() == (m < labels.bincount().max())  # both cases where they can be


def test_fixed_batch_without_replacement_is_the_cpu_draw_of_before():
    """Without replacement the fixed-size draw is the sampler's own draw, number for number on the CPU."""
    a, b = PrivateSampler(_source(50), 7, "without_replacement", seed=5), PrivateSampler(_source(50), 7,
                                                                                     "without_replacement", seed=5,
                                                                                     device="cpu")
    for _ in range(3):
        x, _, valid = b.fixed_batch(7)
        assert valid.all() and torch.equal(a.sample()[0], x)


def test_a_generator_state_resumes_on_its_device_type_and_reseeds_secretly_on_another():
    from dpgen.privacy.sampler import generator_state, resumed_generator

    g = torch.Generator().manual_seed(9)
    stored = generator_state(g)
    assert stored["device"] == "cpu"
    want = torch.rand(4, generator=g)
    same = torch.Generator()
    resumed_generator(same, stored)
    assert torch.equal(torch.rand(4, generator=same), want)  # the same device type: the draws continue
    resumed_generator(same, stored["state"])  # an older checkpoint's bare CPU state
    assert torch.equal(torch.rand(4, generator=same), want)
    other = torch.Generator()
    resumed_generator(other, {**stored, "device": "cuda"})  # another device type: seeded from the stored state
    again = torch.Generator()
    resumed_generator(again, {**stored, "device": "cuda"})
    first = torch.rand(4, generator=other)
    assert not torch.equal(first, want) and torch.equal(first, torch.rand(4, generator=again))


def test_the_poisson_size_is_drawn_in_float64():
    """N above 2^24 and q = 1: every record is in the batch.  A float32 draw rounds N to 2^24 (one record lost)."""
    from dpgen.privacy.sampler import poisson_size

    n = 2**24 + 1
    assert poisson_size(n, 1.0, torch.Generator().manual_seed(0)) == n


@pytest.mark.parametrize("capacity", [None, 12])  # None: the run's capacity (6 sd); 12: about one step in five over it
def test_padded_batch_has_the_poisson_law(capacity):
    """The valid rows of padded_batch are a Poisson(q) batch: sizes Binomial(N, q), each record in with
    probability q, pairs independent; a draw above the capacity is the exact batch of that size (counted)."""
    from dpgen.privacy.dpsgd import poisson_capacity

    n, b, draws = 40, 10, 6000
    q = b / n
    cap = poisson_capacity(n, q) if capacity is None else capacity
    s = PrivateSampler(_source(n), b, "poisson", seed=5, device=torch.device("cpu"))
    sizes, counts, pair = [], torch.zeros(n), 0
    for i in range(draws):
        if i % 2:  # half the steps prepared ahead (a replayed step), half drawn inside the call (an eager one)
            s.prepare() if s.capacity is not None else None
        x, _, valid = s.padded_batch(cap)
        assert valid.dtype == torch.bool and x.shape[0] == valid.shape[0]
        assert x.shape[0] == cap or bool(valid.all())  # a draw above the capacity: the exact batch, all valid
        rows = x[valid, 0].long()
        assert len(set(rows.tolist())) == rows.numel()
        sizes.append(rows.numel())
        counts[rows] += 1
        pair += int(bool((rows == 0).any()) and bool((rows == 1).any()))
    sizes = torch.tensor(sizes).numpy()
    lo, hi = 4, 17
    obs = [((sizes == k).sum()) for k in range(lo, hi)] + [((sizes < lo) | (sizes >= hi)).sum()]
    pmf = [stats.binom.pmf(k, n, q) for k in range(lo, hi)]
    exp = [p * draws for p in pmf] + [(1 - sum(pmf)) * draws]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    # each record's inclusion count is Binomial(draws, q): within 4.5 sd of draws q, and spread as a binomial
    sd = (draws * q * (1 - q)) ** 0.5
    assert float((counts - draws * q).abs().max()) < 4.5 * sd
    assert stats.chisquare(counts.numpy()).pvalue > 1e-3  # uniform over the records
    assert abs(pair - draws * q * q) < 4.5 * (draws * q * q) ** 0.5  # two records in together: q^2
    expected_over = (1 - stats.binom.cdf(cap, n, q)) * draws
    assert s.over_capacity == pytest.approx(expected_over, abs=5 * expected_over ** 0.5 + 1)
    assert (s.over_capacity > 0) == (capacity is not None)


def test_a_prepared_size_fills_the_buffer_and_the_step_reads_nothing_from_the_host():
    """prepare() draws K on the host and writes it in place; padded_batch then takes that same K."""
    s = PrivateSampler(_source(100), 20, "poisson", seed=1, device=torch.device("cpu"))
    s.padded_batch(60)
    for _ in range(20):
        assert s.prepare()
        k = s._prepared
        assert int(s._k_buf) == k
        _, _, valid = s.padded_batch(60)
        assert int(valid.sum()) == k and s._prepared is None
