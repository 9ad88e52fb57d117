"""Noise calibration of DPSWflow / DPSWflow-r / DPSWgen (DPSWflow paper, privacy analysis).

Private records reach the flows as latent rows on (DPSWflow: *of*) the unit sphere, so two rows
differ by at most 2: the DP-SWD sensitivity of ``X -> X U`` is ``2 sqrt(w(k, d, beta))``
(``ROW_DIAMETER = 2``, the "factor 2" of DPSWflow paper, sensitivity).

* DPSWflow-r and DPSWgen release one noisy projected *subsampled* batch per step: a subsampled
  Gaussian mechanism composed over the steps; its noise is ``dpswd_noise(..., row_diameter=2)``
  (:func:`flow_r_noise`).
* DPSWflow (Algorithm 2) releases the noisy projections of the *whole* private set **once**:
  a single Gaussian mechanism (no subsampling, replace-one neighbours, N public):
  :func:`one_shot_noise`.
* :func:`moments_accountant_epsilon` is the Abadi et al. moments accountant of the released code
  (integer orders, with or without its accumulation bug, DPSWflow paper, accounting of DPSWflow-r / DPSWgen), used only to reproduce the
  paper's sigma <-> epsilon pairs (``dpgen/reproduce/dpswflow_sigma_table.py``).

Pure functions: numpy / scipy / autodp only, no Hydra.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import gammaln, logsumexp

from .accountants import check_epsilon_delta
from .calibration import calibrate
from .dpswd import DPSWDNoise, dpswd_noise
from .errors import PrivacySettingError
from .sensitivity import check_sensitivity_fraction, l2_sensitivity, w_clt

ROW_DIAMETER = 2.0  # unit-norm latents: ||x - x'|| <= 2 (DPSWflow paper, sensitivity)
ONE_SHOT_CALIBRATIONS = ("rdp", "analytic", "classic")


def flow_r_noise(epsilon: float, delta: float, *, d: int, k: int, sample_rate: float, steps: int,
                 bound: str = "chernoff", sampling: str = "poisson", sensitivity_fraction: float = 0.5,
                 partners: int = 1, accountant: str = "auto") -> DPSWDNoise:
    """DPSWflow-r / DPSWgen: ``steps`` subsampled releases of ``Y U + Z`` on unit-norm rows (DPSWflow paper, accounting of DPSWflow-r / DPSWgen).

    Union-bound delta split (``privacy.dpswd``, ``"union"``) with row diameter 2.
    """
    return dpswd_noise(epsilon, delta, d=d, k=k, sample_rate=sample_rate, steps=steps, bound=bound,
                       sampling=sampling, delta_split="union", sensitivity_fraction=sensitivity_fraction,
                       row_diameter=ROW_DIAMETER, partners=partners, accountant=accountant)


# -- one-shot Gaussian mechanism (Algorithm 2) -------------------------------------------------
@dataclass(frozen=True)
class OneShotNoise:
    noise_std: float  # std added once to every private projection
    noise_multiplier: float  # noise_std / sensitivity (recorded in the ledger with sample_rate 1)
    sensitivity: float  # 2 sqrt(w(k, d, beta))
    delta_sensitivity: float  # beta: failure probability of the sensitivity bound (reserved once)
    delta_conversion: float
    calibration: str
    d: int
    k: int
    bound: str

    def asdict(self) -> dict:
        return asdict(self)


def one_shot_sensitivity(d: int, k: int, delta_sensitivity: float, bound: str = "chernoff") -> float:
    """``S = 2 sqrt(w(k, d, beta))`` for the single release of ``Y U`` (DPSWflow paper, sensitivity)."""
    return l2_sensitivity(k, d, delta_sensitivity, bound, ROW_DIAMETER)


def one_shot_noise(epsilon: float, delta: float, *, d: int, k: int, bound: str = "chernoff",
                   calibration: str = "rdp", sensitivity_fraction: float = 0.5) -> OneShotNoise:
    """Noise std of the single Gaussian release of Algorithm 2 (DPSWflow paper, one-shot release of Alg. 2).

    delta is split once (Prop. 2): ``beta = f delta`` for the sensitivity bound, ``(1 - f) delta``
    for the conversion.  ``calibration``:

    * ``rdp`` (runs' default): the RDP accountant the ledger uses (q = 1,
      one step), so the run's reported ``epsilon_rdp`` is <= the target;
    * ``analytic``: the exact Gaussian mechanism (Balle & Wang 2018); smaller noise, certified
      by the ledger's PLD accountant (exact for one Gaussian) but not by its RDP one;
    * ``classic``: the paper / code formula ``c S / eps``, ``c = sqrt(2 ln(1.25 / delta_conv))``
      (DPSWflow paper, one-shot release of Alg. 2).  Proven only for eps < 1; at eps = 10 it is *not* (10, delta)-DP (exact
      epsilon 10.35 at delta_conv = 5e-6): reported for the table, refused by runs.
    """
    check_epsilon_delta(epsilon, delta)
    if calibration not in ONE_SHOT_CALIBRATIONS:
        raise PrivacySettingError("calibration", f"one-shot calibration {calibration!r} is unknown; choose one of "
                                                 f"{', '.join(ONE_SHOT_CALIBRATIONS)}")
    beta = check_sensitivity_fraction(sensitivity_fraction) * delta
    delta_conv = delta - beta
    sens = one_shot_sensitivity(d, k, beta, bound)
    # "rdp": one step at q = 1 under the RDP accountant; "analytic" to 1e-6 like the exact epsilon it inverts
    mult = calibrate(epsilon, delta_conv, accountant=calibration, rel_tol=1e-6 if calibration == "analytic" else 1e-3)
    return OneShotNoise(mult * sens, mult, sens, beta, delta_conv, calibration, d, k, bound)


def paper_one_shot_sigma(epsilon: float, delta: float, d: int, k: int) -> float:
    """The released code's ``get_sigma``: ``c S / eps`` with the CLT bound at delta/2 (DPSWflow paper, one-shot release of Alg. 2)."""
    s = ROW_DIAMETER * math.sqrt(w_clt(k, d, delta / 2.0))
    return calibrate(epsilon, delta / 2.0, accountant="classic") * s


def paper_flow_noise_std(noise_multiplier: float, d: int, k: int, delta: float) -> float:
    """What the released code adds per projection: ``sigma * 2 sqrt(w_CLT(k, d, delta/2))`` (DPSWflow paper, accounting of DPSWflow-r / DPSWgen)."""
    return noise_multiplier * ROW_DIAMETER * math.sqrt(w_clt(k, d, delta / 2.0))


# -- the released code's moments accountant (DPSWflow paper, accounting of DPSWflow-r / DPSWgen) -------------------------------------------
def log_moment_subsampled_gaussian(noise_multiplier: float, q: float, order: int) -> float:
    """``log E_{z~mu}[(mu(z)/mu0(z))^lambda]``, mu0 = N(0, s^2), mu = (1-q) mu0 + q N(1, s^2).

    Equals ``log A_{lambda+1}`` with ``A_a = sum_k C(a, k) (1-q)^{a-k} q^k exp(k(k-1) / (2 s^2))``
    (binomial expansion; every term positive, summed in log space).  One step.
    """
    a = order + 1
    kk = np.arange(a + 1, dtype=float)
    log_binom = gammaln(a + 1) - gammaln(kk + 1) - gammaln(a - kk + 1)
    with np.errstate(divide="ignore"):
        terms = (log_binom + (a - kk) * np.log1p(-q) + kk * np.log(q)
                 + kk * (kk - 1) / (2.0 * noise_multiplier**2))
    return float(logsumexp(terms))


def moments_accountant_epsilon(noise_multiplier: float, q: float, steps: int, delta: float,
                               max_order: int = 32, accumulate_bug: bool = False) -> float:
    """Abadi et al.'s moments accountant as in the released code (TF ``gaussian_moments``).

    ``eps = min_{lambda=1..max_order} (T alpha(lambda) + ln(1/delta)) / lambda`` with
    ``alpha(lambda)`` the one-step log-moment.  ``accumulate_bug=True`` reproduces the released
    code, whose running log-moment is initialised once outside the order loop, so order lambda
    stores the sum over orders 1..lambda (conservative).
    """
    orders = range(1, max_order + 1)
    mom = np.array([steps * log_moment_subsampled_gaussian(noise_multiplier, q, lam) for lam in orders])
    if accumulate_bug:
        mom = np.cumsum(mom)
    lam = np.arange(1, max_order + 1, dtype=float)
    return float(np.min((mom + math.log(1.0 / delta)) / lam))
