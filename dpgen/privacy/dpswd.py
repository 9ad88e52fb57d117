"""Noise calibration of the DP-SWD mechanism (DP-SWD paper, Lemma 2 and the CLT bound).

The private release of one step is ``X_t U + V`` (Algorithm 1) on a batch of rows with
``||x_i - x'_i|| <= row_diameter``; its L2 sensitivity is ``row_diameter * sqrt(w(k, beta))``
with probability ``>= 1 - beta`` over the fresh directions ``U``.  Three ways of spending delta:

* ``"union"`` (dpgen runs): the bound may fail at every one of the ``T`` releases, so each
  release gets ``beta = f * delta / T`` and the RDP -> DP conversion ``(1 - f) * delta``;
  the total failure probability is ``T beta + (1 - f) delta = delta`` (union bound).
* ``"prop2"``: Prop. 2 as written for one mechanism and the 2023 "correction of noise level"
  commit: ``beta = f delta`` once, conversion at ``(1 - f) delta``.
* ``"published"``: the 2021 code behind Table 4: ``beta = delta/2``, conversion at ``delta``.

Only ``"union"`` is a guarantee for a multi-step run; the other two exist to reproduce the
paper's numbers (``dpgen/reproduce/calibration_table.py``).

``partners``: how many difference vectors the bound must hold for *simultaneously* at one release.
With replace-one neighbours (fixed-size sampling without replacement) the differing pair is fixed:
``partners = 1``.  With Poisson sampling and a fixed-size release, a batch larger than B keeps a
random subset, so adding a record x swaps it for a *random* kept record y: the bound must hold for
x - y for every possible partner y (the N records and the padding row), i.e. ``partners = N + 1``,
and each vector's bound is taken at ``beta / partners`` (union bound); the reserved delta per step is
unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .accountants import Release, calibrating_accountant, check_epsilon_delta, make_accountant
from .calibration import calibrate
from .sensitivity import check_sensitivity_fraction, l2_sensitivity

DELTA_SPLITS = ("union", "prop2", "published")


@dataclass(frozen=True)
class DPSWDNoise:
    noise_std: float  # std of the Gaussian noise added to every projection
    noise_multiplier: float  # noise_std / sensitivity (what the accountant sees)
    sensitivity: float
    delta_sensitivity_per_step: float  # beta reserved per release in the ledger
    delta_conversion: float
    sample_rate: float
    steps: int
    d: int
    k: int
    bound: str
    delta_split: str

    def asdict(self) -> dict:
        return asdict(self)


def _deltas(delta: float, steps: int, delta_split: str, fraction: float) -> tuple[float, float, float]:
    """(beta used in the bound, beta recorded per step, delta for the conversion)."""
    check_sensitivity_fraction(fraction)
    if delta_split == "union":
        beta = fraction * delta / steps
        return beta, beta, (1.0 - fraction) * delta
    if delta_split == "prop2":
        return fraction * delta, 0.0, (1.0 - fraction) * delta
    if delta_split == "published":
        return delta / 2.0, 0.0, delta
    raise ValueError(f"unknown delta_split {delta_split!r}; choose one of {', '.join(DELTA_SPLITS)}")


def dpswd_sensitivity(d: int, k: int, delta: float, steps: int, bound: str = "bernstein",
                      delta_split: str = "union", sensitivity_fraction: float = 0.5,
                      row_diameter: float = 1.0, partners: int = 1) -> tuple[float, float, float]:
    """``(S, beta_per_step, delta_conversion)`` for ``steps`` releases of ``X U``."""
    if partners < 1:
        raise ValueError(f"partners must be >= 1, got {partners}")
    beta, beta_step, delta_conv = _deltas(delta, max(int(steps), 1), delta_split, sensitivity_fraction)
    return l2_sensitivity(k, d, beta / partners, bound, row_diameter), beta_step, delta_conv


def dpswd_noise(epsilon: float, delta: float, *, d: int, k: int, sample_rate: float, steps: int,
                bound: str = "bernstein", sampling: str = "poisson", delta_split: str = "union",
                sensitivity_fraction: float = 0.5, row_diameter: float = 1.0, partners: int = 1,
                accountant: str = "auto") -> DPSWDNoise:
    """Smallest projection-noise std such that ``steps`` DP-SWD releases are (epsilon, delta)-DP.

    The multiplier is ``privacy.calibration.calibrate``'s under ``accountant`` (``auto``: PLD for Poisson
    sampling, RDP/autodp for sampling without replacement — pass the ledger's
    ``calibrating_accountant`` so the budget stop uses the same one), never overshooting ``epsilon``.
    """
    check_epsilon_delta(epsilon, delta)
    sens, beta_step, delta_conv = dpswd_sensitivity(d, k, delta, steps, bound, delta_split,
                                                    sensitivity_fraction, row_diameter, partners)
    mult = calibrate(epsilon, delta_conv, sample_rate, steps, sampling, accountant=accountant)
    return DPSWDNoise(mult * sens, mult, sens, beta_step, delta_conv, sample_rate, int(steps), d, k, bound,
                      delta_split)


def dpswd_epsilon(noise_std: float, delta: float, *, d: int, k: int, sample_rate: float, steps: int,
                  bound: str = "bernstein", sampling: str = "poisson", delta_split: str = "union",
                  sensitivity_fraction: float = 0.5, row_diameter: float = 1.0, partners: int = 1,
                  accountant: str = "auto") -> float:
    """Forward check: epsilon of ``steps`` releases with projection noise ``noise_std``."""
    sens, _, delta_conv = dpswd_sensitivity(d, k, delta, steps, bound, delta_split, sensitivity_fraction,
                                            row_diameter, partners)
    acct = make_accountant(calibrating_accountant(sampling, accountant), sampling)
    return acct.epsilon_of([Release(noise_std / sens, sample_rate, steps)], delta_conv)
