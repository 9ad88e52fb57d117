"""Evaluators (Hydra targets) called by the pipeline after training."""

from __future__ import annotations

import time

import torch
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ..data import DataSplits
from .downstream import downstream_accuracy


class GenerativeEvaluator:
    """Synthetic sample grid + downstream LogReg/MLP accuracy on the real test set.

    Only synthetic samples are plotted (``samples.png``); no private record is ever shown.
    """

    def __init__(self, n_synthetic: int = 60000, classifiers: tuple[str, ...] = ("logreg", "mlp"),
                 grid_per_class: int = 10, logreg_max_iter: int = 5000, mlp_max_iter: int = 200) -> None:
        self.n_synthetic, self.classifiers = int(n_synthetic), tuple(classifiers)
        self.grid_per_class = grid_per_class
        self.logreg_max_iter, self.mlp_max_iter = logreg_max_iter, mlp_max_iter

    def __call__(self, method, data: DataSplits, logger, seed: int = 0) -> dict:
        console = Console(stderr=True)
        t0 = time.time()
        k = data.num_classes
        # grid: one row per class (conditional generators), synthetic only
        labels = torch.arange(k).repeat_interleave(self.grid_per_class)
        grid, _ = method.sample(len(labels), labels)
        if data.image_shape[1] > 1:  # image data
            logger.log_images("samples", grid, nrow=self.grid_per_class)
        metrics: dict = {}
        if self.n_synthetic > 0 and self.classifiers:
            # balanced labels (DP-MERF protocol), shuffled
            y = torch.arange(self.n_synthetic) % k
            y = y[torch.randperm(self.n_synthetic, generator=torch.Generator().manual_seed(seed))]
            console.log(f"[eval] generating {self.n_synthetic} balanced synthetic samples")
            x_syn, y_syn = method.sample(self.n_synthetic, y)
            with Progress(SpinnerColumn(), TextColumn("[eval] {task.description}"), TimeElapsedColumn(),
                          console=console) as progress:
                for clf in self.classifiers:
                    task = progress.add_task(f"fitting {clf} on synthetic, testing on real", total=1)
                    metrics.update(downstream_accuracy(x_syn, y_syn, data.test.x, data.test.y, (clf,), seed,
                                                       self.logreg_max_iter, self.mlp_max_iter))
                    progress.update(task, completed=1, description=f"{clf}: accuracy {metrics[f'acc_{clf}']:.4f}")
        metrics["eval_time_s"] = time.time() - t0
        return metrics


class NoEvaluator:
    """Skip evaluation (smoke runs).  Accepts and ignores the generative evaluator's settings so a
    preset's ``evaluator.*`` values do not break ``evaluator=none``."""

    def __init__(self, **_: object) -> None:
        pass

    def __call__(self, method, data, logger, seed: int = 0) -> dict:
        return {}
