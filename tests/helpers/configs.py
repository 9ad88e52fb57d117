"""Compose the project's Hydra config in-process (no Hydra runtime: paths are given explicitly)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir

from tests.helpers import ROOT

CONFIGS = ROOT / "configs"


def compose_cfg(overrides: list[str], out_dir: Path | None = None, data_root: Path | None = None,
                return_hydra_config: bool = False):
    extra = []
    if out_dir is not None:
        extra.append(f"paths.output_dir={out_dir}")
    extra.append(f"paths.data_root={data_root if data_root is not None else out_dir or '/nonexistent'}")
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("train", overrides=overrides + extra, return_hydra_config=return_hydra_config)
