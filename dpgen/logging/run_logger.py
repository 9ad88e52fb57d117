"""One small logging interface with a local and a W&B sink.

Only aggregate metrics, synthetic samples and public data are ever passed to a logger: the
methods never hand it a private record (see the privacy boundary in docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

import torch

from ..utils import json_safe


class LocalSink:
    """Writes ``metrics.csv``, image grids (``<name>.png``) and ``results.json`` into the run folder."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._rows: list[dict] = []
        self._csv = self.run_dir / "metrics.csv"
        if self._csv.exists():  # resumed run: keep the history
            with open(self._csv) as fh:
                self._rows = list(csv.DictReader(fh))

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        self._rows.append({"step": step, **{k: v for k, v in metrics.items()}})
        keys: list[str] = []
        for r in self._rows:
            keys += [k for k in r if k not in keys]
        tmp = self._csv.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=keys)
            w.writeheader()
            w.writerows(self._rows)
        os.replace(tmp, self._csv)

    def log_images(self, name: str, images: torch.Tensor, step: int | None = None, nrow: int = 10) -> Path:
        from torchvision.utils import save_image

        path = self.run_dir / f"{name}.png"
        save_image(images.detach().float().cpu().clamp(0, 1), path, nrow=nrow, padding=2, pad_value=1.0)
        return path

    def log_summary(self, results: dict[str, Any]) -> Path:
        path = self.run_dir / "results.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(json_safe(results), indent=2, sort_keys=True))
        os.replace(tmp, path)
        return path

    def finish(self) -> None:
        pass


class WandbSink:
    """Weights & Biases run: config, metrics (incl. the epsilon-spent curve), synthetic grids."""

    def __init__(self, run_dir: str | Path, config: dict, mode: str = "offline", project: str = "dpgen",
                 entity: str | None = None, group: str | None = None, name: str | None = None,
                 tags: list[str] | None = None) -> None:
        if mode not in ("online", "offline", "disabled"):
            raise ValueError(f"logger.wandb.mode must be online, offline or disabled, got {mode!r}")
        import wandb

        self._wandb = wandb
        self.run = wandb.init(project=project, entity=entity, group=group, name=name, tags=tags, mode=mode,
                              dir=str(run_dir), config=config, reinit="finish_previous",
                              settings=wandb.Settings(silent=True, console="off"))

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log({k: v for k, v in metrics.items() if v is not None}, step=step)

    def log_images(self, name: str, images: torch.Tensor, step: int | None = None, nrow: int = 10) -> None:
        from torchvision.utils import make_grid

        grid = make_grid(images.detach().float().cpu().clamp(0, 1), nrow=nrow, padding=2, pad_value=1.0)
        self.run.log({name: self._wandb.Image(grid)}, step=step)

    def log_summary(self, results: dict[str, Any]) -> None:
        flat = _flatten(json_safe(results))
        for k, v in flat.items():
            self.run.summary[k] = v

    def finish(self) -> None:
        self.run.finish()


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "/"))
        else:
            out[key] = v
    return out


class RunLogger:
    """Fans every call out to the local sink and, when configured, W&B."""

    def __init__(self, run_dir: str | Path, run_config: dict | None = None, wandb: dict | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.local = LocalSink(run_dir)
        self.sinks: list[Any] = [self.local]
        if wandb:
            self.sinks.append(WandbSink(run_dir, run_config or {}, **wandb))

    def log_metrics(self, metrics: dict[str, Any], step: int) -> None:
        for s in self.sinks:
            s.log_metrics(metrics, step)

    def log_images(self, name: str, images: torch.Tensor, step: int | None = None, nrow: int = 10) -> None:
        """Synthetic or public images only.  Small images (e.g. 8x8 digits) are enlarged for viewing."""
        if images.dim() == 4 and images.shape[-1] < 32:
            scale = -(-32 // images.shape[-1])
            images = torch.nn.functional.interpolate(images.float(), scale_factor=scale, mode="nearest")
        for s in self.sinks:
            s.log_images(name, images, step, nrow)

    def log_summary(self, results: dict[str, Any]) -> None:
        for s in self.sinks:
            s.log_summary(results)

    def finish(self) -> None:
        for s in self.sinks:
            s.finish()
