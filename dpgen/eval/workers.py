"""A second process for the evaluation (``evaluator.workers``).

The downstream classifiers are independent fits on the same synthetic set, each in one thread
(``trainer.threads``).  With two cores free, the longest of them (the CNN) runs in a forked worker process
while this process fits the others and measures the FID: the same fits, the same seeds and the same
numbers, in less wall-clock time.

* ``workers: auto`` (the default): 2 when this run has at least two cores to itself (the cores of its
  affinity mask divided by the runs of a Hydra joblib sweep and the processes of a distributed run on
  this node) and the platform forks (Linux); else 1;
* ``workers: 1``: every fit in this process, one after the other;
* ``workers: 2``: the worker process whenever the platform forks.

The worker is forked, so it starts at once with the parent's imports and tensors (nothing is pickled on
the way in); it computes on synthetic samples and the public test split only, and sends back its
metrics through a pipe.

Stops: SIGINT / SIGTERM are blocked while the process forks (a signal then reaches the parent after the
worker exists, as one ``RunInterrupted`` the run handles, never inside the fork); the worker ignores Ctrl-C
(the parent stops it), dies on SIGTERM, and the kernel kills it when the parent dies, even by ``kill -9``
(Linux's parent-death signal): no worker outlives its run.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

from ..utils.threads import available_cores, concurrent_jobs


def can_fork() -> bool:
    """Linux only: elsewhere ``fork`` is unavailable (Windows) or unsafe with system frameworks (macOS)."""
    return sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods()


def resolve_workers(workers: int | str | None, cores: int | None = None, jobs: int | None = None,
                    local_processes: int | None = None) -> int:
    """The number of evaluation processes for ``evaluator.workers`` (see the module docstring): 1 or 2."""
    if workers is None or (isinstance(workers, str) and workers.strip().lower() == "auto"):
        if not can_fork():
            return 1
        from ..utils.dist import local_world_size

        cores = available_cores() if cores is None else cores
        jobs = concurrent_jobs() if jobs is None else jobs
        local = local_world_size() if local_processes is None else local_processes
        return 2 if cores // max(1, jobs * local) >= 2 else 1
    try:
        n = int(workers)
    except (TypeError, ValueError):
        n = 0
    if n not in (1, 2) or (isinstance(workers, float) and workers != n):
        raise ValueError(f"evaluator.workers={workers!r}: use 1 (every fit in this process), 2 (the CNN in a "
                         "second process) or auto")
    return n if can_fork() else 1


class Forked:
    """``fn(*args, **kwargs)`` started in a forked process; :meth:`result` waits for its return value (or
    raises the exception it raised).  ``fn``'s result must be picklable (a dict of floats here)."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        ctx = mp.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_child, args=(send, fn, args, kwargs, os.getpid()), name="dpgen-eval-worker",
                                 daemon=True)
        held = _hold_stops()  # no stop signal handled inside the fork
        try:
            with warnings.catch_warnings():
                # Python >= 3.12 warns on every fork of a process with threads (here: W&B's and rich's); the child
                # runs torch on its own tensors only and touches none of what those threads hold
                warnings.filterwarnings("ignore", message=r".*fork\(\) may lead to deadlocks", category=DeprecationWarning)
                self._proc.start()
        finally:
            send.close()
            try:
                _release_stops(held)  # a signal that came meanwhile is raised here, once
            except BaseException:  # the run stops: so does the worker
                self.close()
                raise

    def result(self) -> Any:
        try:
            ok, value = self._recv.recv()
        except EOFError:
            self._proc.join()
            raise RuntimeError(f"the evaluation worker process ended without a result (exit code "
                               f"{self._proc.exitcode}); evaluator.workers=1 runs every fit in this process") from None
        finally:
            self._recv.close()
        self._proc.join()
        if not ok:
            raise value
        return value


    def close(self) -> None:
        """Stop the worker if it still runs (this process failed before it asked for the result)."""
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join()



def _hold_stops() -> tuple:
    """Hold SIGINT / SIGTERM: blocked in this thread, and recorded (not handled) if another thread of the process
    takes them (a process-directed signal goes to any thread that does not block it: W&B's, torch's)."""
    if threading.current_thread() is not threading.main_thread():
        return (None, {}, [])
    came: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: came.append(signum)) for s in STOPS}
    return (signal.pthread_sigmask(signal.SIG_BLOCK, STOPS), previous, came)


def _release_stops(held: tuple) -> None:
    """Undo :func:`_hold_stops`; the first stop signal that came meanwhile is then raised here, once."""
    mask, previous, came = held
    if mask is None:
        return
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # one pending in this thread is recorded now
    for s, h in previous.items():
        signal.signal(s, h)
    if came:
        signal.raise_signal(came[0])  # the run's own handler, in this (the main) thread

STOPS = {signal.SIGINT, signal.SIGTERM}
PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_parent(parent: int) -> None:
    """Ask the kernel for SIGKILL when the parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``); exit at once if the
    parent is already gone (it died between the fork and this call)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the parent's close() and the daemon flag remain
        pass
    if os.getppid() != parent:
        os._exit(1)


def _child(send, fn, args, kwargs, parent: int) -> None:
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent stops this worker
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a SIGTERM ends it, silently
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
    try:
        out = (True, fn(*args, **kwargs))
    except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
        out = (False, e)
    try:
        send.send(out)
    except Exception as e:  # noqa: BLE001 - an exception that does not pickle: its text does
        send.send((False, RuntimeError(f"{type(out[1]).__name__}: {out[1]}" if not out[0] else str(e))))
    finally:
        send.close()
