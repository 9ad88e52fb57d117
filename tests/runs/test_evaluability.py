"""Evaluability before training, a run kept when evaluation fails after it, and `dpgen evaluate`."""

from __future__ import annotations

import json
import time

import pytest
import torch

import dpgen.eval.fid as fid
from dpgen.cli import main as dpgen_main
from dpgen.data.base import DataSplits, TensorSplit
from dpgen.errors import ConfigError
from dpgen.eval import ClassifierEvaluator, GenerativeEvaluator, ToyEvaluator
from dpgen.eval.evaluator import evaluate_run
from tests.helpers.runs import beats_chance, train_here


class _SecretSize:
    """A private split whose size must not be read by the checks."""

    def __len__(self):
        raise AssertionError("the evaluability check read the private split")


def _splits(n_test: int, n_public: int = 0, shape=(1, 8, 8)) -> DataSplits:
    g = torch.Generator().manual_seed(0)

    def split(n):
        return TensorSplit(torch.rand(n, *shape, generator=g), torch.arange(n) % 10)

    return DataSplits(name="tiny", private=_SecretSize(), test=split(n_test),
                      public=split(n_public) if n_public else None, num_classes=10, image_shape=shape)


DOMAIN_FID = {"enabled": True, "extractor": "domain", "n_fid": 100}


def test_a_test_split_too_small_for_the_domain_fid_is_a_config_error_naming_the_fix():
    ev = GenerativeEvaluator(n_synthetic=100, classifiers=("logreg",), fid=DOMAIN_FID)
    with pytest.raises(ConfigError, match=r"evaluator.fid.*16 images.*evaluator.fid.enabled=false"):
        ev.check(_splits(16))
    ev.check(_splits(40))  # half of 40 trains the extractor, the other half is the reference
    ev.check(_splits(16, n_public=1000))  # a public split large enough trains it instead
    GenerativeEvaluator(n_synthetic=100, fid={**DOMAIN_FID, "enabled": False}).check(_splits(16))


def test_classifiers_need_a_test_split_and_every_class_in_the_synthetic_set():
    with pytest.raises(ConfigError, match="test split is empty.*evaluator.classifiers=\\[\\]"):
        GenerativeEvaluator(n_synthetic=100, fid={"enabled": False}).check(_splits(0))
    with pytest.raises(ConfigError, match="evaluator.n_synthetic=5 .*10 classes"):
        GenerativeEvaluator(n_synthetic=5, fid={"enabled": False}).check(_splits(30))
    with pytest.raises(ConfigError, match="test split is empty"):
        ClassifierEvaluator().check(_splits(0))
    with pytest.raises(ConfigError, match="sliced distance"):
        ToyEvaluator(n_synthetic=100, classifiers=[], fid={"enabled": False}).check(_splits(1))  # one image: one class


def test_no_inception_weights_and_no_fallback_fails_from_the_settings_alone(monkeypatch):
    monkeypatch.setattr(fid, "hub_cached_weights", lambda: None)
    monkeypatch.setattr(fid, "packaged_weights", lambda: None)
    monkeypatch.setenv("DPGEN_OFFLINE", "1")
    strict = GenerativeEvaluator(fid={"enabled": True, "extractor": "inception", "fallback": None})
    with pytest.raises(ConfigError, match="evaluator.fid.extractor=inception.*evaluator.fid.fallback=domain"):
        strict.check()
    # with the fallback allowed, the domain extractor's needs are checked instead
    lenient = GenerativeEvaluator(fid={"enabled": True, "extractor": "inception", "fallback": "domain"})
    lenient.check()
    with pytest.raises(ConfigError, match="domain extractor"):
        lenient.check(_splits(10))


def test_a_misconfigured_run_fails_in_seconds_before_training_with_one_error_line(tmp_path):
    run_dir = tmp_path / "run"
    t0 = time.perf_counter()
    # one test image holds one class: without classifiers, the sliced distance's own need is what refuses
    r = train_here(["experiment=toy_dpswd", "dataset.n_test=1", "evaluator.classifiers=[]", "logger=local",
               f"hydra.run.dir={run_dir}"])
    elapsed = time.perf_counter() - t0
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: dataset ") and "test split has 1 sample" in last and "evaluator=none" in last
    assert "Traceback" not in r.stderr and not run_dir.exists()  # nothing trained, nothing left
    assert elapsed < 60


def test_an_evaluation_failure_keeps_the_metrics_computed_so_far(capsys):
    class Failing:
        last_metrics = None

        def __call__(self, method, data, logger, seed=0):
            self.last_metrics = {"acc_logreg": 0.9}
            raise RuntimeError("FID exploded")

    metrics = evaluate_run(Failing(), None, None, None, 0, "outputs/x/run")
    assert metrics == {"acc_logreg": 0.9, "eval_error": "RuntimeError: FID exploded"}
    err = " ".join(capsys.readouterr().err.split())
    assert "dpgen evaluate outputs/x/run" in err


FAST = ["experiment=digits_moments", "logger=local", "trainer.progress=false", "evaluator.n_synthetic=300",
        "evaluator.classifiers=[logreg]", "evaluator.logreg_max_iter=200", "evaluator.fid.n_fid=100",
        "evaluator.fid.domain.min_steps=20", "evaluator.fid.domain.epochs=1", "evaluator.class_grids=false"]


def test_a_run_whose_evaluation_fails_is_kept_and_dpgen_evaluate_completes_it(tmp_path, monkeypatch):
    """Training finishes, the FID then fails (its cache folder is a file): results.json holds the downstream
    accuracy, the privacy spent and the error; `dpgen evaluate` rebuilds the method from the release and
    rewrites the metrics, leaving the privacy section and the ledger as they were."""
    run_dir = tmp_path / "run"
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("")
    r = train_here([*FAST, f"evaluator.fid.cache_dir={blocker}", f"hydra.run.dir={run_dir}"])
    assert r.returncode == 0, r.stderr[-3000:]
    first = json.loads((run_dir / "results.json").read_text())
    assert "eval_error" in first["metrics"] and beats_chance(first["metrics"]["acc_logreg"]), first["metrics"]
    assert first["privacy"]["epsilon"] > 0
    assert f"dpgen evaluate {run_dir}" in " ".join(r.stderr.split())
    ledger_files = {p: p.read_bytes() for p in (run_dir / "checkpoints").iterdir()}

    monkeypatch.chdir(tmp_path)
    code = dpgen_main(["evaluate", str(run_dir), f"evaluator.fid.cache_dir={tmp_path / 'cache'}"])
    assert code == 0
    again = json.loads((run_dir / "results.json").read_text())
    assert "eval_error" not in again["metrics"] and again["metrics"]["fid"] >= 0
    assert again["privacy"] == first["privacy"] and again["train"] == first["train"]
    assert again["evaluated"]["by"] == "dpgen evaluate"
    assert {p: p.read_bytes() for p in (run_dir / "checkpoints").iterdir()} == ledger_files


def test_dpgen_evaluate_refuses_overrides_that_change_the_model(tmp_path, capsys):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 0\n")
    assert dpgen_main(["evaluate", str(tmp_path), "model.lr=1"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot override model.lr=1")
    assert dpgen_main(["evaluate", str(tmp_path / "nope")]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_the_sweep_report_names_a_job_whose_evaluation_failed(tmp_path, capsys):
    from dpgen.report import collect

    job = tmp_path / "0_accountant.epsilon=1"
    job.mkdir()
    (job / "results.json").write_text(json.dumps({"privacy": {"target_epsilon": 1.0}, "metrics": {
        "acc_logreg": 0.5, "eval_error": "RuntimeError: FID exploded"}}))
    rows = collect(tmp_path)
    assert rows[0]["metrics"]["acc_logreg"] == 0.5
    err = capsys.readouterr().err
    assert f"evaluation failed (RuntimeError: FID exploded); re-evaluate with: dpgen evaluate {job}" in err
