"""What the tests share: the checkout's root, the real data root, fake data layouts (``fakedata``), the
composed Hydra config (``configs``), ``train.py`` as a user runs it (``runs``), a method's train context
and a release spy (``context``)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout: train.py, configs/, docs/


def shared_data_root() -> Path | None:
    """$DPGEN_DATA_ROOT, else ../shared/data beside the checkout (CI), else None."""
    env = os.environ.get("DPGEN_DATA_ROOT")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared" / "data"]:
        if cand.is_dir():
            return cand
    return None
