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
from .flows import (  # noqa: E402  (issue 4: sliced-Wasserstein particle flows)
    empirical_quantiles,
    euler_maruyama_step,
    flow_step,
    interp1d,
    quantile_levels,
    sliced_flow_drift,
    smoothed_projections,
    transport_map,
)

__all__ += ["empirical_quantiles", "euler_maruyama_step", "flow_step", "interp1d", "quantile_levels",
            "sliced_flow_drift", "smoothed_projections", "transport_map"]

from .sinkhorn import EntropicOT, cost_matrix, sinkhorn_generator_loss  # noqa: E402  (DP-Sinkhorn)

__all__ += ["EntropicOT", "cost_matrix", "sinkhorn_generator_loss"]
