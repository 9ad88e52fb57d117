"""The DPImageBench evaluator's fast path (device-resident images, channels-last, bfloat16 autocast, device-side
counts, foreach EMA) runs the protocol's numbers: on a tiny synthetic set on the CPU it selects the same epochs
as the reference path, in float32 with accuracies equal up to float rounding, in bfloat16 within the tolerance
below."""

from __future__ import annotations

import pytest
import torch

from dpgen.eval import dpimagebench as bench
from dpgen.eval.benchmark_nets import ParameterEMA
from tests.runs.test_dpimagebench import TINY, _data, _Images, _TinyFeatures

SETTINGS = {"n_synthetic": 240, "sizes": {**TINY, "resnext": {"depth": 11, "cardinality": 2, "widen_factor": 1}},
            "epochs": 3, "batch_size": 32, "grid_per_class": 1, "class_grids": False, "device": "cpu"}
FP32_TOLERANCE = 0.021  # float32: at most 2 of the 100 validation / test images classified otherwise (rounding)
BF16_TOLERANCE = 0.05   # bfloat16 autocast: each classifier's accuracy within 5 points of the reference path


def run(monkeypatch, **fast) -> dict:
    monkeypatch.setattr(bench, "InceptionFeatures", _TinyFeatures)
    data, method = _data()
    return bench.DPImageBenchEvaluator(**SETTINGS, **fast)(method, data, logger=_Images(), seed=0)


@pytest.fixture(scope="module")
def reference():
    with pytest.MonkeyPatch.context() as mp:
        return run(mp, fast=False)


def accuracies(m: dict) -> dict:
    return {k: v for k, v in m.items() if k.startswith("acc_dpimagebench_") and not k.endswith(("_mean", "_std"))}


def test_the_fast_path_in_float32_selects_the_same_epochs_and_accuracies(reference, monkeypatch):
    fast = run(monkeypatch, fast=True, precision="fp32")
    assert fast["dpimagebench_speed"].startswith("fast path (float32, channels-last")
    assert reference["dpimagebench_speed"].startswith("reference path")
    for sel in ("val", "syn"):
        assert fast[f"dpimagebench_{sel}_selected_epochs"] == reference[f"dpimagebench_{sel}_selected_epochs"]
    for key, value in accuracies(reference).items():
        assert abs(fast[key] - value) <= FP32_TOLERANCE, (key, fast[key], value)  # channels-last rounds otherwise
    assert fast["fid"] == pytest.approx(reference["fid"], rel=1e-6)
    assert fast["fid_real_vs_real"] == pytest.approx(reference["fid_real_vs_real"], rel=1e-6)


def test_the_fast_path_in_bfloat16_agrees_within_the_stated_tolerance(reference, monkeypatch):
    fast = run(monkeypatch, fast=True, precision="bf16")
    assert "bfloat16 autocast" in fast["dpimagebench_speed"] and fast["fid_precision"] == "bfloat16 autocast"
    for key, value in accuracies(reference).items():
        assert abs(fast[key] - value) <= BF16_TOLERANCE, (key, fast[key], value)


def test_the_ema_updates_every_tensor_at_once_as_the_per_tensor_loop_rounds():
    g = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(37, 5, generator=g)) for _ in range(4)]
    ema, loop = ParameterEMA(ps, 0.9999), [p.detach().clone() for p in ps]
    for t in range(1, 30):
        with torch.no_grad():
            for p in ps:
                p.add_(torch.randn(p.shape, generator=g))
        ema.update(ps)
        d = min(0.9999, (1 + t) / (10 + t))
        for s, p in zip(loop, ps, strict=True):
            s.sub_((1.0 - d) * (s - p))
    assert all(torch.equal(a, b) for a, b in zip(ema.shadow, loop, strict=True))


def test_auto_runs_the_reference_path_on_a_cpu_and_the_fast_path_on_a_gpu():
    ev = bench.DPImageBenchEvaluator()
    assert ev.speed(torch.device("cpu")) == bench.Speed(False, None, False, False, 1000)
    assert ev.speed(torch.device("cuda")) == bench.Speed(True, torch.bfloat16, False, True, 5000)
    one = bench.DPImageBenchEvaluator(classifiers=["resnext"])
    assert one.speed(torch.device("cuda")) == bench.Speed(True, torch.bfloat16, True, False, 5000)
