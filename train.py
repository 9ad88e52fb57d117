"""dpgen entry point: ``python train.py experiment=<dataset>_<method> [overrides]``."""

from __future__ import annotations

import math

import hydra
from omegaconf import DictConfig


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from dpgen.pipeline import run

    results = run(cfg)
    metric = cfg.get("optimized_metric")
    if metric is None:
        return None
    value = results["metrics"].get(metric)
    return float(value) if value is not None and math.isfinite(float(value)) else None


if __name__ == "__main__":
    main()
