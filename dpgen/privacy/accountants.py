"""Privacy accountants for the subsampled Gaussian mechanism behind one interface.

Every accountant keeps a history of releases ``(noise_multiplier, sample_rate, steps)`` and
answers ``epsilon(delta)``.  The *noise multiplier* is the std of the Gaussian noise divided
by the L2 sensitivity of the released quantity; the sampling scheme is explicit:

* ``"poisson"``: every private record joins a batch independently with probability ``q``;
  neighbouring datasets differ by adding/removing one record.
* ``"without_replacement"``: fixed-size batches of ``B = q N`` records drawn uniformly without
  replacement; neighbouring datasets differ by replacing one record (Wang, Balle &
  Kasiviswanathan 2019, the bound the DP-SWD code uses).

``RDPAccountant`` uses autodp's analytical moments accountant (both schemes);
``PLDAccountant`` uses dp-accounting's privacy-loss-distribution accountant (Poisson only:
dp-accounting has no PLD for fixed-size sampling without replacement).

Calibration (the sigma search) sits on top of these in ``privacy.calibration``.  No Hydra import
here: this module is usable on its own.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import asdict, dataclass

from .errors import PrivacySettingError

SAMPLING_SCHEMES: tuple[str, ...] = ("poisson", "without_replacement")


def check_sampling(sampling: str) -> str:
    if sampling not in SAMPLING_SCHEMES:
        raise PrivacySettingError("sampling", f"unknown sampling scheme {sampling!r}; choose one of "
                                              f"{', '.join(SAMPLING_SCHEMES)}")
    return sampling


def check_epsilon_delta(epsilon: float | None, delta: float) -> None:
    if epsilon is not None and not (epsilon > 0 and math.isfinite(epsilon)):
        raise PrivacySettingError("target_epsilon", f"the target epsilon must be a positive finite number, got "
                                                    f"{epsilon}; e.g. 10")
    if not 0.0 < delta < 1.0:
        raise PrivacySettingError("delta", f"delta must be in (0, 1), got {delta}; e.g. 1e-5")


@dataclass(frozen=True)
class Release:
    """``steps`` compositions of a subsampled Gaussian with this noise multiplier and rate."""

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        if self.noise_multiplier < 0 or not math.isfinite(self.noise_multiplier):
            raise ValueError(f"noise_multiplier must be finite and >= 0, got {self.noise_multiplier}")
        if not 0.0 < self.sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be in (0, 1], got {self.sample_rate}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


class Accountant(ABC):
    """Common interface: ``spend``, ``epsilon``, ``epsilon_of`` (calibration: ``privacy.calibration``)."""

    name: str = "base"

    def __init__(self, sampling: str = "poisson") -> None:
        self.sampling = check_sampling(sampling)
        self.history: list[Release] = []

    # -- bookkeeping ---------------------------------------------------------------------
    def spend(self, noise_multiplier: float, sample_rate: float, steps: int = 1) -> None:
        """Record ``steps`` releases; consecutive identical releases are merged."""
        rel = Release(float(noise_multiplier), float(sample_rate), int(steps))
        last = self.history[-1] if self.history else None
        if last and last.noise_multiplier == rel.noise_multiplier and last.sample_rate == rel.sample_rate:
            self.history[-1] = Release(last.noise_multiplier, last.sample_rate, last.steps + rel.steps)
        else:
            self.history.append(rel)

    def reset(self) -> None:
        self.history = []

    def state_dict(self) -> dict:
        return {"name": self.name, "sampling": self.sampling, "history": [asdict(r) for r in self.history]}

    def load_state_dict(self, state: dict) -> None:
        if state["sampling"] != self.sampling:
            raise PrivacySettingError("sampling", f"cannot resume: the checkpoint was accounted with "
                                                  f"sampling={state['sampling']!r} but this run uses "
                                                  f"{self.sampling!r}; resume with the same sampling")
        self.history = [Release(**r) for r in state["history"]]

    # -- queries -------------------------------------------------------------------------
    def epsilon(self, delta: float) -> float:
        """Smallest epsilon this accountant certifies at ``delta`` for the recorded history."""
        return self.epsilon_of(self.history, delta)

    def epsilon_of(self, history: list[Release], delta: float) -> float:
        """Epsilon of an arbitrary history (pure; does not touch ``self.history``)."""
        if not 0.0 < delta < 1.0:
            return math.inf
        history = [r for r in history if r.steps > 0]
        if not history:
            return 0.0
        if any(r.noise_multiplier == 0 for r in history):
            return math.inf  # an un-noised release
        key = (*self._cache_key(), tuple(history), float(delta))
        return _cached_epsilon(key, lambda: self._epsilon(history, delta))

    @abstractmethod
    def _epsilon(self, history: list[Release], delta: float) -> float:
        """Epsilon of a non-empty history of noisy releases, at a valid delta."""

    def _cache_key(self) -> tuple:
        """What besides the history and delta determines epsilon (for the evaluation cache)."""
        return (type(self).__name__, self.sampling)


# -- cached accountant evaluations (the calibration searches call epsilon_of many times) ----------
_EPS_CACHE: OrderedDict = OrderedDict()
_EPS_CACHE_SIZE = 4096


def clear_epsilon_cache() -> None:
    """Forget every cached evaluation (a benchmark times a search from a cold cache)."""
    _EPS_CACHE.clear()


def _cached_epsilon(key: tuple, compute) -> float:
    """LRU cache of accountant evaluations (an accountant call costs 0.05-0.5 s at MNIST scale)."""
    if key in _EPS_CACHE:
        _EPS_CACHE.move_to_end(key)
        return _EPS_CACHE[key]
    value = compute()
    _EPS_CACHE[key] = value
    if len(_EPS_CACHE) > _EPS_CACHE_SIZE:
        _EPS_CACHE.popitem(last=False)
    return value


def _autodp(name: str):
    """autodp's module ``name``, imported without the SyntaxWarnings Python prints whenever it compiles autodp's
    source afresh (``is 0`` comparisons; every run under PYTHONDONTWRITEBYTECODE=1): not the user's to read."""
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return importlib.import_module(f"autodp.{name}")


class RDPAccountant(Accountant):
    """Rényi-DP accountant (autodp ``anaRDPacct``) for the subsampled Gaussian.

    ``epsilon`` minimises ``RDP(alpha) + log(1/delta)/(alpha-1)`` over integer orders 2..m
    (m doubled up to 500 while the objective decreases) and then over real alpha around the
    best integer (autodp's ``get_eps``), exactly as the DP-SWD reference code (DP-SWD paper, σ calibration).
    """

    name = "rdp"

    def __init__(self, sampling: str = "poisson", m: int = 100, m_max: int = 500) -> None:
        super().__init__(sampling)
        self.m, self.m_max = m, m_max

    def _cache_key(self) -> tuple:
        return (*super()._cache_key(), self.m, self.m_max)

    def _epsilon(self, history: list[Release], delta: float) -> float:
        rdp_acct, rdp_bank = _autodp("rdp_acct"), _autodp("rdp_bank")
        acct = rdp_acct.anaRDPacct(m=self.m, m_max=self.m_max)
        for r in history:
            sig = r.noise_multiplier

            def func(alpha: float, sig: float = sig) -> float:
                return rdp_bank.RDP_gaussian({"sigma": sig}, alpha)

            if r.sample_rate >= 1.0:
                acct.compose_mechanism(func, coeff=r.steps)
            elif self.sampling == "poisson":
                acct.compose_poisson_subsampled_mechanisms(func, r.sample_rate, coeff=r.steps)
            else:
                acct.compose_subsampled_mechanism(func, r.sample_rate, coeff=r.steps)
        return float(acct.get_eps(delta))


class PLDAccountant(Accountant):
    """Privacy-loss-distribution accountant (Google dp-accounting), Poisson sampling only."""

    name = "pld"

    def __init__(self, sampling: str = "poisson", value_discretization_interval: float = 1e-3) -> None:
        super().__init__(sampling)
        if self.sampling != "poisson":
            raise PrivacySettingError("sampling", "the PLD accountant (dp-accounting) supports Poisson sampling "
                                                  "only; use Poisson sampling, or the RDP accountant for sampling "
                                                  "without replacement")
        self.value_discretization_interval = value_discretization_interval

    def _cache_key(self) -> tuple:
        return (*super()._cache_key(), self.value_discretization_interval)

    def _epsilon(self, history: list[Release], delta: float) -> float:
        import dp_accounting

        events = []
        for r in history:
            ev = dp_accounting.GaussianDpEvent(r.noise_multiplier)
            if r.sample_rate < 1.0:
                ev = dp_accounting.PoissonSampledDpEvent(r.sample_rate, ev)
            events.append(dp_accounting.SelfComposedDpEvent(ev, r.steps))
        acct = dp_accounting.pld.PLDAccountant(
            value_discretization_interval=self.value_discretization_interval
        )
        acct.compose(dp_accounting.ComposedDpEvent(events))
        return float(acct.get_epsilon(delta))


def analytic_gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact epsilon of one (un-subsampled) Gaussian mechanism at ``delta`` (Balle & Wang 2018, autodp)."""
    if noise_multiplier <= 0:
        return math.inf
    return float(_autodp("dp_bank").get_eps_ana_gaussian(noise_multiplier, delta))


CALIBRATE_WITH: tuple[str, ...] = ("auto", "rdp", "pld")


def calibrating_accountant(sampling: str, calibrate_with: str = "auto") -> str:
    """The accountant that calibrates the noise AND stops the run (``accountant.calibrate_with``).

    ``auto``: PLD (dp-accounting; tight for the Poisson subsampled Gaussian, add/remove neighbours)
    when sampling is Poisson, RDP (autodp) otherwise (dp-accounting has no PLD for fixed-size
    sampling without replacement).
    """
    check_sampling(sampling)
    if calibrate_with not in CALIBRATE_WITH:
        raise PrivacySettingError("calibrate_with", f"calibrating accountant {calibrate_with!r} is unknown; choose "
                                                    f"one of {', '.join(CALIBRATE_WITH)}")
    if calibrate_with == "auto":
        return "pld" if sampling == "poisson" else "rdp"
    if calibrate_with == "pld" and sampling != "poisson":
        raise PrivacySettingError("calibrate_with", "the PLD accountant needs Poisson sampling (dp-accounting has no "
                                                    "PLD for sampling without replacement); use auto or rdp")
    return calibrate_with


def make_accountant(name: str, sampling: str) -> Accountant:
    """Build an accountant by its short name (``rdp`` or ``pld``)."""
    if name == "rdp":
        return RDPAccountant(sampling)
    if name == "pld":
        return PLDAccountant(sampling)
    raise ValueError(f"unknown accountant {name!r}; choose rdp or pld")
