"""dataset.validation_size: DPImageBench's sensitive validation split, cut before any private step."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import random_split

from dpgen.data.base import make_splits, split_validation
from dpgen.data.datasets import digits
from dpgen.errors import ConfigError


def test_the_cut_is_the_benchmarks_random_split_with_seed_0():
    n, v = 600, 50
    x, y = torch.arange(n).float()[:, None], torch.arange(n)
    torch.manual_seed(0)  # the benchmark: torch.manual_seed(0); random_split(train, [n - v, v])
    train, val = random_split(range(n), [n - v, v])
    x_tr, _, validation = split_validation(x, y, v)
    assert x_tr[:, 0].long().tolist() == list(train.indices)
    assert validation.y.tolist() == list(val.indices)
    torch.manual_seed(123)  # the run's seed does not move the cut
    assert split_validation(x, y, v)[2].y.tolist() == list(val.indices)


def test_the_private_split_never_holds_a_validation_image():
    n = 400
    x, y = torch.arange(n).float().view(n, 1, 1, 1), torch.arange(n)  # every image its own id
    data = make_splits("ids", x, y, x[:10], y[:10], public_fraction=0.25, seed=3, num_classes=n, validation_size=40)
    private_ids = set(data.private._gather(torch.arange(len(data.private)))[1].tolist())
    val_ids, pub_ids = set(data.validation.y.tolist()), set(data.public.y.tolist())
    assert len(val_ids) == 40 and not val_ids & private_ids and not val_ids & pub_ids
    assert val_ids | private_ids | pub_ids == set(range(n))
    assert make_splits("ids", x, y, x[:10], y[:10], 0.0, 0, n).validation is None  # no setting: no cut


def test_digits_with_a_validation_split_and_a_too_large_one():
    data = digits(validation_size=300)
    assert len(data.validation) == 300 and len(data.private) == 1347 - 300
    with pytest.raises(ConfigError, match="dataset.validation_size=2000"):
        digits(validation_size=2000)
