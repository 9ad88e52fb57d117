"""What a user sees when a run cannot start: ONE `error:` line naming the setting or file and the fix,
exit code 2, no traceback, no leftover run folder (docs/guides/troubleshooting.md lists them all).

One fault goes through ``python train.py`` in a fresh process (a setting's error); the others through the same
entry point in this process (``train_here``), which prints and exits the same way."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from dpgen.preflight import unknown_key_hints
from tests.helpers.runs import train, train_here

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def assert_user_error(r, run_dir: Path, *fragments: str) -> str:
    """Exit 2, exactly one stderr line starting with `error:` (containing ``fragments``), no traceback,
    no run folder left behind; returns the error line."""
    lines = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2, r.stderr[-3000:]
    assert len(lines) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "Error executing job" not in r.stderr, r.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not run_dir.exists(), sorted(p.name for p in run_dir.iterdir())
    return lines[0]


def test_config_error_prints_the_message_without_traceback_and_leaves_no_run_folder(tmp_path):
    run_dir = tmp_path / "run"
    r = train(["accountant.epsilon=-1", "logger=local", f"hydra.run.dir={run_dir}"])
    assert_user_error(r, run_dir, "error: accountant.epsilon must be a positive")
    assert "ConfigError" not in r.stderr


def test_missing_dataset_is_one_line_listing_the_expected_files(tmp_path):
    r = train_here(["experiment=mnist_dpswd", "logger=local", f"paths.data_root={tmp_path}",
               f"hydra.run.dir={tmp_path / 'run'}"])
    line = assert_user_error(r, tmp_path / "run", str(tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte"),
                             "dataset.download=true")
    assert "\\n" not in r.stderr and all(name in line for name in MNIST_FILES)


def test_typo_in_a_key_suggests_the_setting():
    hints = unknown_key_hints(["experiment=digits_dpswd", "accountant.epsiln=1", "trainer.max_steps=3"])
    assert hints == ["'accountant.epsiln' is not a setting; did you mean 'accountant.epsilon'?"]
    assert unknown_key_hints(["accountant.epsilon=1,10", "-m", "+new.key=1", "hydra/launcher=joblib"]) == []
    far = unknown_key_hints(["model.zzzz=1"])[0]
    assert "model has:" in far and "_target_" in far  # the keys of the composed default model


def test_a_misspelt_group_suggests_the_group_not_a_key_that_looks_alike():
    assert unknown_key_hints(["experimnt=digits_dpswd"]) == [
        "'experimnt' is not a setting; did you mean experiment=digits_dpswd?"]  # not 'experiment_name'
    assert unknown_key_hints(["experiment_nam=x"]) == ["'experiment_nam' is not a setting; did you mean "
                                                       "'experiment_name'?"]


def test_typo_through_train_py_is_one_error_line_with_did_you_mean(tmp_path):
    r = train_here(["trainer.max_step=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert_user_error(r, tmp_path / "run", "did you mean 'trainer.max_steps'?")


def test_plus_key_typo_is_one_error_line_with_did_you_mean(tmp_path):
    r = train_here(["experiment=digits_dpswd", "+accountant.epsilonn=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert_user_error(r, tmp_path / "run", "'+accountant.epsilonn'", "did you mean accountant.epsilon=3?")


def test_plus_key_that_resembles_nothing_is_refused_by_the_schema(tmp_path):
    r = train_here(["experiment=digits_dpswd", "logger=local", "+accountant.qqqq=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert_user_error(r, tmp_path / "run", "accountant.qqqq is not a setting", "accountant has:")


def test_unknown_preset_lists_close_names(tmp_path):
    r = train_here(["experiment=celeba_dpwsd", f"hydra.run.dir={tmp_path / 'run'}"])
    assert_user_error(r, tmp_path / "run", "experiment=celeba_dpwsd", "did you mean experiment=celeba_dpswd",
                      "dpgen presets")


def test_unwritable_output_folder_is_refused_before_hydra_creates_it(tmp_path):
    (tmp_path / "a_file").write_text("x")
    r = train_here(["experiment=digits_dpswd", f"hydra.run.dir={tmp_path / 'a_file' / 'run'}"])
    assert_user_error(r, tmp_path / "a_file" / "run", "is a file, not a folder", "hydra.run.dir=")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_read_only_output_folder_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    r = train_here(["experiment=digits_dpswd", f"hydra.run.dir={locked / 'run'}"])
    assert_user_error(r, locked / "run", "cannot write", "hydra.run.dir=")


def test_wandb_online_without_login_fails_before_training(tmp_path):
    home = tmp_path / "home"  # a user without W&B credentials (no netrc, no key)
    env = {"HOME": str(home), "WANDB_CONFIG_DIR": str(home / "wandb"), "NETRC": str(home / "netrc"),
           "WANDB_API_KEY": "", "WANDB_MODE": "online"}  # the environment wins over the config's offline
    run_dir = tmp_path / "run"
    r = train_here(["experiment=digits_dpswd", "logger=wandb", f"hydra.run.dir={run_dir}"], env_extra=env)
    assert_user_error(r, run_dir, "not logged in", "wandb login", "WANDB_MODE=offline", "logger=local")


def test_delta_not_below_one_over_n_is_refused_before_loading(tmp_path):
    # no MNIST under this data root: the δ error comes first, so nothing was loaded
    r = train_here(["experiment=mnist_dpswd", "accountant.delta=1e-4", f"paths.data_root={tmp_path}",
               f"hydra.run.dir={tmp_path / 'run'}"])
    assert_user_error(r, tmp_path / "run", "accountant.delta: delta=0.0001", "N = at most 60000", "fix: delta=1e-05")


@pytest.mark.usefixtures("data_root")
def test_truncated_mnist_file_is_named_with_the_fix(tmp_path, data_root):
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in MNIST_FILES:
        (raw / name).symlink_to(data_root / "MNIST" / "raw" / name)
    (raw / "t10k-labels-idx1-ubyte").unlink()
    (raw / "t10k-labels-idx1-ubyte").write_bytes((data_root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").read_bytes()[:5000])
    r = train_here(["experiment=mnist_dpswd", "logger=local", f"paths.data_root={tmp_path / 'data'}",
               f"hydra.run.dir={tmp_path / 'run'}"], env_extra={"DPGEN_CACHE_DIR": str(tmp_path / "cache")})
    assert_user_error(r, tmp_path / "run", f"the file {raw / 't10k-labels-idx1-ubyte'} is damaged",
                      "5000 bytes, the published file has 10008", "fix: delete it")


@pytest.mark.slow  # long: `make test-all` runs it
def test_run_folder_has_no_empty_train_log_and_a_resume_sums_the_runtime(tmp_path):
    out = tmp_path / "run"
    common = ["experiment=digits_dpswd", "logger=local", "evaluator=none", "trainer.progress=false",
              "trainer.checkpoint_every=2", f"hydra.run.dir={out}"]
    r1 = train([*common, "trainer.max_steps=4"])
    assert r1.returncode == 0, r1.stderr[-2000:]
    assert not (out / "train.log").exists()
    first = json.loads((out / "private_timings.json").read_text())["runtime_s"]
    r2 = train([*common, "trainer.max_steps=8", "trainer.resume=true"])
    assert r2.returncode == 0, r2.stderr[-2000:]
    timings = json.loads((out / "private_timings.json").read_text())
    assert len(timings["segments_s"]) == 2 and timings["segments_s"][0] == first
    assert timings["runtime_s"] == sum(timings["segments_s"]) and timings["train.train_time_s"] > 0
    # timings depend on the private (Poisson) batch sizes: never in the published files
    res = json.loads((out / "results.json").read_text())
    assert not {"runtime_s", "runtime_segments_s"} & set(res) and "train_time_s" not in res["train"]
    assert "time" not in json.dumps(res["summary"]["provenance"])
    with open(out / "metrics.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert "steps_per_s" not in rows[0] and len(rows) >= 2  # rows of both segments appended
    # the one ε shown is the calibrating accountant's (PLD), as in results.json
    assert res["privacy"]["calibrating_accountant"] == "pld" and "epsilon_rdp" not in rows[0]
    assert float(rows[-1]["epsilon"]) == pytest.approx(res["privacy"]["epsilon"])
    assert res["privacy"]["epsilon"] == res["privacy"]["epsilon_pld"] < res["privacy"]["epsilon_rdp"]
