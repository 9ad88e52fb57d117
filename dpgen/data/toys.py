"""2-D toy targets for particle flows (DPSWflow paper, Fig. 1).

The paper does not give the five Gaussians' centres or covariances (and ships no toy code), so
dpgen fixes: 5 equally weighted isotropic Gaussians, centres on the circle of radius ``radius``
at angles ``pi/2 + 2 pi j / 5``, standard deviation ``std`` (defaults 2 and 0.25).
"""

from __future__ import annotations

import math

import torch

from .base import DataSplits, TensorSplit, split_public_private


def five_gaussian_centres(radius: float = 2.0) -> torch.Tensor:
    """``(5, 2)`` centres on the circle of ``radius``."""
    ang = math.pi / 2 + 2 * math.pi * torch.arange(5, dtype=torch.float64) / 5
    return (radius * torch.stack([ang.cos(), ang.sin()], dim=1)).float()


def sample_five_gaussians(n: int, radius: float = 2.0, std: float = 0.25,
                          generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points ``(n, 2)`` of the mixture and their component labels ``(n,)``."""
    y = torch.randint(5, (n,), generator=generator)
    x = five_gaussian_centres(radius)[y] + std * torch.randn(n, 2, generator=generator)
    return x, y


def five_gaussians_log_density(x: torch.Tensor, radius: float = 2.0, std: float = 0.25) -> torch.Tensor:
    """``log p(x)`` of the mixture at ``x: (n, 2)`` (for level-set plots)."""
    c = five_gaussian_centres(radius).to(x)
    sq = ((x[:, None, :] - c[None]) ** 2).sum(-1)
    return torch.logsumexp(-sq / (2 * std**2), dim=1) - math.log(5 * 2 * math.pi * std**2)


def five_gaussians(n_train: int = 4000, n_test: int = 2000, radius: float = 2.0, std: float = 0.25,
                   public_fraction: float = 0.0, seed: int = 0, **_: object) -> DataSplits:
    """Dataset builder (Hydra target): the 2-D five-Gaussian mixture as ``(n, 1, 1, 2)`` "images"."""
    g = torch.Generator().manual_seed(20_000 + seed)
    x_tr, y_tr = sample_five_gaussians(n_train, radius, std, g)
    x_te, y_te = sample_five_gaussians(n_test, radius, std, g)
    public, private = split_public_private(x_tr[:, None, None, :], y_tr, public_fraction, seed)
    ds = DataSplits(name="five_gaussians", private=private, test=TensorSplit(x_te[:, None, None, :], y_te),
                    public=public, num_classes=5, image_shape=(1, 1, 2))
    ds.value_range = (-(radius + 5 * std), radius + 5 * std)
    return ds
