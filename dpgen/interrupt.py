"""SIGINT / SIGTERM end a run within seconds: its checkpoint intact, its results so far written and
labelled incomplete, its folder resumable (docs/guides/runs.md).

Inside :func:`stop_on_signals` the first SIGINT or SIGTERM raises :class:`RunInterrupted` in the main
thread (a ``BaseException``, like ``KeyboardInterrupt``: no ``except Exception`` swallows it), where the
pipeline writes the results so far.  A main thread stuck in one long native call (a classifier fit, a
large matrix product, a TorchScript forward of the Inception network) cannot run Python code, so its
handler runs only when that call returns.  The signal is therefore also seen by a watchdog thread that
waits, from the moment the block is entered, on the interpreter's wakeup file descriptor
(``signal.set_wakeup_fd``: the C-level handler writes the signal's number to it at once, whatever the main
thread is doing): ``grace_s`` after the first signal, if the main thread has not acted on it, the watchdog
writes the results so far (``last_words``) and ends the process; a second signal ends it at once.  Whichever
path ends the run, ``say`` prints the ``stopped by …`` line first (:func:`stopped_line`).
Checkpoints and results are written atomically (a temporary file, then a rename), so an end at any moment
leaves the previous checkpoint whole.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(BaseException):
    """The run was asked to stop (SIGINT / SIGTERM); ``exit_code`` is the shell's 128 + signal number."""

    def __init__(self, signum: int) -> None:
        self.signum, self.name = int(signum), signal.Signals(signum).name
        self.exit_code = 128 + self.signum
        super().__init__(self.name)


def stopped_line(stop: RunInterrupted, at_once: bool = False) -> str:
    """The console's line when a run stops on a signal (``at_once``: a second signal ended it without waiting)."""
    if at_once:
        return (f"stopped by {stop.name} (a second signal: at once): the checkpoint is intact; results.json holds "
                "the results written before it; run the same command again to continue")
    return (f"stopped by {stop.name}: the checkpoint is intact and results.json holds the results so far (marked "
            "incomplete); run the same command again to continue")


def _quiet(stop: RunInterrupted, at_once: bool) -> None:
    return None


@contextmanager
def stop_on_signals(last_words: Callable[[RunInterrupted], None], grace_s: float = 3.0,
                    say: Callable[[RunInterrupted, bool], None] = _quiet) -> Iterator[None]:
    """SIGINT / SIGTERM raise :class:`RunInterrupted` in the block (main thread only; elsewhere a no-op).
    ``say(stop, at_once)``: prints the stop's line where the process ends without returning (the watchdog after
    the grace, a second signal); the main path's line is the caller's, where it catches :class:`RunInterrupted`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    done, asked, ending = threading.Event(), [], threading.Lock()
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)

    def end(stop: RunInterrupted, at_once: bool) -> None:
        """The process ends here: the results so far (unless ``at_once``), the line, the exit status.  One
        thread does it (a second signal is seen by the handler and the watchdog both); the other waits for the end."""
        ending.acquire()
        try:
            if not at_once:
                last_words(stop)
            say(stop, at_once)
        finally:
            os._exit(stop.exit_code)

    def watchdog() -> None:
        """Reads the signal numbers the C-level handler writes; acts when the main thread cannot."""
        stop, deadline = None, None
        while not done.is_set():
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([wake_r], [], [], timeout)
            if done.is_set():
                return
            if not ready:  # the grace is over and the main thread is still inside one native call
                end(stop, at_once=False)
            for signum in wake_r.recv(64):
                if signum not in SIGNALS:
                    continue
                if stop is not None:  # a second signal: no more waiting
                    end(RunInterrupted(signum), at_once=True)
                stop, deadline = RunInterrupted(signum), time.monotonic() + grace_s

    def handler(signum, frame) -> None:
        if asked:  # a second signal: no more waiting
            end(RunInterrupted(signum), at_once=True)
        stop = RunInterrupted(signum)
        asked.append(stop)
        raise stop

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    previous_fd = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    thread = threading.Thread(target=watchdog, daemon=True, name="dpgen-stop")
    thread.start()
    try:
        yield
    finally:
        done.set()
        signal.set_wakeup_fd(previous_fd)
        for s, h in previous.items():
            signal.signal(s, h)
        try:
            wake_w.send(b"\0")  # wakes the watchdog, which sees `done` and returns
        except OSError:
            pass
        thread.join(timeout=1.0)
        wake_r.close()
        wake_w.close()

