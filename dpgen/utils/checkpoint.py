"""Atomic checkpoints (temp file + rename) and RNG state capture."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path

import numpy as np
import torch


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def atomic_save(obj: dict, path: str | Path) -> Path:
    """``torch.save`` to a temp file in the same folder, fsync, then ``os.replace``.

    A crash mid-write leaves the previous checkpoint intact.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(path: str | Path) -> dict:
    # weights_only=False: our own checkpoints hold RNG states (numpy arrays, tuples)
    return torch.load(Path(path), map_location="cpu", weights_only=False)
