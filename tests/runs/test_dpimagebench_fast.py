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
    assert fast["dpimagebench_speed"].startswith("fast path (float32, NCHW")
    assert "other numerics" not in fast["dpimagebench_protocol"]  # resident images and device counts: no number
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
    assert ("other numerics: bfloat16 autocast (benchmark: float32); channels-last tensors (benchmark: NCHW)"
            in fast["dpimagebench_protocol"])
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
    gpu = ev.speed(torch.device("cuda"))
    assert gpu == bench.Speed(True, torch.bfloat16, False, True, 5000, channels_last=True, tf32_matmul=True)
    one = bench.DPImageBenchEvaluator(classifiers=["resnext"])
    assert one.speed(torch.device("cuda")) == bench.Speed(True, torch.bfloat16, True, False, 5000,
                                                          channels_last=True, tf32_matmul=True)
    # every numeric difference of the fast path is named; precision=fp32 is the benchmark's numerics on a GPU
    assert gpu.numerics() == ["bfloat16 autocast (benchmark: float32)", "TF32 matrix products (benchmark: float32)",
                              "channels-last tensors (benchmark: NCHW)",
                              "classifiers concurrent on CUDA streams (benchmark: one after the other)"]
    fp32 = bench.DPImageBenchEvaluator(precision="fp32").speed(torch.device("cuda"))
    assert fp32 == bench.Speed(True, None, False, False, 5000) and fp32.numerics() == []
    forced = bench.DPImageBenchEvaluator(precision="fp32", compile=True).speed(torch.device("cuda"))
    assert forced.numerics() == ["torch.compile (benchmark: eager)"]


def test_only_the_benchmarks_sizes_and_numerics_are_called_the_full_protocol():
    assert bench.protocol_label([], []).endswith("full protocol")
    bf16 = bench.protocol_label([], ["bfloat16 autocast (benchmark: float32)"])
    assert not bf16.endswith("full protocol") and "the benchmark's sizes, other numerics: bfloat16" in bf16
    both = bench.protocol_label(["2 epoch(s) (benchmark: 50)"], ["bfloat16 autocast (benchmark: float32)"])
    assert both == ("shortened protocol: 2 epoch(s) (benchmark: 50); other numerics: bfloat16 autocast "
                    "(benchmark: float32)")
