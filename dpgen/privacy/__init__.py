"""Privacy core: sensitivity bounds, accountants, calibration, sampler and ledger.

Imports only numpy/scipy/torch/autodp/dp-accounting: usable without Hydra.
"""
from .accountants import (
    SAMPLING_SCHEMES,
    PLDAccountant,
    RDPAccountant,
    Release,
    calibrate,
    calibrating_accountant,
    check_epsilon_delta,
)
from .bayesian import BayesianAccountant, MomentsAccountant
from .dpswd import DPSWDNoise, calibrate_dpswd, dpswd_epsilon, dpswd_sensitivity
from .dpswflow import OneShotNoise, calibrate_flow_r, calibrate_one_shot, moments_accountant_epsilon
from .image_gradient import clip_per_row, clip_whole, effective_noise_multiplier, sanitize
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
from .wdp import WassersteinAccountant

__all__ = [
    "BayesianAccountant", "DPSWDNoise", "MomentsAccountant", "OneShotNoise", "PLDAccountant", "PrivacyLedger",
    "PrivateSampler", "RDPAccountant", "Release", "SAMPLING_SCHEMES", "WassersteinAccountant", "calibrate", "calibrate_dpswd",
    "calibrate_flow_r", "calibrate_one_shot", "calibrating_accountant", "check_epsilon_delta", "clip_per_row", "clip_whole",
    "dpswd_epsilon", "dpswd_sensitivity", "effective_noise_multiplier", "l2_sensitivity",
    "moments_accountant_epsilon", "sanitize", "split_delta", "squared_sensitivity_bound", "w_bernstein",
    "w_bernstein_code", "w_clt",
]
