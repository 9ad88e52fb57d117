"""A Hydra callback that lines up the jobs of a multirun at their start, to test that a launcher runs them at once.

``+hydra.callbacks.barrier._target_=tests.helpers.sweep_barrier.Barrier +hydra.callbacks.barrier.jobs=N
+hydra.callbacks.barrier.folder=DIR``: each job, before its task runs, writes ``DIR/<job number>.started`` (its
process id) and waits until ``jobs`` such files exist (at most ``wait_s``), then writes ``DIR/<job number>.met``:
how many jobs had started.  Jobs that run at once all read ``jobs``; jobs run one after another cannot (the
first one waits out ``wait_s`` alone and reads 1).  A count, never a time, is what a test asserts.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from hydra.experimental.callback import Callback


class Barrier(Callback):
    def __init__(self, jobs: int, folder: str, wait_s: float = 120.0) -> None:
        self.jobs, self.folder, self.wait_s = int(jobs), Path(folder), float(wait_s)

    def _started(self) -> int:
        return len(list(self.folder.glob("*.started")))

    def on_job_start(self, config, **kwargs) -> None:  # noqa: ARG002 (Hydra's signature)
        num = config.hydra.job.num
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{num}.started").write_text(str(os.getpid()))
        deadline = time.monotonic() + self.wait_s
        while self._started() < self.jobs and time.monotonic() < deadline:
            time.sleep(0.05)
        (self.folder / f"{num}.met").write_text(str(self._started()))
