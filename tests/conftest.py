"""Shared fixtures.  Real datasets come from $DPGEN_DATA_ROOT (CI: ../shared/data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


def shared_data_root() -> Path | None:
    env = os.environ.get("DPGEN_DATA_ROOT")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if cand.is_dir():
            return cand
    return None


@pytest.fixture
def data_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("no shared data root: set DPGEN_DATA_ROOT to a folder with MNIST/ (CI uses ../shared/data)")
    return root
