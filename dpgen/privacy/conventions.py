"""Paper conventions: a published setting run as published, labelled, and its ε under the TRUE sensitivity.

``privacy.convention: honest | paper`` (configs/train.yaml).  ``honest`` (the default, every preset
but the ``*_paper`` ones) enforces every sensitivity bound with public constants.  ``paper`` runs a
paper's own setting where it breaks the sensitivity its accounting assumes; the run is labelled
``guarantee.PAPER_CONVENTION`` ("paper convention — not (ε, δ)-DP at the stated ε") and reports

* ``epsilon`` (the ledger's): the ε the paper's accounting states, i.e. the noise measured against
  the sensitivity the paper *assumes* (rows at distance <= 1, or its CLT bound);
* ``epsilon_true``: the ε of the same noise, rates and steps under the sensitivity the data
  actually has (:func:`true_epsilon`, the project's RDP / PLD accountants), or infinity when no
  data-independent sensitivity exists.

Conventions implemented (``METHODS``; DP-SWD paper, unit-norm assumption; DPSWflow paper, privacy analysis):

=====================  ====================================  =====================================
method                 the paper's setting                    true sensitivity
=====================  ====================================  =====================================
DP-SWD generator       rows = raw pixels in [lo, hi]^d,       row diameter (hi - lo) sqrt(d)
                       fixed noise std sigma (Table 4)        (:func:`raw_pixel_diameter`: 28 on MNIST)
DP-SWD DA (dpswd)      rows g(x) / (2 max_j ||g(x_j)||) of    none: the scale m is a statistic of the
                       the private batch, fixed sigma          private batch released un-noised (the
                                                               source rows and the loss are scaled by
                                                               it): ε = ∞.  Reported beside it: the ε of
                                                               the target projections alone when all B
                                                               rows may move (:func:`batch_scaling_diameter`)
DPSWflow-r / DPSWgen   noise multiplier sigma of the code,    the rigorous (Chernoff) bound for the same
/ DPSWflow             CLT sensitivity at delta / 2 (std       unit-norm rows (the CLT bound is
                       sigma 2 sqrt(w_CLT)); one-shot: the     asymptotic, DP-SWD paper, Lemma 2 and the CLT bound) in the
                       classic formula c S / ε. DPSWgen: the   latent's own dimension d = 8
                       released latent trainer evaluates
                       w_CLT at dim = C·W² = 1024, not d = 8
                       (privacy.paper_sensitivity_dim)
=====================  ====================================  =====================================

DP-Sinkhorn has no convention: its released mechanism (whole-batch clip, sensitivity 2C) is the
honest one; its ``*_paper`` presets are the paper's hyper-parameters under ``convention: honest``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import PrivacySettingError
from .ledger import PrivacyLedger

if TYPE_CHECKING:  # the settings' checks run before torch loads (a refused command line does not wait for it)
    import torch

CONVENTIONS = ("honest", "paper")

# model._target_ (class name) -> what its paper convention changes; anything else refuses convention=paper
METHODS = {
    "DPSWDGenerator": "raw [0, 1] pixel rows without the ||x - x'|| <= 1 normalisation, fixed noise std "
                      "privacy.paper_sigma (DP-SWD Table 2 / 4)",
    "DomainAdaptation": "the released per-batch 2 max ||g(x)|| row scaling, fixed noise std privacy.paper_sigma "
                        "(DP-SWD Table 1 digits; alignment dpswd only)",
    "DPSWFlowR": "the released code's noise multiplier privacy.paper_sigma with its CLT sensitivity at delta/2",
    "DPSWGen": "the released code's noise multiplier privacy.paper_sigma with its CLT sensitivity at delta/2",
    "DPSWFlow": "the released code's classic one-shot sigma c S / eps at privacy.paper_epsilon (CLT sensitivity)",
}
NO_CONVENTION = {"DPSinkhorn": "DP-Sinkhorn's released mechanism (whole-batch clip, sensitivity 2C) is the honest "
                               "one: run its paper setting with experiment=mnist_dpsinkhorn_paper (or "
                               "fmnist_dpsinkhorn_paper) and privacy.convention=honest"}

PLD_MIN_MULTIPLIER = 0.3  # true_epsilon: below it only RDP (a valid, looser bound) is computed

UNBOUNDED = ("∞ (data-dependent scaling): the private batch's max feature norm m scales every row, the source "
             "rows and the loss, and is released un-noised; no finite ε covers it")


@dataclass(frozen=True)
class PaperConvention:
    """The paper's noise and stated ε, passed to a method by ``privacy.convention=paper``.

    ``sigma``: noise std per projection (DP-SWD generator, DA) or the released code's noise
    multiplier (DPSWflow-r, DPSWgen); ``None`` for DPSWflow (classic formula at ``epsilon``).
    ``epsilon``: the ε the paper states for this setting (printed beside the measured ones).
    ``sensitivity_dim``: the dimension the paper's code plugs into its projection bound when it is not
    the rows' own (DPSWgen: the released latent trainer evaluates w_CLT at C·W² = 1024 for 8-d latents,
    DPSWflow paper, DPSWgen baseline); ``None``: the rows' dimension.
    """

    sigma: float | None
    epsilon: float
    sensitivity_dim: int | None = None

    def __post_init__(self) -> None:
        if self.sigma is not None and not self.sigma > 0:
            raise PrivacySettingError("paper_sigma", f"the paper's noise sigma must be > 0, got {self.sigma}")
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise PrivacySettingError("paper_epsilon", f"the paper's stated epsilon must be > 0, got {self.epsilon}")
        if self.sensitivity_dim is not None and not (isinstance(self.sensitivity_dim, int) and self.sensitivity_dim > 0):
            raise PrivacySettingError("stated_dim", "the stated sensitivity dimension must be a positive integer (the "
                                                    "dimension the paper's code uses in its sensitivity bound), got "
                                                    f"{self.sensitivity_dim!r}")


def paper_convention(settings: Mapping | None) -> PaperConvention | None:
    """The :class:`PaperConvention` a run's privacy settings ask for (``convention: paper`` with
    ``paper_sigma``, ``paper_epsilon``, ``paper_sensitivity_dim``), else None (the honest default)."""
    settings = settings or {}
    if settings.get("convention", "honest") != "paper":
        return None
    sigma, dim = settings.get("paper_sigma"), settings.get("paper_sensitivity_dim")
    return PaperConvention(None if sigma is None else float(sigma), float(settings.get("paper_epsilon")),
                           None if dim is None else int(dim))

def raw_pixel_diameter(dim: int, value_range: tuple[float, float]) -> float:
    """``max ||x - x'||`` over raw images in ``[lo, hi]^dim``: ``(hi - lo) sqrt(dim)`` (28 for MNIST in [0, 1])."""
    lo, hi = value_range
    return float(hi - lo) * math.sqrt(int(dim))


def batch_scaling_diameter(batch_size: int) -> float:
    """Frobenius diameter of B rows of norm <= 1/2: ``sqrt(B)`` (every row may move by <= 1 when the
    batch-max scale changes).  With a per-row union bound, ``||(X - X') U||_F <= sqrt(B w)``."""
    return math.sqrt(int(batch_size))


def true_epsilon(noise_std: float, true_sensitivity: float, *, sample_rate: float, steps: int, delta: float,
                 sampling: str, delta_per_step: float = 0.0, relation: str | None = None,
                 calibrate_with: str = "auto") -> dict:
    """ε of ``steps`` Gaussian releases of std ``noise_std`` whose real L2 sensitivity is ``true_sensitivity``.

    Noise multiplier ``noise_std / true_sensitivity``; accounted by a fresh :class:`PrivacyLedger` (RDP via
    autodp, PLD via dp-accounting when the multiplier is >= ``PLD_MIN_MULTIPLIER``; ``epsilon_true`` is the
    calibrating accountant's ε if it was computed, else RDP's, named in ``epsilon_true_accountant``), with ``delta_per_step``
    reserved per release for a probabilistic sensitivity bound.  ``true_sensitivity = inf`` -> ε = ∞.
    Returns ``{noise_multiplier_true, sensitivity_true, epsilon_true, epsilon_true_rdp, epsilon_true_pld}``.
    """
    if not noise_std > 0:
        raise ValueError(f"noise_std must be > 0, got {noise_std}")
    if not true_sensitivity > 0:
        raise ValueError(f"true_sensitivity must be > 0, got {true_sensitivity}")
    if math.isinf(true_sensitivity) or steps == 0:
        eps = math.inf if steps else 0.0
        return {"noise_multiplier_true": 0.0 if steps else None, "sensitivity_true": true_sensitivity,
                "epsilon_true": eps, "epsilon_true_rdp": eps, "epsilon_true_pld": eps}
    mult = noise_std / true_sensitivity
    led = PrivacyLedger(None, delta, sampling, calibrate_with=calibrate_with)
    led.record(mult, sample_rate, int(steps), delta_per_step, relation=relation)
    rdp = led.epsilon(accountant="rdp")
    # PLD's privacy-loss grid grows like 1/multiplier^2: below PLD_MIN_MULTIPLIER (true multipliers of raw-pixel
    # rows are ~0.02) it would take hours and change nothing that matters at epsilon in the thousands
    pld = led.epsilon(accountant="pld") if mult >= PLD_MIN_MULTIPLIER else None
    use_pld = led.calibrating_accountant == "pld" and pld is not None
    return {"noise_multiplier_true": mult, "sensitivity_true": true_sensitivity,
            "epsilon_true": pld if use_pld else rdp, "epsilon_true_accountant": "pld" if use_pld else "rdp",
            "epsilon_true_rdp": rdp, "epsilon_true_pld": pld}


def convention_of(target: str) -> str:
    """The class name of a ``model._target_`` (``a.b.DPSWDGenerator`` -> ``DPSWDGenerator``)."""
    return str(target).rsplit(".", 1)[-1]


def raw_pixel_rows(images: torch.Tensor) -> torch.Tensor:
    """The DP-SWD generator convention's rows: flattened raw pixels (no normalisation),
    ``(n, C, H, W) -> (n, C H W)`` in float64.  Two rows differ by up to :func:`raw_pixel_diameter`."""
    return images.flatten(1).double()


def batch_max_rows(features: torch.Tensor) -> torch.Tensor:
    """The released DA code's rows ``g(x_i) / (2 max_j ||g(x_j)||)`` of one private batch, ``(n, d)``.

    One record with a large feature norm rescales every other row, so the rows of D and D' differ in
    all n positions (``||X - X'||_F`` up to about ``sqrt(n) / 2`` instead of 1)."""
    m = features.norm(dim=1).max()
    return features / (2.0 * m)


class RawPixelRows:
    """The DP-SWD generator convention's rows as a row map: :func:`raw_pixel_rows`, NO bound.

    ``x: (n, C, H, W)`` -> ``(n, d)`` in x's dtype; ``out_dim = d``.  Two rows differ by up to
    :func:`raw_pixel_diameter`, not 1: only a ``privacy.convention=paper`` run uses it.
    """

    def __init__(self, dim: int) -> None:
        self.out_dim = int(dim)

    def __call__(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return raw_pixel_rows(x).to(x.dtype)


def batch_max_scale(features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The released DA code's rows ``g(x_i) / (2 m)`` and ``m = max_j ||g(x_j)||`` of the private batch
    (:func:`batch_max_rows`; m un-noised, data-dependent).  ``(n, d) -> ((n, d), ())``."""
    m = features.norm(dim=1).max()
    return batch_max_rows(features), m


def as_convention(value: PaperConvention | dict | None) -> PaperConvention | None:
    """A method's ``convention`` argument (Hydra's ``instantiate`` hands kwargs over as dicts)."""
    if value is None or isinstance(value, PaperConvention):
        return value
    dim = value.get("sensitivity_dim")
    return PaperConvention(value.get("sigma"), float(value["epsilon"]), None if dim is None else int(dim))
