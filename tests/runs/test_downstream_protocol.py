"""The downstream protocols (evaluator.protocol): DP-Sinkhorn's torch classifiers beside scikit-learn's."""

from __future__ import annotations

import json
import math

import pytest
import torch

from dpgen.eval import GenerativeEvaluator
from dpgen.eval.cnn import accuracy, fit_early_stopping
from dpgen.eval.downstream import (
    downstream_accuracy,
    torch_protocol_accuracy,
    torch_protocol_inputs,
)
from tests.helpers.runs import FAST, train


def _blobs(n: int, seed: int, sep: float = 0.35) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes of 1x6x6 'images' in [0, 1]: class c lights the left (c = 0) or right (c = 1) half."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    x = 0.5 + 0.1 * torch.randn(n, 1, 6, 6, generator=g)
    x[y == 0, :, :, :3] += sep
    x[y == 1, :, :, 3:] += sep
    return x.clamp(0, 1), y


def test_torch_inputs_scale_to_minus_one_one_and_threshold_only_the_synthetic_set():
    xs = torch.tensor([[[[0.0, 0.25, 0.5, 0.75, 1.0]]]])
    s, t = torch_protocol_inputs(xs, xs, threshold=True)
    assert s.tolist() == [[-1.0, -1.0, 0.0, 0.5, 1.0]]  # 0.25 -> -0.5 -> thresholded to -1
    assert t.tolist() == [[-1.0, -0.5, 0.0, 0.5, 1.0]]  # the real test images are not thresholded
    s, _ = torch_protocol_inputs(xs, xs, threshold=False)
    assert s.tolist() == [[-1.0, -0.5, 0.0, 0.5, 1.0]]


@pytest.mark.parametrize("name", ["logreg", "mlp"])
def test_torch_protocol_learns_a_separable_task_and_nothing_from_signal_free_images(name):
    x, y = _blobs(1200, 0)
    xt, yt = _blobs(600, 1)
    cfg = {"max_epochs": 40, "lr": 1e-2, "threshold": False}
    acc = torch_protocol_accuracy(name, x, y, xt, yt, 2, seed=0, settings=cfg)
    assert acc > 0.95, acc
    noise = torch.rand(1200, 1, 6, 6, generator=torch.Generator().manual_seed(3))  # images that say nothing
    acc_noise = torch_protocol_accuracy(name, noise, y, xt, yt, 2, seed=0, settings=cfg)
    assert 0.35 < acc_noise < 0.65, acc_noise  # chance on the real test set


def test_early_stopping_returns_the_best_validation_state_and_stops_on_patience():
    x, y = _blobs(400, 0, sep=0.05)  # hard task: validation accuracy goes up and down
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(36, 2))
    seen: list[float] = []
    opt = torch.optim.SGD(model.parameters(), lr=5.0)  # a large step: a noisy validation curve
    fitted = fit_early_stopping(model, opt, x, y, epochs=200, batch_size=16, patience=3, seed=0,
                                progress=lambda e, a: seen.append(a))
    assert len(seen) < 200, "patience 3 must stop a noisy curve long before 200 epochs"
    best = max(seen)
    assert seen.index(best) == len(seen) - 4  # stopped exactly 3 epochs after the best one
    assert accuracy(fitted, x[360:], y[360:]) == pytest.approx(best)


def test_downstream_accuracy_dispatches_on_protocol_and_rejects_unknown_ones():
    x, y = _blobs(600, 0)
    xt, yt = _blobs(300, 1)
    out = downstream_accuracy(x, y, xt, yt, ("logreg",), protocol="torch",
                              torch_clf={"max_epochs": 30, "lr": 1e-2, "threshold": False})
    assert out["acc_logreg"] > 0.95
    with pytest.raises(ValueError, match="evaluator.protocol"):
        downstream_accuracy(x, y, xt, yt, ("logreg",), protocol="keras")


def test_evaluator_rejects_a_bad_protocol_or_torch_clf_key_before_any_data():
    with pytest.raises(ValueError, match=r"evaluator\.protocol='tf'.*sklearn"):
        GenerativeEvaluator(protocol="tf")
    with pytest.raises(ValueError, match=r"evaluator\.torch_clf: unknown keys \['epochs'\]"):
        GenerativeEvaluator(protocol="torch", torch_clf={"epochs": 3})


@pytest.mark.slow  # long: `make test-all` runs it
def test_train_py_with_the_torch_protocol_records_it(tmp_path):
    out = tmp_path / "run"
    r = train(["experiment=digits_dpswd", *FAST, "logger=local", "evaluator.fid.enabled=false",
               "evaluator.protocol=torch", "evaluator.torch_clf.max_epochs=5", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out / "results.json").read_text())["metrics"]
    assert m["downstream_protocol"] == "torch"
    assert math.isfinite(m["acc_logreg"]) and math.isfinite(m["acc_mlp"]), m  # 20 steps: near chance, by design
