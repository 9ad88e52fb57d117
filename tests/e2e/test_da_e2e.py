"""Domain adaptation end to end through `python train.py`: tiny schedules on CPU."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.helpers.runs import beats_chance, train, train_here

FAST = ["logger=local", "trainer.progress=false", "trainer.log_every=10", "model.epochs=3", "model.start_align=1"]
# digits_shift: N_target = 674, B = 32 -> 22 steps per epoch; 3 epochs, alignment from epoch 1 -> 44 private steps


def _results(out):
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow  # the fast suite runs this preset end to end in tests/e2e/test_presets_e2e.py
def test_digits_shift_dpswd_writes_results_with_target_accuracy(tmp_path):
    out = tmp_path / "run"
    r = train(["experiment=digits_shift_dpswd", *FAST, f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = _results(out)
    assert beats_chance(res["metrics"]["acc_target"]) and beats_chance(res["metrics"]["acc_source"]), res["metrics"]
    p, t = res["privacy"], res["train"]
    assert p["private_steps"] == 44 and 0 < p["epsilon"] <= 10.0 and p["epsilon_pld"] <= p["epsilon_rdp"]
    assert t["feature_dim"] == 320 and t["noise_std"] > 0 and t["warmup_steps"] == 22
    assert "n_private" not in res and res["dataset"] == "digits->digits_shifted"  # add/remove: N is not published
    assert (out / "confusion_target.png").stat().st_size > 1000 and (out / "da_model.pt").exists()
    assert "acc_target" in r.stdout


@pytest.mark.slow  # train.py subprocesses; make test-all
def test_digits_shift_dp_dann_writes_results_and_resumes_its_ledger(tmp_path):
    out = tmp_path / "run"
    common = ["experiment=digits_shift_dp_dann", *FAST, "trainer.checkpoint_every=10", f"hydra.run.dir={out}"]
    r1 = train([*common, "trainer.max_steps=30", "evaluator.plot=false"])
    assert r1.returncode == 0, r1.stderr[-3000:]
    assert _results(out)["privacy"]["private_steps"] == 8
    r2 = train([*common, "trainer.resume=true"])
    assert r2.returncode == 0, r2.stderr[-3000:]
    res = _results(out)
    assert res["privacy"]["private_steps"] == 44  # 8 before the restart + 36 after
    assert 0 < res["privacy"]["epsilon"] <= 10.0  # the calibrating accountant's epsilon
    assert beats_chance(res["metrics"]["acc_target"]), res["metrics"]
    assert res["train"]["noise_multiplier"] > 0 and res["train"]["clip_norm"] == 1.0


def _office_fixture(root):
    rng = np.random.default_rng(0)
    (root / "office31").mkdir(parents=True)
    for i, name in enumerate(("amazon", "webcam")):
        y = np.arange(124) % 31
        x = rng.normal(size=(124, 2048)).astype(np.float32) + 0.5 * y[:, None] / 31 + i
        np.savez(root / "office31" / f"{name}.npz", features=x, labels=y)


@pytest.mark.slow  # train.py subprocesses; make test-all
def test_office31_presets_run_on_fixture_features(tmp_path):
    _office_fixture(tmp_path / "data")
    for variant in ("dpswd", "dann"):
        out = tmp_path / variant
        r = train([f"experiment=office31_{variant}", *FAST, "accountant.delta=1e-3", f"paths.data_root={tmp_path / 'data'}",
                   f"hydra.run.dir={out}"])
        assert r.returncode == 0, r.stderr[-3000:]
        res = _results(out)
        assert res["dataset"] == "office31:amazon->webcam" and math.isfinite(res["metrics"]["acc_target"]), res
        eps = float(res["privacy"]["epsilon"])  # the calibrating accountant's (the guarantee)
        assert (0 < eps <= 10.0) if variant == "dpswd" else math.isinf(eps)  # DANN is not private: eps = inf


def test_missing_office_features_fail_with_the_expected_paths(tmp_path):
    r = train_here(["experiment=office31_dpswd", "dataset.source=dslr", f"paths.data_root={tmp_path}", "logger=local",
               f"hydra.run.dir={tmp_path / 'run'}"])
    assert r.returncode != 0 and "office31/dslr.npz" in r.stderr


def test_sweep_report_plots_target_accuracy_against_epsilon(tmp_path, capsys):
    """Fig. 3 path: a multirun over accountant.epsilon summarised by dpgen/report.py --metric acc_target."""
    from dpgen.report import main as report


    for i, (eps, acc) in enumerate([(1.0, 0.6), (10.0, 0.7), (None, 0.8)]):
        job = tmp_path / str(i)
        job.mkdir()
        privacy = {"target_epsilon": eps, "epsilon_rdp": eps if eps else "inf", "epsilon_pld": None, "delta": 1e-5}
        (job / "results.json").write_text(json.dumps({"experiment": "mnist_usps_dpswd", "privacy": privacy,
                                                      "overrides": [f"accountant.epsilon={eps}"],
                                                      "metrics": {"acc_target": acc, "acc_source": 0.97}}))
    code = report([str(tmp_path), "--metric", "acc_target"])  # `python -m dpgen.report`, in this process
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "acc_target" in out.out and "0.6" in out.out and "0.8" in out.out
    assert (tmp_path / "privacy_utility.png").stat().st_size > 1000
