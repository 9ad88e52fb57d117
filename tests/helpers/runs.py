"""``python train.py ...`` as a user runs it, in a subprocess, and the overrides that make it short."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def beats_chance(accuracy: float, classes: int = 10) -> bool:
    """At least twice chance (``2 / classes``): the classifier learnt something from what it was fit on."""
    return accuracy >= 2.0 / classes
