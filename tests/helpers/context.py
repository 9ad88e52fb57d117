"""A method's train context for a short test run, and a spy on a mechanism's releases."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from dpgen.logging import RunLogger
from dpgen.methods import TrainContext
from dpgen.privacy.mechanisms import GaussianProjectionRelease


def train_context(run_dir: Path, **kw) -> TrainContext:
    """CPU, deterministic, no progress bar, a checkpoint every 5 steps, one log line (at the last step: each
    line computes epsilon), logs in ``run_dir``; ``kw`` overrides any field (``max_steps``, ``log_every``, ...)."""
    base = dict(device=torch.device("cpu"), logger=RunLogger(run_dir), run_dir=run_dir, log_every=10**6,
                checkpoint_every=5, progress=False, deterministic=True)
    return TrainContext(**{**base, **kw})


@dataclass(frozen=True)
class Release:
    """One call of a mechanism's ``release``: its inputs (copies), its output and the noise scale it used."""

    args: tuple
    out: object
    noise_std: float

    @property
    def rows(self) -> torch.Tensor:
        return self.args[0]

    @property
    def noise(self) -> torch.Tensor:
        """What a projection release added: its output minus the noiseless ``rows @ u``."""
        rows, u = self.args[:2]
        return self.out.detach() - rows @ u


def spy_releases(monkeypatch: pytest.MonkeyPatch, cls: type = GaussianProjectionRelease) -> list[Release]:
    """Record every later call of ``cls.release`` (the real release still runs, noise and ledger entry)."""
    real = cls.release
    calls: list[Release] = []

    def spy(self, *args, **kw):
        kept = tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)
        out = real(self, *args, **kw)
        calls.append(Release(kept, out, self.noise_std))
        return out

    monkeypatch.setattr(cls, "release", spy)
    return calls


def assert_holds_no_record(checkpoint, *records: torch.Tensor) -> None:
    """No floating-point tensor of ``checkpoint`` (a nested dict / list), cut into rows of a record's width,
    has a row within 1e-4 of a row of ``records`` (each a 2-D tensor of private records or their latents)."""

    def tensors(o):
        if torch.is_tensor(o):
            yield o
        elif isinstance(o, dict):
            for v in o.values():
                yield from tensors(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                yield from tensors(v)

    for t in tensors(checkpoint):
        for flat in records:
            if t.is_floating_point() and t.numel() >= flat.shape[1] and t.numel() % flat.shape[1] == 0:
                assert torch.cdist(t.reshape(-1, flat.shape[1]).float(), flat).min() > 1e-4
