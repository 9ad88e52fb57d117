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
from .sinkhorn import EntropicOT, cost_matrix, sinkhorn_generator_loss  # noqa: E402  (DP-Sinkhorn)

__all__ += ["EntropicOT", "cost_matrix", "sinkhorn_generator_loss"]
