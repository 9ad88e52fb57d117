"""End to end through Hydra: `python train.py ...` as a user runs it (few steps, CPU)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tests.helpers.runs import FAST, train, train_here


def test_digits_run_writes_results_with_finite_downstream_accuracies(tmp_path):
    out = tmp_path / "run"
    r = train(["experiment=digits_dpswd", *FAST, f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    # 20 steps: the samples are not yet useful (0.10 / 0.11 measured); what must hold is that both were computed
    assert all(math.isfinite(res["metrics"][key]) for key in ("acc_logreg", "acc_mlp")), res["metrics"]
    p = res["privacy"]
    assert 0 < p["epsilon"] <= 10.0 and 0 < p["epsilon_pld"] <= p["epsilon_rdp"] and p["calibrating_accountant"] == "pld"
    assert p["private_steps"] == 20
    assert (out / "metrics.csv").read_text().splitlines()[0] == "step,loss,epsilon"  # the calibrating ε; no timings
    assert (out / "samples.png").stat().st_size > 500
    assert (out / "checkpoints" / "last.pt").exists() and (out / ".hydra" / "config.yaml").exists()
    assert list((out / "wandb").glob("offline-run-*")), "the default logger writes an offline W&B run"
    assert "epsilon spent (PLD: calibrates" in r.stdout and "acc_logreg" in r.stdout  # an 80-column table wraps
    # provenance that dpgen/reproduce/evidence.py stores with the run: the code's commit and the date
    if (ROOT / ".git").exists():
        assert re.fullmatch(r"[0-9a-f]{4,40}( \+ uncommitted changes)?", res["git_commit"]), res["git_commit"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", res["created_utc"]), res["created_utc"]


@pytest.mark.slow  # a 2-job sweep and its report run in the fast suite in tests/e2e/test_submitit_sweep.py
def test_two_job_multirun_with_joblib_writes_one_results_file_per_job(tmp_path):
    sweep = tmp_path / "sweep"
    r = train(["-m", "experiment=digits_dpswd", "accountant.epsilon=2,8", "hydra/launcher=joblib",
               "hydra.launcher.n_jobs=2", "logger=local", *FAST, f"hydra.sweep.dir={sweep}",
               "hydra.sweep.subdir=${hydra.job.num}"])  # the FAST overrides would make too long a folder name
    assert r.returncode == 0, r.stderr[-3000:]
    results = sorted(sweep.glob("*/results.json"))
    assert len(results) == 2
    eps = sorted(json.loads(p.read_text())["privacy"]["target_epsilon"] for p in results)
    assert eps == [2.0, 8.0]
    for p in results:
        pr = json.loads(p.read_text())["privacy"]
        assert pr["epsilon"] <= pr["target_epsilon"]
    rep = subprocess.run([sys.executable, "-m", "dpgen.report", str(sweep)], capture_output=True,
                         text=True)
    assert rep.returncode == 0, rep.stderr
    assert (sweep / "privacy_utility.png").exists()


@pytest.mark.slow  # resume continuity runs in the fast suite in tests/runs/test_faults.py
def test_resume_flag_continues_the_ledger_of_a_run_folder(tmp_path):
    out = tmp_path / "run"
    common = ["experiment=digits_dpswd", "logger=local", "evaluator=none", "trainer.progress=false",
              "trainer.checkpoint_every=5", f"hydra.run.dir={out}"]  # secret RNG: the state comes from the checkpoint
    r1 = train([*common, "trainer.max_steps=10"])
    assert r1.returncode == 0, r1.stderr[-3000:]
    r2 = train([*common, "trainer.max_steps=25", "trainer.resume=true"])
    assert r2.returncode == 0, r2.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["privacy"]["private_steps"] == 25  # 10 before the restart + 15 after, not 25 fresh ones


# a bad setting through train.py in a fresh process: tests/e2e/test_cli_errors.py (with every fault's one error line)
def test_unknown_experiment_fails_with_close_names_and_where_to_list_them(tmp_path):
    r = train_here(["experiment=mnist_nosuch", f"hydra.run.dir={tmp_path}"])
    assert r.returncode == 2 and "mnist_nosuch" in r.stderr and "did you mean experiment=mnist_" in r.stderr
    assert "`dpgen presets`" in r.stderr


def test_missing_mnist_files_fail_with_expected_paths(tmp_path):
    r = train_here(["experiment=mnist_dpswd", f"paths.data_root={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}"])
    assert r.returncode != 0
    assert str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte") in r.stderr
    assert "dataset.download=true" in r.stderr and "DPGEN_DATA_ROOT" in r.stderr


def test_delta_not_below_one_over_n_is_refused(tmp_path):
    r = train_here(["accountant.delta=0.01", "logger=local", "evaluator=none", "trainer.max_steps=2",
               "trainer.progress=false", f"hydra.run.dir={tmp_path / 'run'}"])
    assert r.returncode == 2 and "is not below 1/N" in r.stderr and not (tmp_path / "run").exists()


@pytest.mark.slow  # loads all of MNIST; make test-all
@pytest.mark.usefixtures("data_root")
def test_mnist_preset_runs_on_shared_data(tmp_path, data_root):
    r = train(["experiment=mnist_dpswd", "logger=local", "trainer.max_steps=5", "trainer.progress=false",
               "evaluator.n_synthetic=1000", "evaluator.fid.extractor=domain", "evaluator.classifiers=[logreg]", "evaluator.logreg_max_iter=50",
               f"paths.data_root={data_root}", f"hydra.run.dir={tmp_path}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "results.json").read_text())
    assert "n_private" not in res and "acc_logreg" in res["metrics"]  # add/remove: N is not published
    assert res["train"]["steps_planned"] == 60000


def test_a_run_records_the_commit_it_started_from_not_the_checkouts_at_its_end(tmp_path, monkeypatch):
    """The checkout may move while a long run trains (an editable install): results.json and the privacy card name
    the code version read when the run starts, once."""
    import itertools

    import dpgen.pipeline

    versions = itertools.count()
    monkeypatch.setattr(dpgen.pipeline, "code_version", lambda: f"{next(versions):07x}")
    out = tmp_path / "run"
    r = train_here(["experiment=digits_moments", "logger=local", "evaluator=none", "trainer.progress=false",
                    f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "results.json").read_text())["git_commit"] == "0000000"
    assert json.loads((out / "privacy_card.json").read_text())["code_version"] == "0000000"
