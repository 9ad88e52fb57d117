"""What a user sees when a run cannot start: one clean message, exit code, no leftover run folder."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.test_pipeline_e2e import train

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("dpgen_train_cli", ROOT / "train.py")
cli = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cli)


def test_config_error_prints_the_message_without_traceback_and_leaves_no_run_folder(tmp_path):
    run_dir = tmp_path / "run"
    r = train(["accountant.epsilon=-1", "logger=local", f"hydra.run.dir={run_dir}"])
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: accountant.epsilon must be a positive")
    assert "Traceback" not in r.stderr and "ConfigError" not in r.stderr
    assert not run_dir.exists()


def test_missing_dataset_message_has_real_line_breaks(tmp_path):
    r = train(["experiment=mnist_dpswd", "logger=local", f"paths.data_root={tmp_path}",
               f"hydra.run.dir={tmp_path / 'run'}"])
    assert r.returncode == 2
    assert "\\n" not in r.stderr and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert any(line.strip() == f"- {tmp_path / 'MNIST' / 'raw' / 'train-images-idx3-ubyte'}" for line in lines)
    assert not (tmp_path / "run").exists()


def test_typo_in_a_key_suggests_the_setting():
    hints = cli.unknown_key_hints(["experiment=digits_dpswd", "accountant.epsiln=1", "trainer.max_steps=3"])
    assert hints[0] == "dpgen: 'accountant.epsiln' is not a setting; did you mean 'accountant.epsilon'?"
    assert len(hints) == 2  # the valid trainer.max_steps gets no hint; one closing note
    assert cli.unknown_key_hints(["accountant.epsilon=1,10", "-m", "+new.key=1", "hydra/launcher=joblib"]) == []
    far = cli.unknown_key_hints(["model.zzzz=1"])[0]
    assert "model has:" in far and "_target_" in far  # the keys of the composed default model


def test_typo_through_train_py_prints_did_you_mean(tmp_path):
    r = train(["trainer.max_step=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert r.returncode == 1 and "did you mean 'trainer.max_steps'?" in r.stderr


def test_run_folder_has_no_empty_train_log_and_a_resume_sums_the_runtime(tmp_path):
    out = tmp_path / "run"
    common = ["experiment=digits_dpswd", "logger=local", "evaluator=none", "trainer.progress=false",
              "trainer.checkpoint_every=2", f"hydra.run.dir={out}"]
    r1 = train([*common, "trainer.max_steps=4"])
    assert r1.returncode == 0, r1.stderr[-2000:]
    assert not (out / "train.log").exists()
    first = json.loads((out / "results.json").read_text())["runtime_s"]
    r2 = train([*common, "trainer.max_steps=8", "trainer.resume=true"])
    assert r2.returncode == 0, r2.stderr[-2000:]
    res = json.loads((out / "results.json").read_text())
    assert len(res["runtime_segments_s"]) == 2 and res["runtime_segments_s"][0] == first
    assert res["runtime_s"] == sum(res["runtime_segments_s"])
    rows = (out / "metrics.csv").read_text().splitlines()
    assert rows[0].startswith("step,") and len(rows) >= 3  # one header, rows of both segments appended
