"""Optimal transport: sliced Wasserstein (plain and DP)."""
from .sliced import (
    dp_sliced_wasserstein,
    gaussian_projection_release,
    random_directions,
    sliced_wasserstein,
    sliced_wasserstein_projected,
)

__all__ = [
    "dp_sliced_wasserstein",
    "gaussian_projection_release",
    "random_directions",
    "sliced_wasserstein",
    "sliced_wasserstein_projected",
]
