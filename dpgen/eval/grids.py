"""Sample grids, the pictures every image run writes: only synthetic samples, never a private record."""

from __future__ import annotations

import torch


def write_sample_grids(method, num_classes: int, logger, per_class: int = 10, class_grids: bool = True) -> None:
    """``samples.png``: one row of ``per_class`` samples per class; with ``class_grids``, also one square grid per
    class (``samples_class<k>.png``).  ``method.sample(n, labels)`` draws them; ``logger`` writes each file (and
    its W&B image)."""
    labels = torch.arange(num_classes).repeat_interleave(per_class)
    grid, _ = method.sample(len(labels), labels)
    logger.log_images("samples", grid, nrow=per_class)
    if class_grids and num_classes > 1:
        n = per_class ** 2
        for c in range(num_classes):
            imgs, _ = method.sample(n, torch.full((n,), c, dtype=torch.long))
            logger.log_images(f"samples_class{c}", imgs, nrow=per_class)
