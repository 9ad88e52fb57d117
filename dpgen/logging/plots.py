"""Figures a run writes beside its metrics (matplotlib's object API: no global pyplot state).

Every figure shows public or released quantities only (public test data, post-processed particles).
"""

from __future__ import annotations

from pathlib import Path

import torch


def particles_scatter(path: Path, target: torch.Tensor, particles: torch.Tensor) -> None:
    """2-D scatter of ``particles: (n, 2)`` over a public sample of the target ``target: (m, 2)``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.scatter(target[:, 0], target[:, 1], s=2, c="0.7", label="test sample of the target")
    ax.scatter(particles[:, 0], particles[:, 1], s=2, c="C3", label="particles")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
