"""SIGINT / SIGTERM end a run within seconds: its checkpoint intact, its results so far written and
labelled incomplete, its folder resumable (docs/guides/runs.md).

Inside :func:`stop_on_signals` the first SIGINT or SIGTERM raises :class:`RunInterrupted` in the main
thread (a ``BaseException``, like ``KeyboardInterrupt``: no ``except Exception`` swallows it), where the
pipeline writes the results so far.  A main thread stuck in one long native call (a classifier fit, a
large matrix product) cannot run Python code: ``grace_s`` after the signal a watchdog thread writes them
instead (``last_words``) and ends the process.  A second signal ends the process at once.  Checkpoints
and results are written atomically (a temporary file, then a rename), so an end at any moment leaves the
previous checkpoint whole.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(BaseException):
    """The run was asked to stop (SIGINT / SIGTERM); ``exit_code`` is the shell's 128 + signal number."""

    def __init__(self, signum: int) -> None:
        self.signum, self.name = int(signum), signal.Signals(signum).name
        self.exit_code = 128 + self.signum
        super().__init__(self.name)


@contextmanager
def stop_on_signals(last_words: Callable[[RunInterrupted], None], grace_s: float = 3.0) -> Iterator[None]:
    """SIGINT / SIGTERM raise :class:`RunInterrupted` in the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    done, asked = threading.Event(), []

    def watchdog(stop: RunInterrupted) -> None:
        if done.wait(grace_s):
            return
        try:
            last_words(stop)
        finally:
            os._exit(stop.exit_code)

    def handler(signum, frame) -> None:
        if asked:  # a second signal: no more waiting
            os._exit(128 + signum)
        stop = RunInterrupted(signum)
        asked.append(stop)
        threading.Thread(target=watchdog, args=(stop,), daemon=True, name="dpgen-stop").start()
        raise stop

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        done.set()
        for s, h in previous.items():
            signal.signal(s, h)
