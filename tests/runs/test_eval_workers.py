"""The evaluation's second process (evaluator.workers): the same numbers as one process, faults come back."""

from __future__ import annotations

import os
import time

import pytest
import torch

from dpgen.data.base import DataSplits, TensorSplit
from dpgen.eval import GenerativeEvaluator
from dpgen.eval.workers import Forked, can_fork, resolve_workers

needs_fork = pytest.mark.skipif(not can_fork(), reason="the worker process is forked (Linux only)")


class _Blobs:
    """A 'method' whose samples are class-dependent blobs on 8x8 images (learnable in a few steps)."""

    def sample(self, n, labels):
        g = torch.Generator().manual_seed(int(n))
        x = 0.2 * torch.rand(n, 1, 8, 8, generator=g)
        rows, cols = labels // 4, labels % 4
        for i in range(n):
            x[i, 0, 2 * rows[i]:2 * rows[i] + 2, 2 * cols[i]:2 * cols[i] + 2] += 0.8
        return x.clamp(0, 1), labels


def _data() -> DataSplits:
    y = torch.arange(200) % 10
    x, _ = _Blobs().sample(200, y)
    return DataSplits(name="blobs", private=TensorSplit(x[:0], y[:0]), test=TensorSplit(x, y), public=None,
                      num_classes=10, image_shape=(1, 8, 8))


class _Logger:
    opened = 0

    def log_images(self, *args, **kwargs):
        pass

    def open_after_training(self):
        self.opened += 1


def _evaluate(workers) -> dict:
    ev = GenerativeEvaluator(n_synthetic=300, classifiers=("logreg", "cnn"), grid_per_class=2, class_grids=False,
                             cnn={"epochs": 2, "batch_size": 64, "patience": 5}, workers=workers, device="cpu")
    return ev(_Blobs(), _data(), _Logger(), seed=0)


@needs_fork
def test_the_cnn_in_a_second_process_gives_the_same_accuracy_as_in_this_one():
    one, two = _evaluate(1), _evaluate(2)
    assert two["acc_cnn"] == one["acc_cnn"] and two["acc_logreg"] == one["acc_logreg"]
    assert one["acc_logreg"] > 0.5  # the blobs are learnable: the numbers compared are not both chance
    assert list(two) == list(one)  # the same metrics, in the same order


@needs_fork
def test_a_fault_in_the_worker_is_raised_here_and_a_dead_worker_is_named():
    def fails():
        raise ValueError("evaluator.cnn.epochs must be >= 1")

    with pytest.raises(ValueError, match="epochs must be"):
        Forked(fails).result()
    with pytest.raises(RuntimeError, match=r"worker process ended without a result.*evaluator\.workers=1"):
        Forked(os._exit, 3).result()
    assert Forked(sum, [1, 2, 3]).result() == 6


def test_workers_auto_takes_a_second_process_only_with_two_cores_to_itself():
    two = 2 if can_fork() else 1
    assert resolve_workers("auto", cores=2, jobs=1, local_processes=1) == two
    assert resolve_workers("auto", cores=1, jobs=1, local_processes=1) == 1
    assert resolve_workers("auto", cores=4, jobs=4, local_processes=1) == 1  # a joblib sweep of 4 runs
    assert resolve_workers("auto", cores=4, jobs=1, local_processes=4) == 1  # 4 ranks on this node
    assert resolve_workers(1) == 1 and resolve_workers(2) == two
    with pytest.raises(ValueError, match=r"evaluator\.workers=3: use 1 .* or auto"):
        resolve_workers(3)


def _stops_as_the_worker_sees_them():
    import signal

    return (signal.getsignal(signal.SIGINT) == signal.SIG_IGN, signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            not {signal.SIGINT, signal.SIGTERM} & signal.pthread_sigmask(signal.SIG_BLOCK, set()))


@needs_fork
@pytest.mark.parametrize("other_thread", [False, True])
def test_a_stop_signal_during_the_fork_reaches_the_parent_once_and_ends_the_worker(monkeypatch, other_thread):
    """The signal is held while the process forks, then raised in the parent (never inside the fork's
    machinery, where it printed "Exception ignored"); the worker it started is stopped with it.  Also when
    another thread (W&B's, torch's) takes the signal: blocking it in this thread alone does not hold it then.

    Deterministic on a busy machine: the signal is sent to a chosen thread, never "to the process, delivered some
    time": to this (the main) thread, where it waits, blocked, until the fork is over; or by another thread to
    itself, whose handler has run before that thread says it sent it (a signal a thread sends itself is delivered
    before ``pthread_kill`` returns), so the main thread records it while it is held."""
    import signal
    import threading

    go, sent = threading.Event(), threading.Event()

    def send_to_itself() -> None:
        go.wait()
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # handled in this thread before the call returns
        sent.set()

    if other_thread:
        threading.Thread(target=send_to_itself, daemon=True).start()  # started before the hold: SIGTERM unblocked

    import dpgen.eval.workers as workers

    class Stop(BaseException):
        pass

    stops = []

    def handler(signum, frame):
        stops.append(signum)
        raise Stop

    started = []
    real_start = workers.mp.get_context("fork").Process.start

    def start(proc):
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # held in this thread
        if other_thread:
            go.set()
            assert sent.wait(120)  # a hang guard: the other thread's handler has run when it is set
        else:
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)  # pending here until released
        started.append(proc)
        real_start(proc)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        monkeypatch.setattr(workers.mp.get_context("fork").Process, "start", start)
        with pytest.raises(Stop):
            Forked(time.sleep, 60)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stops == [signal.SIGTERM]  # raised once, in the parent
    (proc,) = started
    assert not proc.is_alive() and proc.exitcode is not None
    monkeypatch.undo()
    assert Forked(_stops_as_the_worker_sees_them).result() == (True, True, True)  # Ctrl-C ignored, SIGTERM ends it


@needs_fork
def test_the_worker_dies_with_its_parent_even_on_kill_9(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from tests.helpers import ROOT

    code = ("import time, sys; from dpgen.eval.workers import Forked; w = Forked(time.sleep, 120); "
            "print(w._proc.pid, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    worker = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    def alive(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/status") as fh:
                return "zombie" not in fh.read()
        except FileNotFoundError:
            return False

    for _ in range(200):  # the kernel's parent-death signal: gone at once (polled, not timed)
        if not alive(worker):
            break
        time.sleep(0.05)
    assert not alive(worker)
