"""Optimal transport: sliced Wasserstein (plain and DP), sliced-Wasserstein particle flows, Sinkhorn."""
from .flows import (
    empirical_quantiles,
    euler_maruyama_step,
    flow_step,
    interp1d,
    quantile_levels,
    sliced_flow_drift,
    smoothed_projections,
    transport_map,
)
from .sinkhorn import EntropicOT, cost_matrix, sinkhorn_generator_loss
from .sliced import (
    dp_sliced_wasserstein,
    gaussian_projection_release,
    random_directions,
    sliced_wasserstein,
    sliced_wasserstein_projected,
)

__all__ = [
    "EntropicOT", "cost_matrix", "dp_sliced_wasserstein", "empirical_quantiles", "euler_maruyama_step", "flow_step",
    "gaussian_projection_release", "interp1d", "quantile_levels", "random_directions", "sinkhorn_generator_loss",
    "sliced_flow_drift", "sliced_wasserstein", "sliced_wasserstein_projected", "smoothed_projections",
    "transport_map",
]
