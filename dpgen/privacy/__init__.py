"""Privacy core: the mechanisms (one object per kind of private release: the noise added is the noise
recorded), the ledger and its accountants, sensitivity bounds and the private sampler.

Imports only numpy/scipy/torch/autodp/dp-accounting: usable without Hydra.  The noise of
single papers' mechanisms (``privacy.dpswd``, ``privacy.dpswflow``) stays importable from their own modules; every noise
search is ``privacy.calibration.calibrate``.

The names below load on first use (PEP 562): ``from dpgen.privacy import PrivacyLedger`` imports the ledger's
modules only, and ``dpgen.privacy.guarantee`` (the labels the command line prints) imports no torch.
"""

from __future__ import annotations

from ..utils.lazy import lazy_exports

_WHERE = {  # name -> the module of this package that defines it (imported on first use)
    "PLDAccountant": "accountants", "RDPAccountant": "accountants", "Release": "accountants", "SAMPLING_SCHEMES": "accountants", "calibrating_accountant": "accountants", "check_epsilon_delta": "accountants",
    "BayesianAccountant": "bayesian", "MomentsAccountant": "bayesian",
    "calibrate": "calibration",
    "DPSWDNoise": "dpswd", "dpswd_noise": "dpswd", "dpswd_sensitivity": "dpswd",
    "OneShotNoise": "dpswflow",
    "clip_per_row": "image_gradient", "clip_whole": "image_gradient", "effective_noise_multiplier": "image_gradient",
    "PrivacyLedger": "ledger",
    "GaussianProjectionRelease": "mechanisms", "ImageGradientSanitiser": "mechanisms", "Mechanism": "mechanisms", "NoisyGradientSum": "mechanisms", "OneShotProjectionRelease": "mechanisms", "UnnoisedAccess": "mechanisms",
    "ClassBlockProjectionRelease": "moments", "ClassMomentRelease": "moments",
    "ProjectionDP": "projection",
    "PrivateSampler": "sampler",
    "l2_sensitivity": "sensitivity", "split_delta": "sensitivity", "squared_sensitivity_bound": "sensitivity", "w_bernstein": "sensitivity", "w_bernstein_code": "sensitivity", "w_clt": "sensitivity",
    "WassersteinAccountant": "wdp",
}

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
    "effective_noise_multiplier",
]


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
