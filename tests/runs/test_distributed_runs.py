"""``dpgen train --nproc 2`` (torchrun, gloo) as a user runs it: one run folder, the single-process epsilon,
a killed rank's one error line, and a resume of its folder on one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.helpers.runs import FAST, train

pytestmark = pytest.mark.slow  # each starts 2 + 1 Python processes of a whole run

DPGEN = [sys.executable, "-c", "import sys; from dpgen.cli import main; sys.exit(main())"]
TRAINER = [a for a in FAST if a.startswith("trainer.")]  # the classifier evaluator has no generative settings
SHORT_DPSGD = ["experiment=digits_dpsgd", "model.epochs=1", "model.batch_size=128", "logger=local",
               "trainer.deterministic=true", *TRAINER]


def _env() -> dict:
    return {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT)}


def dpgen_train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*DPGEN, "train", *args], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=900)


def _results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


@pytest.mark.parametrize("preset", [SHORT_DPSGD, ["experiment=digits_moments", "logger=local", "trainer.deterministic=true",
                                                  *FAST]], ids=["dpsgd", "class_gaussian"])
def test_two_processes_write_one_folder_with_the_single_process_epsilon(tmp_path, preset):
    two = dpgen_train(["--nproc", "2", *preset], cwd=tmp_path)  # Hydra's default run folder, from rank 0's clock
    assert two.returncode == 0, two.stderr[-3000:]
    folders = [p for p in (tmp_path / "outputs").glob("*/*") if p.is_dir()]
    assert len(folders) == 1, folders  # one run folder, not one per rank
    one = train([*preset, f"hydra.run.dir={tmp_path / 'one'}"])
    assert one.returncode == 0, one.stderr[-3000:]
    a, b = _results(folders[0]), _results(tmp_path / "one")
    assert a["privacy"]["epsilon"] == pytest.approx(b["privacy"]["epsilon"], rel=1e-9)
    assert a["privacy"]["delta"] == b["privacy"]["delta"]
    assert a["train"]["train_steps"] == b["train"]["train_steps"]
    assert a["train"]["mechanisms"] == b["train"]["mechanisms"]  # sigma, sensitivity, q, releases
    card_a, card_b = (json.loads((f / "privacy_card.json").read_text()) for f in (folders[0], tmp_path / "one"))
    assert card_a == card_b


def _rank_pid(root: int, rank: int) -> int | None:
    """The pid of the process of ``rank`` below ``root`` (Linux /proc)."""
    kids: dict[int, list[int]] = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = int(next(line for line in status.read_text().splitlines() if line.startswith("PPid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(status.parent.name))
    todo = list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and b"WORLD_SIZE=2" in env:
            return pid
        todo += kids.get(pid, [])
    return None


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the rank's process through /proc")
@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_a_killed_or_hung_rank_ends_the_run_with_one_error_line_and_a_folder_that_resumes_on_one_process(tmp_path,
                                                                                                     fault):
    run = tmp_path / "run"
    args = ["experiment=digits_dpsgd", "model.epochs=10", "model.batch_size=64", "logger=local", *TRAINER,
            "trainer.max_steps=null", "trainer.checkpoint_every=2", f"hydra.run.dir={run}"]
    env = {**_env(), "DPGEN_DIST_TIMEOUT": "20"}  # a hung rank is given up after 20 s
    proc = subprocess.Popen([*DPGEN, "train", "--nproc", "2", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    checkpoint = run / "checkpoints" / "last.pt"
    deadline = time.time() + 600
    while not checkpoint.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    pid = _rank_pid(proc.pid, 1)
    assert checkpoint.exists() and pid is not None, "the run never checkpointed"
    os.kill(pid, signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
    _, err = proc.communicate(timeout=300)  # bounded: torchrun ends the other rank (the hung one after the timeout)
    assert proc.returncode != 0
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err[-3000:]
    assert "trainer.resume=true" in errors[0]
    assert "Traceback" not in err, err[-3000:]
    # the folder resumes on ONE process (the checkpoint holds the single-process state) and finishes
    resumed = train([*args, "trainer.resume=true"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    res = _results(run)
    assert res["train"]["train_steps"] == res["train"]["steps_planned"]
