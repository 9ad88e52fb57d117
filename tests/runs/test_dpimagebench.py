"""evaluator=dpimagebench: DPImageBench's protocol (Gong et al., CCS 2025), its labels and its settings."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from dpgen.data.base import make_splits
from dpgen.errors import ConfigError
from dpgen.eval import dpimagebench as bench
from dpgen.eval.benchmark_nets import DEFAULT_SIZES, ParameterEMA, build_classifier
from tests.helpers import ROOT

TINY = {"resnet": {"depth": 8}, "wrn": {"depth": 10, "widen_factor": 1},
        "resnext": {"depth": 11, "cardinality": 1, "widen_factor": 4}}


def test_the_classifiers_have_the_benchmarks_sizes():
    # published sizes of these CIFAR networks: ResNet-110 1.7M, WRN-40-4 8.9M, ResNeXt-29 (8x64d) 34.4M parameters
    counts = {name: sum(p.numel() for p in build_classifier(name, 1, 28, 10, DEFAULT_SIZES[name]).parameters())
              for name in DEFAULT_SIZES}
    assert counts == {"resnet": 1_730_426, "wrn": 8_948_922, "resnext": 34_425_546}
    assert build_classifier("wrn", 1, 8, 10, TINY["wrn"])(torch.zeros(2, 1, 8, 8)).shape == (2, 10)


def test_the_ema_warms_up_as_the_benchmarks():
    p = torch.nn.Parameter(torch.zeros(3))
    ema = ParameterEMA([p], 0.9999)
    with torch.no_grad():
        p.fill_(1.0)
    ema.update([p])  # decay min(0.9999, 2 / 11): the shadow moves 9/11 of the way
    assert torch.allclose(ema.shadow[0], torch.full((3,), 9 / 11))
    ema.swap_in([p])
    assert torch.allclose(p, torch.full((3,), 9 / 11))
    ema.swap_out([p])
    assert torch.equal(p.detach(), torch.ones(3))


class _ClassMeans:
    """A 'generator' that draws each class around its mean image (8x8)."""

    def __init__(self, means: torch.Tensor) -> None:
        self.means = means

    def sample(self, n, labels):
        g = torch.Generator().manual_seed(1)
        return (self.means[labels] + 0.1 * torch.randn(n, 1, 8, 8, generator=g)).clamp(0, 1), labels


def _data(validation_size=100):
    g = torch.Generator().manual_seed(0)
    means = torch.rand(4, 1, 8, 8, generator=g)
    y = torch.arange(600) % 4
    x = (means[y] + 0.1 * torch.randn(600, 1, 8, 8, generator=g)).clamp(0, 1)
    data = make_splits("toy8", x[:500], y[:500], x[500:], y[500:], 0.0, 0, 4, validation_size=validation_size)
    return data, _ClassMeans(means)


class _TinyFeatures(torch.nn.Module):
    """Stands in for Inception in the fast test (the slow test runs the real one)."""

    def __init__(self, *_, **__):
        super().__init__()
        self.num_features = 8
        self.source = type("S", (), {"describe": staticmethod(lambda: "test features")})()

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(x.mean(1, keepdim=True), 2).flatten(1).double() \
            .repeat(1, 2)


class _Images:
    """A logger that keeps the grids it is given."""

    def __init__(self):
        self.images = {}

    def log_images(self, key, imgs, nrow):
        self.images[key] = (tuple(imgs.shape), nrow)


def test_both_selections_and_the_fid_are_written_with_their_labels(monkeypatch):
    monkeypatch.setattr(bench, "InceptionFeatures", _TinyFeatures)
    data, method = _data()
    ev = bench.DPImageBenchEvaluator(n_synthetic=240, sizes=TINY, epochs=2, batch_size=32, grid_per_class=3)
    logger = _Images()
    m = ev(method, data, logger=logger)
    # the run's pictures: one row of 3 per class, and a 3 x 3 grid per class (four classes)
    assert logger.images["samples"] == ((12, *data.image_shape), 3)
    assert sorted(logger.images) == ["samples", *(f"samples_class{c}" for c in range(4))]
    assert logger.images["samples_class3"] == ((9, *data.image_shape), 3)
    for sel in ("val", "syn"):
        assert len({m[f"acc_dpimagebench_{sel}_{c}"] for c in ("resnet", "wrn", "resnext")}) >= 1
        vals = [m[f"acc_dpimagebench_{sel}_{c}"] for c in ("resnet", "wrn", "resnext")]
        assert m[f"acc_dpimagebench_{sel}_mean"] == pytest.approx(sum(vals) / 3)
        assert m[f"acc_dpimagebench_{sel}_std"] == pytest.approx(float(torch.tensor(vals).std(unbiased=False)))
        assert m[f"acc_dpimagebench_{sel}_mean"] > 0.5  # four well-separated classes: far above chance (0.25)
    assert "not covered by the privacy guarantee" in m["dpimagebench_val_selection"]
    assert "100 sensitive images held out" in m["dpimagebench_val_selection"]
    assert "covered by the privacy guarantee (post-processing)" in m["dpimagebench_syn_selection"]
    assert "20 held-out synthetic images" in m["dpimagebench_syn_selection"]  # 240 / 12
    assert math.isfinite(m["fid"]) and "reads sensitive data" in m["fid_label"]
    assert m["dpimagebench_protocol"].startswith("shortened protocol: 2 epoch(s) (benchmark: 50)")
    assert "240 synthetic images, 220 train / 20 held out for the synthetic selection" in m["dpimagebench_protocol"]
    assert "given 240 its split would train on all 240, holding none out" in m["dpimagebench_protocol"]
    assert "ResNet-8 (benchmark: ResNet-110)" in m["dpimagebench_protocol"]


def test_the_full_protocol_is_named_only_with_every_benchmark_setting():
    data, _ = _data(validation_size=100)  # fewer than the benchmark's 5,000
    full = bench.DPImageBenchEvaluator()
    assert "100 sensitive validation images (benchmark: 5,000)" in full.deviations(data)
    data.validation.x = torch.zeros(5000, 1, 8, 8)
    data.validation.y = torch.zeros(5000, dtype=torch.long)
    assert full.deviations(data) == []
    assert bench.DPImageBenchEvaluator(classifiers=["resnet"]).deviations(data) == [
        "classifiers resnet only (benchmark: resnet, wrn, resnext)"]
    assert bench.DPImageBenchEvaluator(fid={"n_reference": 1000}).deviations(data) == [
        "FID reference: 1000 sensitive training images (benchmark: all 55,000)"]
    assert bench.DPImageBenchEvaluator(fid={"resize": "tf1"}).deviations(data) == [
        f"FID input {bench.FID_RESIZES['tf1']} (benchmark: {bench.FID_RESIZES['benchmark']})"]
    assert "the first 55,000, holding out 10000" in bench.DPImageBenchEvaluator(n_synthetic=65000).deviations(data)[0]


def test_a_dataset_without_a_validation_split_fails_before_training_with_the_fix():
    data, _ = _data(validation_size=None)
    with pytest.raises(ConfigError, match="dataset.validation_size=5000"):
        bench.DPImageBenchEvaluator().check(data)
    with pytest.raises(ConfigError, match="evaluator.classifiers"):
        bench.DPImageBenchEvaluator(classifiers=["vgg"])


@pytest.mark.slow  # the real Inception network on CPU: minutes on a loaded machine
def test_train_py_with_the_dpimagebench_evaluator_on_cpu(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    r = subprocess.run([sys.executable, str(ROOT / "train.py"), "experiment=digits_moments", "evaluator=dpimagebench",
                        "dataset.validation_size=300", "evaluator.epochs=1", "evaluator.n_synthetic=2000",
                        "evaluator.sizes.resnet.depth=8", "evaluator.sizes.wrn={depth:10,widen_factor:1}",
                        "evaluator.sizes.resnext={depth:11,cardinality:2,widen_factor:1}",
                        "evaluator.fid.n_generated=100", "evaluator.fid.n_reference=100", "logger=local",
                        "trainer.progress=false", f"hydra.run.dir={out}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out / "results.json").read_text())["metrics"]
    assert m["fid_extractor"] == "inception" and math.isfinite(m["fid"])
    assert m["acc_dpimagebench_val_mean"] > 0.3 and m["acc_dpimagebench_syn_mean"] > 0.3
    assert "shortened protocol: 1 epoch(s)" in r.stdout and "not covered by the privacy guarantee" in r.stdout
    card = json.loads((out / "privacy_card.json").read_text())
    assert card["dataset"]["validation_held_out"]["size"] == 300
    assert (out / "samples.png").is_file() and (out / "samples_class9.png").is_file()


def test_only_the_evaluator_and_the_audit_read_private_records_outside_the_guarantee():
    """The benchmark's FID (labelled "not covered") and the empirical audit's canaries (it writes only its
    numbers); no method, release or export."""
    callers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "dpgen").rglob("*.py")
                     if "read_outside_guarantee(" in p.read_text())
    assert callers == ["dpgen/audit/cli.py", "dpgen/data/base.py", "dpgen/eval/dpimagebench.py"], callers


def test_a_run_records_the_held_out_images_and_dpgen_evaluate_refuses_it(tmp_path, monkeypatch):
    from dpgen.api import train
    from dpgen.eval.cli import EvaluateError, evaluate

    monkeypatch.setattr(bench, "InceptionFeatures", _TinyFeatures)
    overrides = ["experiment=digits_moments", "evaluator=dpimagebench", "dataset.validation_size=300",
                 "evaluator.epochs=2", "evaluator.n_synthetic=600", "evaluator.batch_size=32",
                 "evaluator.classifiers=[resnet]", "evaluator.sizes.resnet.depth=8", "evaluator.fid.n_generated=50",
                 "evaluator.fid.n_reference=50", "logger=local", "trainer.progress=false"]
    run = train(overrides, run_dir=tmp_path / "run")
    m = run.results["metrics"]
    assert m["dpimagebench_protocol"].startswith("shortened protocol: 2 epoch(s)")
    assert "300 sensitive validation images (benchmark: 5,000)" in m["dpimagebench_protocol"]
    assert m["acc_dpimagebench_val_mean"] > 0.3 and m["acc_dpimagebench_syn_mean"] > 0.3  # 10 classes: chance 0.1
    card = json.loads((run.run_dir / "privacy_card.json").read_text())
    assert card["dataset"]["validation_held_out"]["size"] == 300
    assert any("300 sensitive validation images" in item for item in card["does_not_cover"])
    # the card is completed after the evaluation: it names the FID's read of the training images
    assert card["evaluation_reads_outside_guarantee"] == ["DPImageBench's FID reference: the sensitive training images"]
    assert any(i.startswith("The evaluation's reads of private data") and "FID" in i for i in card["does_not_cover"])
    assert "evaluation read private data | DPImageBench's FID" in (run.run_dir / "privacy_card.md").read_text()
    from omegaconf import OmegaConf

    from dpgen.api import compose

    (run.run_dir / ".hydra").mkdir(exist_ok=True)  # what `python train.py` writes beside the run
    OmegaConf.save(compose(overrides, run.run_dir), run.run_dir / ".hydra" / "config.yaml")
    with pytest.raises(EvaluateError, match="reads sensitive data"):
        evaluate(run.run_dir)
