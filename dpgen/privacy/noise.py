"""Noise policies: how a mechanism's noise is fixed, given to the mechanism ONCE, when it is built.

A :class:`~dpgen.privacy.mechanisms.Mechanism` is built with one of these and applies it itself
before its first release (``Mechanism(..., noise=policy)``); nothing changes its noise afterwards.

=====================  ==========================================================================
policy                 the noise of each release
=====================  ==========================================================================
``Calibrated()``       the smallest multiplier whose ``steps`` planned releases spend the ledger's
                       target epsilon (``ledger.calibrate`` with the release's reserved beta).
                       ``history=True``: the releases the ledger already holds when the mechanism
                       is built count too (a second phase calibrated on what is left of the budget);
                       ``epsilon_share``: a first phase spends only this share of the target
``FixedMultiplier(m)`` std = ``m * sensitivity``; the epsilon it gives is reported (the budget stop holds)
``FixedStd(s)``        std = ``s``, multiplier = ``s / sensitivity``; the epsilon it gives is reported
``PaperNoise(s)``      a paper's fixed std measured against the sensitivity the paper STATES (optionally
                       at another dimension, ``stated_dim``); every release is labelled "paper convention"
``NotPrivate(s)``      no accounted noise (epsilon = infinity); ``s`` > 0 smooths a non-private run
=====================  ==========================================================================

A run decides its policy ONCE, from the method's settings (:class:`NoiseSettings`: ``model.private``,
``model.noise_multiplier``, ``model.noise_std``, the paper convention's std, a warm start's share), with
:func:`build_policy`; the pipeline hands the result to the method (``Method.take_noise``), whose one hook
``noise_form`` may restate it in the method's own terms (DP-Sinkhorn: a fixed sigma is a std 2 C sigma).

The policies are plain frozen dataclasses: they compare equal by value, so a resumed run can check that
it applies the policy of the checkpoint (``Mechanism.load_state_dict``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .errors import PrivacySettingError


@dataclass(frozen=True)
class Calibrated:
    """Calibrate the noise to the ledger's target epsilon for the mechanism's ``steps`` planned releases.

    ``history=False`` (a run's own noise): the planned releases alone spend the target; the noise is fixed
    before the first step and is the same on a resume; releases recorded earlier are enforced by the
    loop's budget stop.  ``history=True``: the ledger's releases recorded BEFORE the mechanism is built
    are composed with the planned ones (``ledger.calibrate(..., history=True)``), so a later phase spends
    only what an earlier one left; the number of earlier releases is part of the calibration a resume
    checks, so the mechanism of such a phase must be built with the ledger as it stood before the phase.
    ``epsilon_share`` < 1: the planned releases spend only this share of the target (the first phase of a
    run whose later phase spends what is left, e.g. the warm start's moment release).
    """

    history: bool = False
    epsilon_share: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < float(self.epsilon_share) <= 1.0:
            raise PrivacySettingError("epsilon_share", f"a share of the target epsilon must lie in (0, 1], got "
                                                       f"{self.epsilon_share}")
        object.__setattr__(self, "epsilon_share", float(self.epsilon_share))


@dataclass(frozen=True)
class FixedMultiplier:
    """A fixed noise multiplier (std = multiplier * sensitivity); the epsilon it gives is reported."""

    multiplier: float

    def __post_init__(self) -> None:
        if not (float(self.multiplier) > 0 and math.isfinite(float(self.multiplier))):
            raise PrivacySettingError("noise_multiplier", f"a private release needs a noise multiplier > 0, got "
                                                          f"{self.multiplier}")
        object.__setattr__(self, "multiplier", float(self.multiplier))


@dataclass(frozen=True)
class FixedStd:
    """A fixed noise std (multiplier = std / sensitivity); the epsilon it gives is reported."""

    noise_std: float

    def __post_init__(self) -> None:
        if not (float(self.noise_std) > 0 and math.isfinite(float(self.noise_std))):
            raise PrivacySettingError("noise_std", f"a private release needs a noise std > 0, got {self.noise_std}")
        object.__setattr__(self, "noise_std", float(self.noise_std))


@dataclass(frozen=True)
class PaperNoise:
    """A paper's fixed noise std, accounted against the sensitivity the paper states, labelled
    "paper convention" (never rigorous).  ``stated_dim``: the dimension the paper's code plugs into the
    projection bound when it is not the rows' own (projection releases only; the true epsilon keeps
    the rows' dimension)."""

    noise_std: float
    stated_dim: int | None = None

    def __post_init__(self) -> None:
        if not (float(self.noise_std) > 0 and math.isfinite(float(self.noise_std))):
            raise PrivacySettingError("noise_std", f"a paper's noise std must be > 0, got {self.noise_std}")
        if self.stated_dim is not None and (isinstance(self.stated_dim, bool) or int(self.stated_dim) < 1):
            raise PrivacySettingError("stated_dim", f"a stated sensitivity dimension must be a positive integer, got "
                                                    f"{self.stated_dim}")
        object.__setattr__(self, "noise_std", float(self.noise_std))
        if self.stated_dim is not None:
            object.__setattr__(self, "stated_dim", int(self.stated_dim))


@dataclass(frozen=True)
class PaperProjectionNoise:
    """``privacy.convention=paper`` for a projection release of unit rows (the DPSWflow paper's released code): the
    std that code computes, ``sigma · 2 sqrt(w_CLT(k, d, δ/2))`` for a per-step release from the stated ``sigma``,
    ``c S / ε`` for the one-shot release from the stated ``epsilon``, with ``d`` the stated sensitivity dimension
    when given (``stated_dim``) else the rows'.  The release that knows ``k``, ``d`` and δ turns it into the
    :class:`PaperNoise` it applies (:func:`dpgen.privacy.mechanisms.paper_projection_noise`)."""

    sigma: float | None = None
    epsilon: float | None = None
    stated_dim: int | None = None


@dataclass(frozen=True)
class NotPrivate:
    """No accounted noise: each release is recorded with multiplier 0 (epsilon = infinity).
    ``smoothing_std`` > 0 adds un-accounted smoothing noise (a non-private run of a smoothed loss)."""

    smoothing_std: float = 0.0

    def __post_init__(self) -> None:
        if not (float(self.smoothing_std) >= 0 and math.isfinite(float(self.smoothing_std))):
            raise PrivacySettingError("smoothing_std", f"a smoothing noise std must be >= 0, got {self.smoothing_std}")
        object.__setattr__(self, "smoothing_std", float(self.smoothing_std))


NoisePolicy = Calibrated | FixedMultiplier | FixedStd | PaperNoise | PaperProjectionNoise | NotPrivate
POLICIES = (Calibrated, FixedMultiplier, FixedStd, PaperNoise, PaperProjectionNoise, NotPrivate)


def describe_policy(policy: NoisePolicy) -> dict:
    """``{"policy": <class name>, **fields}``: what a checkpoint and results.json hold."""
    return {"policy": type(policy).__name__, **asdict(policy)}


def check_policy(policy: object) -> NoisePolicy:
    """``policy`` if it is one of :data:`POLICIES`, else a :class:`PrivacySettingError`."""
    if not isinstance(policy, POLICIES):
        raise PrivacySettingError("noise", f"a mechanism's noise must be one of "
                                           f"{', '.join(p.__name__ for p in POLICIES)}, got {policy!r}")
    return policy


@dataclass(frozen=True)
class NoiseSettings:
    """What a method's settings say about its noise, before any policy is chosen.

    ``private``: an accounted run; ``noise_multiplier``: a fixed multiplier (None: calibrated);
    ``noise_std``: a NON-private run's smoothing; ``paper_std``: ``privacy.convention=paper``'s fixed std;
    ``epsilon_share`` < 1: a first phase that spends only this share of the target; ``history``: a later
    phase calibrated on what the ledger's earlier releases leave (the warm start's phase 2).  ``scope``:
    where the settings sit below the method (e.g. ``alignment``), so an error names the right setting.
    """

    private: bool = True
    noise_multiplier: float | None = None
    noise_std: float = 0.0
    paper_std: float | None = None
    epsilon_share: float = 1.0
    history: bool = False
    scope: str = ""
    paper_projection: PaperProjectionNoise | None = None  # the paper convention of a projection release


def build_policy(s: NoiseSettings) -> NoisePolicy:
    """THE decision of a run's noise: ``NotPrivate(noise_std)`` for a non-private run, the paper's
    ``PaperNoise`` (a projection release's: ``PaperProjectionNoise``) under the paper convention, ``FixedMultiplier`` for a given multiplier, else
    ``Calibrated`` to the target (with the share / history of a phase).  A bad setting is a
    :class:`PrivacySettingError` naming it (``<scope>.noise_multiplier`` / ``<scope>.noise_std``)."""
    scope = f"{s.scope}." if s.scope else ""
    if not s.private:  # a noise multiplier is a private run's setting: unused here
        try:
            return NotPrivate(float(s.noise_std))
        except PrivacySettingError as e:
            raise PrivacySettingError(f"{scope}noise_std", str(e)) from None
    if s.noise_std:
        raise PrivacySettingError(f"{scope}noise_std", "is the smoothing of a NON-private run (private=false); a "
                                                       "private run calibrates its noise from the target epsilon: drop it")
    if s.paper_projection is not None:
        return s.paper_projection
    if s.paper_std is not None:
        return PaperNoise(s.paper_std)
    if s.noise_multiplier is None:
        return Calibrated(history=s.history, epsilon_share=s.epsilon_share)
    try:
        return FixedMultiplier(s.noise_multiplier)
    except PrivacySettingError:
        raise PrivacySettingError(f"{scope}noise_multiplier", f"must be > 0, or null (calibrated to the "
                                                              f"target epsilon), got {s.noise_multiplier}") from None
