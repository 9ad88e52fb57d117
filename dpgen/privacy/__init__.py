"""Privacy core: sensitivity bounds, accountants, calibration, sampler and ledger.

Imports only numpy/scipy/torch/autodp/dp-accounting: usable without Hydra.
"""
from .accountants import (
    SAMPLING_SCHEMES,
    PLDAccountant,
    RDPAccountant,
    Release,
    check_epsilon_delta,
)
from .dpswd import DPSWDNoise, calibrate_dpswd, dpswd_epsilon, dpswd_sensitivity
from .ledger import PrivacyLedger
from .sampler import PrivateSampler
from .sensitivity import (
    l2_sensitivity,
    split_delta,
    squared_sensitivity_bound,
    w_bernstein,
    w_bernstein_code,
    w_clt,
)

__all__ = [
    "DPSWDNoise", "PLDAccountant", "PrivacyLedger", "PrivateSampler", "RDPAccountant", "Release",
    "SAMPLING_SCHEMES", "calibrate_dpswd", "check_epsilon_delta", "dpswd_epsilon", "dpswd_sensitivity",
    "l2_sensitivity", "split_delta", "squared_sensitivity_bound", "w_bernstein", "w_bernstein_code", "w_clt",
]
from .dpswflow import (  # noqa: E402  (issue 4: DPSWflow calibration)
    OneShotNoise,
    calibrate_flow_r,
    calibrate_one_shot,
    moments_accountant_epsilon,
)

__all__ += ["OneShotNoise", "calibrate_flow_r", "calibrate_one_shot", "moments_accountant_epsilon"]

from .image_gradient import clip_per_row, clip_whole, effective_noise_multiplier, sanitize  # noqa: E402  (DP-Sinkhorn)

__all__ += ["clip_per_row", "clip_whole", "effective_noise_multiplier", "sanitize"]
from .bayesian import BayesianAccountant, MomentsAccountant  # noqa: E402
from .wdp import WassersteinAccountant  # noqa: E402

__all__ += ["BayesianAccountant", "MomentsAccountant", "WassersteinAccountant"]
