"""Reported-only accountants fed device tensors (privacy.deferred): the same numbers as fed at once, read later."""

from __future__ import annotations

import numpy as np
import torch

from dpgen.privacy.bayesian import BayesianAccountant
from dpgen.privacy.deferred import DeferredSteps
from dpgen.privacy.wdp import WassersteinAccountant


def test_distances_kept_as_tensors_give_the_same_wa_and_ba_as_at_once():
    rng = np.random.default_rng(0)
    dists = rng.uniform(0.1, 1.0, size=(9, 8))
    now = (WassersteinAccountant(16, 32), BayesianAccountant(16, total_steps=9))
    later = (WassersteinAccountant(16, 32), BayesianAccountant(16, total_steps=9))
    for t, d in enumerate(dists):
        for a in now:
            a.step(d, 0.7, 0.01)
        for a in later:
            a.step(torch.tensor(d), 0.7, 0.01)
        if t == 4:  # a log step: the kept steps start their copy
            for a in later:
                a.deferred.stage()
    assert later[0].steps == 0 and len(later[0].deferred) == 9  # nothing accounted before a read
    for a, b in zip(now, later, strict=True):
        assert a.epsilon(1e-5) == b.epsilon(1e-5)
        assert a.state_dict() == b.state_dict() if a.name == "wa" else a.cost.tolist() == b.cost.tolist()
    assert later[0].steps == 9 and len(later[0].deferred) == 0


def test_drain_returns_the_steps_in_order_with_their_arguments():
    kept = DeferredSteps()
    kept.push(torch.tensor([1.0, 2.0]), "a")
    kept.stage()
    kept.push(torch.tensor([[3.0], [4.0], [5.0]]), "b")
    out = kept.drain()
    assert [a for _, a in out] == [("a",), ("b",)]
    assert [v.tolist() for v, _ in out] == [[1.0, 2.0], [3.0, 4.0, 5.0]]
    assert kept.drain() == []
