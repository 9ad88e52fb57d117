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


# ------------------------------------------------------------------ the stop's line, whichever path ends the run
# Deterministic: no test waits for "long enough". The watchdog's case blocks the signals in the main thread and
# sends SIGTERM only once /proc shows the main thread inside its native call (so the kernel hands the signal to
# another thread and the main thread cannot act on it); the second signal is raised synchronously.
WATCHDOG = """
import ctypes, os, platform, signal, sys, threading, time
from dpgen.interrupt import stop_on_signals, stopped_line

READ = {"x86_64": 0, "aarch64": 63}[platform.machine()]  # the read(2) system call's number
r, w = os.pipe()
main = threading.get_native_id()

def say(stop, at_once):
    print(stopped_line(stop, at_once), file=sys.stderr, flush=True)

def last_words(stop):
    print("results so far written", stop.name, file=sys.stderr, flush=True)

def signal_once_inside_the_native_call():
    while True:
        fields = open(f"/proc/self/task/{main}/syscall").read().split()
        if len(fields) > 1 and fields[0] == str(READ) and int(fields[1], 16) == r:
            break
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)

with stop_on_signals(last_words, grace_s=0.2, say=say):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # the watchdog (started) still gets them
    threading.Thread(target=signal_once_inside_the_native_call, daemon=True).start()
    ctypes.CDLL(None).read(r, ctypes.create_string_buffer(1), 1)  # one native call that never returns
print("the native call returned", file=sys.stderr)
"""

SECOND_SIGNAL = """
import signal, sys
from dpgen.interrupt import RunInterrupted, stop_on_signals, stopped_line

def say(stop, at_once):
    print(stopped_line(stop, at_once), file=sys.stderr, flush=True)

with stop_on_signals(lambda stop: print("results so far written", file=sys.stderr), grace_s=600, say=say):
    try:
        signal.raise_signal(signal.SIGTERM)  # the handler runs before raise_signal returns
    except RunInterrupted:
        signal.raise_signal(signal.SIGINT)  # while the first stop is being handled: the end, at once
print("not reached", file=sys.stderr)
"""


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.uname().machine not in ("x86_64", "aarch64"),
                    reason="reads the main thread's system call from /proc (Linux, x86-64 / arm64)")
def test_the_watchdog_that_ends_a_run_stuck_in_a_native_call_says_stopped_by():
    r = _python(WATCHDOG)
    assert r.returncode == 128 + signal.SIGTERM, r.stderr[-3000:]
    lines = r.stderr.splitlines()
    assert lines[0] == "results so far written SIGTERM", r.stderr[-3000:]
    assert lines[1:] == ["stopped by SIGTERM: the checkpoint is intact and results.json holds the results so far "
                         "(marked incomplete); run the same command again to continue"], r.stderr[-3000:]


def test_a_second_signal_ends_the_run_at_once_and_says_so_once():
    r = _python(SECOND_SIGNAL)
    assert r.returncode == 128 + signal.SIGINT, r.stderr[-3000:]
    stopped = [line for line in r.stderr.splitlines() if line.startswith("stopped by")]
    assert stopped == ["stopped by SIGINT (a second signal: at once): the checkpoint is intact; results.json holds the "
                       "results written before it; run the same command again to continue"], r.stderr[-3000:]
    assert "results so far written" not in r.stderr and "not reached" not in r.stderr
