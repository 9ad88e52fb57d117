"""The Python API for notebooks: train a preset from overrides, load a release, sample, export.

```python
from dpgen.api import train, load_release

run = train(["experiment=digits_moments", "accountant.epsilon=5"])   # in-process, a run folder
run.results["privacy"]["epsilon"], run.release                       # results.json, the release file
rel = load_release(run.release)                                      # or any run folder / release file
x, y = rel.sample(1000, labels="balanced", seed=0)                   # (n, C, H, W) floats, (n,) labels
rel.export("synth.npz", n=10000, seed=0)                             # + synth.card.json / .md beside it
```
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from .export.release import Release, find_release, load_release

__all__ = ["Run", "train", "load_release", "Release"]


@dataclass
class Run:
    """A finished run: ``results`` (as results.json), its folder and its release file."""

    results: dict
    run_dir: Path
    release: Path

    @property
    def card(self) -> dict:
        """The run's privacy card."""
        return load_release(self.release).card

    def load_release(self) -> Release:
        return load_release(self.release)


def compose(overrides: list[str], run_dir: str | Path | None = None):
    """The composed config of ``python train.py <overrides>``, with the run folder (default
    ``outputs/<experiment>/<time>`` under the current folder) and the data root ($DPGEN_DATA_ROOT, else ./data)."""
    from .config import compose as compose_config

    cfg = compose_config(overrides, output_dir=".", data_root=os.environ.get("DPGEN_DATA_ROOT", Path.cwd() / "data"))
    if run_dir is None:
        run_dir = Path("outputs") / str(cfg.experiment_name) / time.strftime("%Y-%m-%d_%H-%M-%S")
    cfg.paths.output_dir = str(Path(run_dir).resolve())
    return cfg


def train(overrides: list[str] | None = None, run_dir: str | Path | None = None) -> Run:
    """Train in this process, as ``python train.py <overrides>`` does; returns the :class:`Run`.

    A user's mistake raises ``dpgen.errors.ConfigError`` (or ``DatasetNotFoundError``) with the fix in its message.
    """
    from .pipeline import run

    cfg = compose(list(overrides or []), run_dir)
    results = run(cfg)
    folder = Path(cfg.paths.output_dir)
    return Run(results=results, run_dir=folder, release=find_release(folder))
