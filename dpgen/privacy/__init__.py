"""Privacy core: the mechanisms (one object per kind of private release: the noise added is the noise
recorded), the ledger and its accountants, sensitivity bounds and the private sampler.

Imports only numpy/scipy/torch/autodp/dp-accounting: usable without Hydra.  The noise of
single papers' mechanisms (``privacy.dpswd``, ``privacy.dpswflow``) stays importable from their own modules; every noise
search is ``privacy.calibration.calibrate``.
"""
from .accountants import (
    SAMPLING_SCHEMES,
    PLDAccountant,
    RDPAccountant,
    Release,
    calibrating_accountant,
    check_epsilon_delta,
)
from .bayesian import BayesianAccountant, MomentsAccountant
from .calibration import calibrate
from .dpswd import DPSWDNoise, dpswd_noise, dpswd_sensitivity
from .dpswflow import OneShotNoise
from .image_gradient import clip_per_row, clip_whole, effective_noise_multiplier, sanitize
from .ledger import PrivacyLedger
from .mechanisms import (
    GaussianProjectionRelease,
    ImageGradientSanitiser,
    Mechanism,
    NoisyGradientSum,
    OneShotProjectionRelease,
    UnnoisedAccess,
)
from .moments import ClassBlockProjectionRelease, ClassMomentRelease
from .projection import ProjectionDP
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
    # mechanisms: every private release goes through one of these
    "Mechanism", "GaussianProjectionRelease", "OneShotProjectionRelease", "ImageGradientSanitiser", "NoisyGradientSum",
    "ClassMomentRelease", "ClassBlockProjectionRelease", "UnnoisedAccess", "ProjectionDP",
    # the ledger, its accountants and the sampler
    "PrivacyLedger", "PrivateSampler", "Release", "SAMPLING_SCHEMES", "RDPAccountant", "PLDAccountant",
    "WassersteinAccountant", "BayesianAccountant", "MomentsAccountant", "calibrate", "calibrating_accountant",
    "check_epsilon_delta",
    # sensitivity and noise helpers
    "DPSWDNoise", "OneShotNoise", "dpswd_noise", "dpswd_sensitivity", "l2_sensitivity", "split_delta",
    "squared_sensitivity_bound", "w_bernstein", "w_bernstein_code", "w_clt", "clip_per_row", "clip_whole",
    "effective_noise_multiplier", "sanitize",
]
