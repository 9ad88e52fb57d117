"""Shared fixtures (the helpers behind them: tests/helpers/).  Real datasets come from $DPGEN_DATA_ROOT (CI: ../shared/data).

Hermetic caches: every cache a test (or a ``train.py`` it spawns) could write — dpgen's FID domain
extractor (``DPGEN_CACHE_DIR``), torch hub (``TORCH_HOME``), matplotlib, W&B — points into this
session's pytest temporary folder (shared by the xdist workers of one session), never the user's home.
Long end-to-end runs are marked ``slow``: ``make test`` skips them, ``make test-all`` runs them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from dpgen.privacy.mechanisms import GaussianProjectionRelease
from tests.helpers import shared_data_root
from tests.helpers.context import Release, spy_releases

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# one CPU thread per test process (and the processes it starts): `make test` runs one worker per core, and the
# shrunk models gain nothing from more threads (dpgen's own runs do the same: trainer.threads=1)
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
torch.set_num_threads(1)

HERMETIC_DIRS = {"DPGEN_CACHE_DIR": "dpgen-cache", "TORCH_HOME": "torch-home", "MPLCONFIGDIR": "matplotlib",
                 "WANDB_CACHE_DIR": "wandb-cache", "WANDB_CONFIG_DIR": "wandb-config", "WANDB_DATA_DIR": "wandb-data",
                 "XDG_CACHE_HOME": "xdg-cache"}


@pytest.fixture(scope="session", autouse=True)
def hermetic_caches(tmp_path_factory):
    """Point every cache into the session's temporary folder (restored afterwards)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # one folder for all workers of this session: the FID extractor trains once
    saved = {k: os.environ.get(k) for k in HERMETIC_DIRS}
    for var, name in HERMETIC_DIRS.items():
        (base / name).mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(base / name)
    yield base
    for var, old in saved.items():
        if old is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = old


@pytest.fixture
def data_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("no shared data root: set DPGEN_DATA_ROOT to a folder with MNIST/ (CI uses ../shared/data)")
    return root


@pytest.fixture
def release_spy(monkeypatch):
    """``release_spy(cls=GaussianProjectionRelease)``: the list of every later call of ``cls.release``."""

    def spy(cls: type = GaussianProjectionRelease) -> list[Release]:
        return spy_releases(monkeypatch, cls)

    return spy


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` need a CUDA device: skipped without one (``make gpu-check`` runs them on a GPU)."""
    cuda = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not cuda:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (make gpu-check runs the cuda-marked tests on a GPU)")
    for item in cuda:
        item.add_marker(skip)
