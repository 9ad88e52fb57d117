"""SIGINT / SIGTERM during training or evaluation end the run within seconds: the checkpoint intact, the results
so far in results.json marked incomplete, exit code 128 + signal, and the folder continued by the same command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpgen.runs import read_checkpoint
from tests.helpers import ROOT

RUN = ["experiment=digits_dpswd", "logger=local", "trainer.log_every=1", "trainer.checkpoint_every=5",
       "trainer.progress=false"]


def start(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 600.0) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "the run never got there"
        time.sleep(0.2)


def logged_steps(run_dir: Path) -> int:
    path = run_dir / "metrics.csv"
    return max(0, len(path.read_text().splitlines()) - 1) if path.is_file() else 0


def stop(proc: subprocess.Popen, signum: int) -> tuple[int, str]:
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)  # acted on at once: the run's own step ends, then it stops
    return proc.returncode, err


def test_sigterm_during_training_keeps_the_checkpoint_and_writes_incomplete_results(tmp_path):
    run_dir = tmp_path / "run"
    proc = start([*RUN, "evaluator=none", "trainer.max_steps=400", f"hydra.run.dir={run_dir}"])
    wait_for(lambda: logged_steps(run_dir) >= 6, proc)
    code, err = stop(proc, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM and "Traceback" not in err, err[-3000:]
    assert "stopped by SIGTERM: the checkpoint is intact" in err
    results = json.loads((run_dir / "results.json").read_text())
    assert results["incomplete"]["stopped_by"] == "SIGTERM" and results["incomplete"]["during"] == "training"
    assert results["privacy"]["private_steps"] >= 6 and results["metrics"] == {}
    assert read_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] >= 5  # whole and loadable
    assert not list(run_dir.glob("**/*.tmp"))


@pytest.mark.slow  # two runs of the real preset with an evaluation
def test_sigint_during_evaluation_then_the_same_command_completes_the_run(tmp_path):
    run_dir = tmp_path / "run"
    args = [*RUN, "trainer.max_steps=6", "evaluator.n_synthetic=60000", "evaluator.classifiers=[mlp]",
            "evaluator.fid.enabled=false", f"hydra.run.dir={run_dir}"]
    proc = start(args)
    wait_for(lambda: (run_dir / "samples.png").is_file(), proc)  # the evaluation has begun
    code, err = stop(proc, signal.SIGINT)
    assert code == 128 + signal.SIGINT, err[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["incomplete"]["during"] == "evaluation" and results["privacy"]["private_steps"] == 6
    again = start([*args, "evaluator.n_synthetic=300", "evaluator.classifiers=[logreg]"])
    out, err = again.communicate(timeout=900)
    assert again.returncode == 0, err[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert "incomplete" not in results and results["metrics"]["acc_logreg"] > 0
