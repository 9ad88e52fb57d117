"""``python train.py ...`` as a user runs it, in a subprocess (``train``) or in this process (``train_here``),
and the overrides that make it short."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

from tests.helpers import ROOT

# the real preset, cut: 20 steps, a small synthetic set, two quick classifiers, a small FID with a
# briefly trained domain extractor (the evaluator's full settings run in `make test-all`)
FAST = ["trainer.max_steps=20", "trainer.log_every=10", "trainer.progress=false", "evaluator.n_synthetic=600",
        "evaluator.mlp_max_iter=30", "evaluator.logreg_max_iter=200", "evaluator.classifiers=[logreg,mlp]",
        "evaluator.fid.n_fid=300", "evaluator.fid.domain.min_steps=30", "evaluator.fid.domain.epochs=1"]


def train(args: list[str], cwd: Path = ROOT, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "1",
           **(env_extra or {})}
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def train_here(args: list[str], cwd: Path | None = None, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    """``train.py args`` in this process: :func:`dpgen.app.run_app`, what ``train.py`` calls, with its stdout,
    stderr and exit code.  For runs where a fresh interpreter would only add its start-up (seconds of imports):
    a user's fault that stops the run, a short local run; what a whole process prints and writes (the W&B
    logger included) is tested through :func:`train`."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from dpgen.app import run_app

    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "1", **(env_extra or {})}
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    # Hydra's logging set-up (a logging dictConfig) would close this process's log handlers (pytest's)
    with mock.patch.dict(os.environ, env), mock.patch("hydra._internal.logging_config.configure_logging"), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if cwd is not None:
                os.chdir(cwd)
            code = run_app(list(args))
        finally:  # what the Hydra run left in this process: its working folder, its config, its global state
            os.chdir(here)
            HydraConfig.instance().cfg = None
            GlobalHydra.instance().clear()
    return subprocess.CompletedProcess(["train.py", *args], code, out.getvalue(), err.getvalue())


def beats_chance(accuracy: float, classes: int = 10) -> bool:
    """At least twice chance (``2 / classes``): the classifier learnt something from what it was fit on."""
    return accuracy >= 2.0 / classes
