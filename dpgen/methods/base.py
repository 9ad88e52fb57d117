"""What every method provides to the pipeline."""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data import DataSplits
from ..privacy import PrivacyLedger
from ..utils import load_checkpoint


@dataclass
class TrainContext:
    """Everything a method's ``fit`` needs besides the data and the ledger."""

    device: torch.device
    logger: object  # dpgen.logging.RunLogger
    run_dir: Path
    seed: int = 0
    log_every: int = 50
    checkpoint_every: int = 500
    resume_from: Path | None = None
    max_steps: int | None = None  # cap (smoke runs); the privacy calibration still uses the full schedule
    progress: bool = True
    deterministic: bool = False  # seed sampling/noise from `seed` (tests, debugging): noise becomes guessable

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoints" / "last.pt"


def secret_seed(ctx: TrainContext, offset: int = 1) -> int:
    """Seed for a private sampler / noise generator, and reseed torch's global RNG (directions, noise).

    Secret (OS entropy) unless ``trainer.deterministic=true``, in which case both derive from the
    logged ``seed`` (reproducible, but the noise becomes guessable: debugging and tests only).
    """
    if ctx.deterministic:
        return ctx.seed + offset
    torch.manual_seed(secrets.randbits(63))
    return secrets.randbits(63)


def load_resume_checkpoint(path: Path, signature: dict) -> dict:
    """Load a checkpoint to resume from, refusing one written by a run with other settings."""
    ck = load_checkpoint(path)
    old = ck.get("signature", {})
    diff = {k: (old.get(k), v) for k, v in signature.items() if old.get(k) != v}
    if diff:
        raise ValueError("cannot resume: the checkpoint was written by a run with other settings "
                         + ", ".join(f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in diff.items())
                         + "; resume with the same experiment, dataset split and model settings")
    return ck


class NonFiniteLossError(FloatingPointError):
    def __init__(self, step: int, what: str = "loss") -> None:
        super().__init__(
            f"the training {what} became NaN/inf at step {step}. Lower model.lr or check the data "
            f"scaling; the last checkpoint is kept: after fixing, resume in place with "
            f"hydra.run.dir=<run folder> trainer.resume=true"
        )


class Method(ABC):
    """A training algorithm.  ``fit`` touches private data only through a PrivateSampler."""

    @abstractmethod
    def fit(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
        """Train; record every private release in ``ledger``; return training metrics."""


class GenerativeMethod(Method):
    @abstractmethod
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` synthetic images ``(n, C, H, W)`` in [0, 1] and their labels ``(n,)`` (on cpu)."""
