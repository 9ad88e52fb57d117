"""Fault injection on a short private run (DP-SWD on the 8x8 digits, shrunk, ``trainer.deterministic=true``
so that runs are comparable): ``kill -9`` at random steps and the same run again, concurrent starts into one
folder, damaged checkpoints, a failing checkpoint write (disk full).  After every fault the final release,
ε, the training summary and ``metrics.csv`` equal those of an uninterrupted run.

Runs are forked from the test process (``os.fork``: no interpreter start per run), each with its own pid, so
``kill -9`` and the run folder's lock behave as for separate commands.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dpgen.errors import ConfigError
from dpgen.logging.run_logger import LocalSink
from dpgen.pipeline import run
from dpgen.runs import HOLDER_FILE, STATE_DIR, RunFolderBusy
from tests.helpers import ROOT
from tests.helpers.configs import compose_cfg

pytestmark = pytest.mark.filterwarnings("ignore:trainer.deterministic=true")
# 14 private steps (1347 digits, batch 100, one epoch), a checkpoint every 4 steps, a metrics row every step
SHORT = ["experiment=digits_dpswd", "logger=local", "evaluator=none", "trainer.progress=false",
         "trainer.deterministic=true", "trainer.log_every=1", "trainer.checkpoint_every=4", "model.epochs=1",
         "model.batch_size=100", "model.dp.num_projections=20", "model.generator.hidden=20"]
STEPS = 14
TIMING = {"steps_per_s", "train_time_s"}  # wall-clock columns: the only values allowed to differ


def _cfg(out: Path, extra: tuple[str, ...] = ()):
    return compose_cfg([*SHORT, *extra], out_dir=out)


def _spawn(out: Path, extra: tuple[str, ...] = (), before_run=None) -> int:
    """Fork a process that runs the short run into ``out`` (exit 0; 2 + ``out``.err on a user error)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        if before_run is not None:
            before_run()
        run(_cfg(out, extra))
        code = 0
    except ConfigError as err:
        Path(f"{out}.{os.getpid()}.err").write_text(str(err))
        code = 2
    finally:
        os._exit(code)


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _last_step(out: Path, since: float) -> int:
    """The last step logged in ``metrics.csv`` by a process started at ``since`` (-1: none yet)."""
    path = out / "metrics.csv"
    try:
        if path.stat().st_mtime < since:
            return -1
        lines = [line for line in path.read_text().splitlines()[1:] if line]
        return int(lines[-1].split(",")[0]) if lines else -1
    except (OSError, ValueError):
        return -1


def kill_at(out: Path, step: int, rng: random.Random) -> bool:
    """Start the run and ``kill -9`` it once it has logged ``step`` (0: after a random delay in its start-up);
    False when it finished first (no fault injected)."""
    t0 = time.time()
    pid = _spawn(out)
    delay = rng.uniform(0.0, 1.5)
    while True:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
        if (step == 0 and time.time() - t0 >= delay) or (step > 0 and _last_step(out, t0) >= step):
            os.kill(pid, signal.SIGKILL)
            assert _wait(pid) == -signal.SIGKILL
            return True
        time.sleep(0.002)


def outcome(out: Path) -> dict:
    """What must not change: release tensors, ε and the training summary, metrics.csv without timings."""
    res = json.loads((out / "results.json").read_text())
    with open(out / "metrics.csv", newline="") as fh:
        rows = [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(fh)]
    release = _tensors(torch.load(out / "generator.pt", weights_only=False))
    return {"privacy": res["privacy"], "train": {k: v for k, v in res["train"].items() if k not in TIMING},
            "metrics": rows, "release": release}


def assert_same(got: dict, want: dict) -> None:
    assert got["privacy"] == want["privacy"]
    assert got["train"] == want["train"]
    assert [r["step"] for r in got["metrics"]] == [str(s) for s in range(1, STEPS + 1)]  # each step once
    assert got["metrics"] == want["metrics"]
    assert got["release"].keys() == want["release"].keys()
    for k, t in want["release"].items():
        assert torch.equal(got["release"][k], t), k


def _tensors(obj, where: str = "release") -> dict:
    """Every tensor of the release by its path (the released weights; its card records the command line)."""
    if isinstance(obj, torch.Tensor):
        return {where: obj}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else []
    return {k: v for key, child in items for k, v in _tensors(child, f"{where}.{key}").items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, dict]:
    """An uninterrupted run, in the test process (which warms the imports the forked runs then share)."""
    out = tmp_path_factory.mktemp("faults") / "reference"
    run(_cfg(out))
    return out, outcome(out)


def kill_and_rerun(out: Path, kills: int, rng: random.Random) -> int:
    """``kills`` kill -9 at increasing random steps, each followed by the same run again (which takes over
    the killed run's lock); then the same run to its end.  Returns the number of faults injected."""
    injected, step = 0, 0
    for _ in range(kills):
        step = rng.randint(step, STEPS - 1)
        if kill_at(out, step, rng):
            injected += 1
            if step > 0:  # killed while training: its holder record stays behind (the lock itself is free)
                assert (out / STATE_DIR / HOLDER_FILE).exists()
    assert _wait(_spawn(out)) == 0
    assert not (out / STATE_DIR / HOLDER_FILE).exists()  # released on a normal end
    return injected


def test_kill_9_at_random_steps_then_the_same_run_equals_an_uninterrupted_run(reference, tmp_path):
    _, want = reference
    rng = random.Random(2)
    for trial in range(2):
        out = tmp_path / f"trial{trial}"
        assert kill_and_rerun(out, 1 + trial, rng) >= 1
        assert_same(outcome(out), want)


def test_kill_9_in_the_middle_of_a_checkpoint_write_keeps_the_previous_checkpoint(reference, tmp_path):
    """The second checkpoint write dies half-way (SIGKILL inside torch.save): the rerun resumes from step 4."""
    real_save = torch.save

    def dying_save(obj, fh, *a, **kw):
        if isinstance(obj, dict) and obj.get("step") == 8:
            fh.write(b"PK\x03\x04 half a checkpoint")
            fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return real_save(obj, fh, *a, **kw)

    out = tmp_path / "run"
    assert _wait(_spawn(out, before_run=lambda: setattr(torch, "save", dying_save))) == -signal.SIGKILL
    assert list((out / "checkpoints").glob("*.tmp"))  # the half-written temporary file
    assert torch.load(out / "checkpoints" / "last.pt", weights_only=False)["step"] == 4
    assert _wait(_spawn(out)) == 0
    assert not list((out / "checkpoints").glob("*.tmp"))
    assert_same(outcome(out), reference[1])


def test_concurrent_starts_into_one_folder_exactly_one_wins(reference, tmp_path):
    out = tmp_path / "run"
    pids = [_spawn(out), _spawn(out)]
    codes = sorted(_wait(p) for p in pids)
    assert codes == [0, 2]
    (err,) = [Path(f"{out}.{p}.err") for p in pids if Path(f"{out}.{p}.err").exists()]
    message = err.read_text()
    winner = next(p for p in pids if not Path(f"{out}.{p}.err").exists())
    assert message.startswith(f"run folder {out} is in use by another run (pid {winner} on ")
    assert "hydra.run.dir=<new folder>" in message
    assert_same(outcome(out), reference[1])  # nothing of the refused start in the winner's files


def test_a_live_lock_refuses_in_process_and_names_the_holder(tmp_path):
    from dpgen.runs import claim_run_folder

    cfg = _cfg(tmp_path / "run")
    with claim_run_folder(cfg, log=lambda _: None):
        with pytest.raises(RunFolderBusy, match=f"pid {os.getpid()} on .* started .* UTC"):
            claim_run_folder(cfg, log=lambda _: None)
    claim_run_folder(cfg, log=lambda _: None).release()  # free again after the owner's exit


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_a_damaged_checkpoint_is_one_error_naming_the_file_and_the_fix(reference, tmp_path, damage):
    out = tmp_path / "run"
    shutil.copytree(reference[0], out)
    ck = out / "checkpoints" / "last.pt"
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 2] if damage == "truncated" else bytes(b ^ 0x5A for b in data[:4096]) + data[4096:])
    with pytest.raises(ConfigError) as err:
        run(_cfg(out))
    message = str(err.value)
    assert message.startswith(f"checkpoint {ck} is damaged (cannot be read: ") and "\n" not in message
    # one short line: the file and the fix, not torch's paragraph about the zip archive
    assert len(message) - len(str(ck)) - 2 * len(str(out)) < 350 and "Pytorch" not in message, message
    # a finished run: its release is intact, and the advice never deletes it
    assert f"the run's release generator.pt is intact: `dpgen evaluate {out}`" in message
    assert f"`dpgen sample {out}" in message and "trainer.overwrite=true would delete that release" in message
    assert ck.read_bytes() != data and ck.exists()  # left for the user to inspect, not replaced silently
    (out / "generator.pt").unlink()  # an unfinished run (no release): starting over is the fix
    with pytest.raises(ConfigError, match="start the run folder over with trainer.overwrite=true"):
        run(_cfg(out))
    run(_cfg(out, ("trainer.overwrite=true",)))  # the fix it names
    assert_same(outcome(out), reference[1])


@pytest.mark.parametrize("failing", ["torch.save", "os.replace"])
def test_disk_full_while_checkpointing_keeps_the_previous_checkpoint(reference, tmp_path, monkeypatch, failing):
    """The write of the step-8 checkpoint fails with ENOSPC: one error naming the file; step 4 intact."""
    import dpgen.utils.checkpoint as checkpoint

    out = tmp_path / "run"
    real_save, real_replace = torch.save, os.replace

    def full_save(obj, fh, *a, **kw):
        if isinstance(obj, dict) and obj.get("step") == 8:
            fh.write(b"PK\x03\x04 partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, fh, *a, **kw)

    def full_replace(src, dst):
        if str(dst).endswith("last.pt") and torch.load(src, weights_only=False)["step"] == 8:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_replace(src, dst)

    if failing == "torch.save":
        monkeypatch.setattr(checkpoint.torch, "save", full_save)
    else:
        monkeypatch.setattr(checkpoint.os, "replace", full_replace)
    with pytest.raises(ConfigError) as err:
        run(_cfg(out))
    ck = out / "checkpoints" / "last.pt"
    assert str(err.value).startswith(f"could not write {ck} (No space left on device); the previous version")
    assert torch.load(ck, weights_only=False)["step"] == 4
    assert not list(ck.parent.glob("*.tmp"))
    monkeypatch.undo()
    run(_cfg(out))  # space freed: the same run resumes from step 4
    assert_same(outcome(out), reference[1])


def test_a_folder_holding_a_run_is_resumed_or_refused_never_overwritten(reference, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference[0], out)
    before = (out / "checkpoints" / "last.pt").read_bytes()
    for extra, says in [(("accountant.epsilon=5",), "accountant.epsilon: 10.0 there, 5 now"),
                        (("seed=1",), "seed: 0 there, 1 now"),
                        (("trainer.resume=false",), "trainer.resume=false would overwrite it")]:
        with pytest.raises(ConfigError, match="trainer.overwrite=true") as err:
            run(_cfg(out, extra))
        assert says in str(err.value)
        assert (out / "checkpoints" / "last.pt").read_bytes() == before
    with pytest.raises(ConfigError, match="drop one of them"):
        run(_cfg(out, ("trainer.overwrite=true", "trainer.resume=true")))
    run(_cfg(out, ("trainer.max_steps=30", "trainer.log_every=9")))  # other trainer settings: the same run resumed
    assert_same(outcome(out), reference[1])


def test_metrics_rewind_keeps_each_step_once_and_drops_a_cut_row(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,loss\n1,0.5\n2,0.4\n3,0.3\n4,0.2\n5,0.1")  # row 5 cut by a kill
    sink = LocalSink(tmp_path, append=True)
    sink.rewind(4)
    assert (tmp_path / "metrics.csv").read_text() == "step,loss\n1,0.5\n2,0.4\n3,0.3\n4,0.2\n"
    sink.rewind(2)
    sink.log_metrics({"loss": 0.45}, step=3)
    assert (tmp_path / "metrics.csv").read_text().splitlines() == ["step,loss", "1,0.5", "2,0.4", "3,0.45"]


# ---------------------------------------------------------------------------- slow: many faults
@pytest.mark.slow
def test_kill_9_many_times_never_loses_or_mixes_work(reference, tmp_path):
    """≥ 20 trials of 1-3 kill -9 at random steps, each rerun to its end; prints the figures."""
    _, want = reference
    rng = random.Random(int(os.environ.get("DPGEN_FAULT_SEED", "0")))
    injected = survived = 0
    for trial in range(24):
        out = tmp_path / f"trial{trial}"
        n = kill_and_rerun(out, rng.randint(1, 3), rng)
        assert_same(outcome(out), want)
        injected += n
        survived += n
        shutil.rmtree(out)
    print(f"\nfault injection: {injected} kill -9 injected in 24 runs, {survived} survived, nothing lost")
    assert injected >= 20


@pytest.mark.slow
def test_two_commands_at_once_through_train_py(tmp_path):
    """Real `python train.py` processes into one folder: exactly one runs, the other prints one error line
    and exits 2; the folder's .hydra record (which Hydra writes before the lock is taken) is the winner's,
    also after a later command with other settings is refused."""
    out = tmp_path / "run"
    commands = [[sys.executable, str(ROOT / "train.py"), *SHORT, "model.epochs=3", f"hydra.run.dir={out}", *extra]
                for extra in ([], ["trainer.log_every=2"])]
    env = {**os.environ, "WANDB_MODE": "offline"}
    procs = [subprocess.Popen(c, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in commands]
    results = [(p.wait(timeout=900), p.stderr.read()) for p in procs]
    assert sorted(code for code, _ in results) == [0, 2]
    (lost,) = [err for code, err in results if code == 2]
    last = lost.strip().splitlines()[-1]
    assert last.startswith(f"error: run folder {out} is in use by another run (pid ") and "Traceback" not in lost
    rows = list(csv.DictReader(open(out / "metrics.csv", newline="")))
    assert [int(r["step"]) for r in rows] == sorted({int(r["step"]) for r in rows})  # one run's rows, each once
    winner = next(i for i, (code, _) in enumerate(results) if code == 0)
    assert ("trainer.log_every=2" in (out / ".hydra" / "overrides.yaml").read_text()) == (winner == 1)
    record = (out / ".hydra" / "config.yaml").read_text()
    refused = subprocess.run([*commands[0], "accountant.epsilon=5"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "accountant.epsilon: 10.0 there, 5 now" in refused.stderr
    assert (out / ".hydra" / "config.yaml").read_text() == record  # the refused command's record is not kept


def test_a_run_started_in_the_same_second_as_another_gets_a_folder_of_its_own(tmp_path):
    """Hydra names the run folder from the clock; a folder of that name (another run's, started in the same
    second) is never entered, resumed or overwritten: the new run gets ``<date>_<time>_2``."""
    from datetime import datetime, timedelta

    from tests.helpers.runs import train_here

    now = datetime.now()
    taken = [tmp_path / "outputs" / "collide" / (now + timedelta(seconds=s)).strftime("%Y-%m-%d_%H-%M-%S")
             for s in range(-1, 120)]  # every name the clock can give this run: each holds a finished run
    for folder in taken:
        (folder / "checkpoints").mkdir(parents=True)
        (folder / "checkpoints" / "last.pt").write_bytes(b"another run's checkpoint")
        (folder / "results.json").write_text('{"train": {"train_steps": 3, "steps_planned": 3}}')
    r = train_here(["experiment=digits_moments", "experiment_name=collide", "logger=local", "evaluator=none",
                    "trainer.progress=false"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    for folder in taken:  # untouched: no lock, no record, no log of the new run
        assert sorted(p.name for p in folder.iterdir()) == ["checkpoints", "results.json"]
        assert (folder / "checkpoints" / "last.pt").read_bytes() == b"another run's checkpoint"
    (new,) = [p for p in (tmp_path / "outputs" / "collide").iterdir() if p not in taken]
    assert new.name.endswith("_2") and (new / "results.json").is_file()
