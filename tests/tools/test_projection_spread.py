"""scripts/projection_spread.py: the per-projection spread it reports (docs/reproduction/dp-swd.md)."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "projection_spread.py"
_spec = importlib.util.spec_from_file_location("projection_spread", SCRIPT)
ps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ps)


@pytest.mark.parametrize("d", [8, 18])
def test_spread_of_uniform_unit_vectors_is_one_over_sqrt_d(d):
    g = torch.Generator().manual_seed(1)
    z = torch.randn(20000, d, generator=g, dtype=torch.float64)
    z = z / z.norm(dim=1, keepdim=True)
    assert ps.spread(z, ps.directions(d, 100, 0)) == pytest.approx(1 / math.sqrt(d), rel=0.03)


def test_spread_is_linear_in_the_row_scale_and_blind_to_a_shift():
    x = torch.rand(3000, 50, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    th = ps.directions(50, 64, 0)
    assert ps.spread((x - 0.5) / 28, th) == pytest.approx(ps.spread(x, th) / 28, rel=1e-9)


def test_batch_max_scaling_puts_the_largest_row_of_each_batch_at_norm_one_half():
    x = torch.rand(1000, 20, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    r = ps.batch_max_scaled(x, 128, 0)
    assert r.shape == (7 * 128, 20)  # drop_last
    norms = r.norm(dim=1).reshape(7, 128)
    assert torch.allclose(norms.max(dim=1).values, torch.full((7,), 0.5, dtype=torch.float64))
