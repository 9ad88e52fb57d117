"""Compose the project's Hydra config in-process (no Hydra runtime: paths are given explicitly), through
the one composer a run uses (:func:`dpgen.config.compose`)."""

from __future__ import annotations

from pathlib import Path

from dpgen.config import compose
from tests.helpers import ROOT

CONFIGS = ROOT / "configs"


def compose_cfg(overrides: list[str], out_dir: Path | None = None, data_root: Path | None = None,
                return_hydra_config: bool = False):
    return compose(overrides, config_dir=CONFIGS, hydra_node=return_hydra_config, output_dir=out_dir,
                   data_root=data_root if data_root is not None else out_dir or "/nonexistent")
