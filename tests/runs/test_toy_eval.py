"""Toy presets report the sliced Wasserstein distance of their samples to the held-out target."""

from __future__ import annotations

import json

import pytest
import torch

from dpgen.eval import sliced_distance_to_test
from tests.helpers.configs import compose_cfg


def test_sliced_distance_is_near_the_floor_for_target_samples_and_grows_with_a_shift():
    g = torch.Generator().manual_seed(0)
    test = torch.randn(2000, 1, 1, 2, generator=g)
    same = sliced_distance_to_test(torch.randn(1000, 1, 1, 2, generator=g), test)
    shifted = sliced_distance_to_test(torch.randn(1000, 1, 1, 2, generator=g) + 2.0, test)
    assert same["swd_floor"] == shifted["swd_floor"] and same["swd_n_samples"] == 1000
    assert abs(same["swd_to_test"] - same["swd_floor"]) < 0.1
    assert shifted["swd_to_test"] > 1.0 > same["swd_to_test"]  # SW_2 of a shift by (2, 2): sqrt(E (2 u1 + 2 u2)^2) = 2
    with pytest.raises(ValueError, match="at least 1000 generated"):
        sliced_distance_to_test(test[:10], test)


@pytest.mark.parametrize("preset", ["toy_dpswflow", "toy_dpswd"])
def test_toy_presets_use_the_toy_evaluator(preset):
    cfg = compose_cfg([f"experiment={preset}"])
    assert cfg.evaluator._target_ == "dpgen.eval.ToyEvaluator"


def test_toy_dpswd_preset_writes_its_sliced_distance_to_results(tmp_path):
    from tests.helpers.runs import train_here

    out = tmp_path / "toy"
    r = train_here(["experiment=toy_dpswd", "logger=local", "trainer.max_steps=20", "trainer.progress=false",
               "evaluator.n_synthetic=500", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    m = res["metrics"]
    assert 0 < m["swd_floor"] < m["swd_to_test"] and m["swd_n_directions"] == 500
    assert "swd_to_test" in res["summary"]["utility"] and "swd_n_samples" in res["summary"]["provenance"]
