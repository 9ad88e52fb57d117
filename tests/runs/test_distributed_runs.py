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
    assert card_a.pop("processes") == {"world_size": 2, "backend": "gloo"} == a["train"]["processes"]
    assert card_b.pop("processes") == {"world_size": 1, "backend": None}
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


def test_every_job_of_a_sweep_on_two_processes_runs(tmp_path):
    """``dpgen train --nproc 2 -m ...``: the jobs run one after the other on both processes, each joining a new
    process group (the earlier jobs' addresses never read again), each a whole run of 2 processes."""
    sweep = tmp_path / "sweep"
    r = dpgen_train(["--nproc", "2", "-m", *SHORT_DPSGD, "trainer.max_steps=2", "evaluator=none",
                     "accountant.epsilon=1,2,3", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    results = [_results(f) for f in sorted(p.parent for p in sweep.glob("*/results.json"))]
    assert len(results) == 3
    assert all("incomplete" not in res and res["train"]["processes"]["world_size"] == 2 for res in results)
    assert [res["privacy"]["target_epsilon"] for res in results] == [1.0, 2.0, 3.0]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the rank's process through /proc")
def test_the_ranks_die_with_their_launcher(tmp_path):
    """kill -9 of ``dpgen train --nproc 2``: its ranks are stopped too (parent-death signal), not left running
    with the run folder's lock."""
    launcher = subprocess.Popen([*DPGEN, "train", "--nproc", "2", *SHORT_DPSGD, "model.epochs=1000",
                                 f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        # the run folder's .hydra/ is written after the processes joined their group (utils.launch.run_dir_overrides)
        while (rank := _rank_pid(launcher.pid, 1)) is None or not (tmp_path / "run" / ".hydra").exists():
            assert time.time() < deadline and launcher.poll() is None, "the run did not start"
            time.sleep(0.5)
        os.kill(launcher.pid, signal.SIGKILL)
        deadline = time.time() + 60
        while Path(f"/proc/{rank}").exists() and Path(f"/proc/{rank}/status").read_text().find("State:\tZ") < 0:
            assert time.time() < deadline, "rank 1 outlived its launcher"
            time.sleep(0.5)
    finally:
        launcher.kill()


GUIDE = ROOT / "docs" / "guides" / "distributed.md"
SHORTEN = ["trainer.max_steps=2", "evaluator=none", "logger=local", "trainer.progress=false"]


def guide_commands() -> list[pytest.param]:
    """Every command of the distributed guide that starts several processes (``dpgen train --nproc``,
    ``torchrun``), from its ``bash`` blocks; one that needs what a CPU machine lacks says so in a ``# needs ...``
    comment on its line or the line above, and is skipped here."""
    commands, block, above = [], False, ""
    for line in GUIDE.read_text().splitlines():
        if line.startswith("```"):
            block, above = line.startswith("```bash"), ""
            continue
        text = line.strip()
        if block and text.startswith(("dpgen train --nproc", "torchrun ")):
            command, _, comment = text.partition(" #")
            needs = next((c for c in (comment, above) if c.lstrip("# ").startswith("needs ")), None)
            marks = [pytest.mark.skip(reason=needs.lstrip("# "))] if needs else []
            commands.append(pytest.param(command.split(), marks=marks, id=command))
        above = text if text.startswith("#") else ""
    return commands


def test_the_guide_shows_commands_of_several_processes():
    assert {" ".join(p.values[0][:2]) for p in guide_commands()} == {"dpgen train", "torchrun --standalone"}


@pytest.mark.parametrize("command", guide_commands())
def test_every_command_of_the_guide_runs_as_written(tmp_path, command):
    """The guide's command, shortened (2 steps, no evaluation), on two CPU processes (gloo): one run folder per
    job, each of two processes; rank 1 leaves nothing behind (no scratch folder, no record of its own)."""
    program = {"dpgen": DPGEN, "torchrun": [sys.executable, "-m", "torch.distributed.run"]}[command[0]]
    args = [str(ROOT / "train.py") if a == "train.py" else a for a in command[1:]]
    (tmp_path / "tmp").mkdir()
    r = subprocess.run([*program, *args, *SHORTEN, "trainer.device=cpu"], cwd=tmp_path,
                       env={**_env(), "TMPDIR": str(tmp_path / "tmp")}, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    sweep = "-m" in command
    values = next((a for a in command if a.startswith("accountant.epsilon=")), "x=1").split("=", 1)[1].split(",")
    results = sorted(tmp_path.rglob("results.json"))
    assert len(results) == (len(values) if sweep else 1), results
    assert all(_results(f.parent)["train"]["processes"]["world_size"] == 2 for f in results)
    assert not list((tmp_path / "tmp").glob("dpgen-rank-*"))  # rank 1's scratch folder (its multirun.yaml) is gone
    assert not list(tmp_path.rglob(".dpgen-probe-*"))
    if sweep:  # Hydra's multirun.yaml, once: rank 0's (rank 1's command line adds hydra.output_subdir=null)
        (record,) = tmp_path.rglob("multirun.yaml")
        assert "hydra.output_subdir=null" not in record.read_text()
