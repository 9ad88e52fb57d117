"""The privacy ledger: every private release of a run, and the epsilon it has cost.

A run records each private step with ``record(noise_multiplier, sample_rate)``.  The ledger
answers epsilon at any delta under each accountant (RDP via autodp; PLD via dp-accounting when
the sampling is Poisson), is saved inside every checkpoint (``state_dict``), and tells the
training loop when the next step would exceed the target epsilon (``allowance``).

ONE accountant calibrates the noise and stops the run: ``calibrating_accountant``, chosen by
``accountant.calibrate_with`` (``auto``: PLD for Poisson sampling with add/remove neighbours — the
tightest valid accounting of the subsampled Gaussian, ~5-11 % less noise than RDP at the presets'
scales — and RDP for sampling without replacement).  ``calibrate`` and ``allowance`` both use it,
so a PLD-calibrated sigma is never stopped early by RDP; every accountant's epsilon is reported.

Mechanisms whose sensitivity bound holds only with probability ``1 - beta`` per release
(DP-SWD's random projections, spec dpswd.md §1.3) reserve ``beta`` of delta per step: the
ledger reports ``(eps, delta)`` with the conversion done at ``delta - sum_t beta_t``
(union bound over the releases; Prop. 2 is the one-release case).

*Reported* accountants (``add_reported``): data-dependent or non-standard accountants such as the
Bayesian (BA) and Wasserstein (WA) accountants of ``privacy.bayesian`` / ``privacy.wdp`` receive
per-step statistics from the method directly (``ledger.reported[name].step(...)``), are saved in
``state_dict`` and appear in ``summary()`` as ``epsilon_<name>`` with a label.  They are NEVER used
for calibration or for the budget stop: the calibrating accountant does both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .accountants import (
    PLDAccountant,
    RDPAccountant,
    Release,
    calibrating_accountant,
    check_epsilon_delta,
    check_sampling,
    largest_steps_within,
    solve_noise_multiplier,
)


@dataclass(frozen=True)
class LedgerEntry:
    noise_multiplier: float
    sample_rate: float
    steps: int
    delta_per_step: float = 0.0  # failure probability of the sensitivity bound, per release


class PrivacyLedger:
    """Records private releases; answers epsilon; enforces the target epsilon."""

    def __init__(
        self,
        epsilon: float | None,
        delta: float,
        sampling: str = "poisson",
        dataset_size: int | None = None,
        calibrate_with: str = "auto",
    ) -> None:
        check_epsilon_delta(epsilon, delta)
        self.calibrate_with = calibrate_with
        self.calibrating_accountant = calibrating_accountant(sampling, calibrate_with)  # "pld" | "rdp"
        self.target_epsilon = None if epsilon is None else float(epsilon)
        self.delta = float(delta)
        self.sampling = check_sampling(sampling)
        self.dataset_size = dataset_size
        self.entries: list[LedgerEntry] = []
        self._rdp = RDPAccountant(sampling)
        self._pld = PLDAccountant(sampling) if sampling == "poisson" else None
        self._allowance_cache: dict = {}
        self._planned: dict = {}  # (multiplier, rate, beta) -> steps of the last calibration (allowance's guess)
        self.reported: dict = {}  # name -> reported-only accountant (epsilon(delta), state_dict, label)
        self._pending_reported: dict = {}  # states from a checkpoint waiting for add_reported

    # -- reported-only accountants ---------------------------------------------------------
    def add_reported(self, accountant) -> None:
        """Attach a reported-only accountant (needs ``name``, ``label``, ``epsilon(delta)``,
        ``state_dict``, ``load_state_dict``).  A state from a loaded checkpoint is restored into it."""
        name = accountant.name
        if name in ("rdp", "pld"):
            raise ValueError(f"reported accountant name {name!r} clashes with the calibrating accountants")
        self.reported[name] = accountant
        if name in self._pending_reported:
            accountant.load_state_dict(self._pending_reported.pop(name))

    def calibrate(self, sample_rate: float, steps: int, delta_per_step: float = 0.0) -> float:
        """Noise multiplier for ``steps`` more releases at ``sample_rate`` so that the calibrating
        accountant's epsilon <= target (the recorded history included, and ``delta_per_step`` of
        delta reserved per release for a sensitivity bound that holds with probability 1 - beta).
        Never above the target: the returned multiplier's epsilon was evaluated; ``allowance`` with
        the same arguments is then >= ``steps``."""
        if self.target_epsilon is None:
            raise ValueError("calibration needs accountant.epsilon (a number), got null")
        steps = int(steps)

        def eps(sig: float) -> float:
            e = self._eps(self.entries + [LedgerEntry(sig, sample_rate, steps, delta_per_step)], self.delta,
                          self.calibrating_accountant)
            return math.inf if e is None else e

        sigma = solve_noise_multiplier(eps, self.target_epsilon, what=f"sample_rate={sample_rate}, steps={steps}")
        self._planned = {(sigma, float(sample_rate), float(delta_per_step)): steps}
        return sigma

    # -- recording -----------------------------------------------------------------------
    def record(
        self, noise_multiplier: float, sample_rate: float, steps: int = 1, delta_per_step: float = 0.0
    ) -> None:
        Release(noise_multiplier, sample_rate, steps)  # validates
        e = LedgerEntry(float(noise_multiplier), float(sample_rate), int(steps), float(delta_per_step))
        last = self.entries[-1] if self.entries else None
        if last and (last.noise_multiplier, last.sample_rate, last.delta_per_step) == (
            e.noise_multiplier, e.sample_rate, e.delta_per_step
        ):
            self.entries[-1] = LedgerEntry(
                last.noise_multiplier, last.sample_rate, last.steps + e.steps, last.delta_per_step
            )
        else:
            self.entries.append(e)

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.entries)

    @property
    def delta_reserved(self) -> float:
        """Total failure probability of the per-release sensitivity bounds (union bound)."""
        return sum(e.steps * e.delta_per_step for e in self.entries)

    # -- queries -------------------------------------------------------------------------
    @staticmethod
    def _releases(entries: list[LedgerEntry]) -> list[Release]:
        return [Release(e.noise_multiplier, e.sample_rate, e.steps) for e in entries]

    def _eps(self, entries: list[LedgerEntry], delta: float, accountant: str) -> float | None:
        acct = self._rdp if accountant == "rdp" else self._pld
        if acct is None:
            return None
        reserved = sum(e.steps * e.delta_per_step for e in entries)
        delta_conv = delta - reserved
        if delta_conv <= 0:
            return math.inf
        return acct.epsilon_of(self._releases(entries), delta_conv)

    def epsilon(self, delta: float | None = None, accountant: str | None = None) -> float | None:
        """Epsilon spent so far at ``delta`` (default: the run's delta) under ``accountant``
        (default: the calibrating accountant, whose epsilon is the run's guarantee).

        Returns ``None`` for the PLD accountant when sampling is without replacement
        (dp-accounting has no PLD for that sampler).
        """
        accountant = self.calibrating_accountant if accountant is None else accountant
        if accountant not in ("rdp", "pld"):
            raise ValueError(f"unknown accountant {accountant!r}; choose rdp or pld")
        return self._eps(self.entries, self.delta if delta is None else delta, accountant)

    def allowance(self, noise_multiplier: float, sample_rate: float, delta_per_step: float = 0.0,
                  guess: int | None = None) -> int:
        """How many more releases with these parameters keep the calibrating accountant's epsilon
        <= target (``guess``: e.g. the planned steps, to start the search there).

        Interpolation search over the step count (epsilon is non-decreasing in it, and both the
        answer ``n`` and ``n + 1`` are evaluated); cached, so the per-step check in a training loop
        costs nothing.
        """
        if self.target_epsilon is None:
            return 2**62
        key = (tuple(self.entries), noise_multiplier, sample_rate, delta_per_step)
        if key in self._allowance_cache:
            return self._allowance_cache[key]

        def eps(s: int) -> float:
            extra = LedgerEntry(noise_multiplier, sample_rate, s, delta_per_step)
            e = self._eps(self.entries + [extra], self.delta, self.calibrating_accountant)
            return math.inf if e is None else e

        if guess is None:  # the steps a calibration planned for this release, when there was one
            guess = self._planned.get((noise_multiplier, sample_rate, delta_per_step), 1000)
        n = largest_steps_within(eps, self.target_epsilon, guess=guess, max_steps=2**40)
        self._allowance_cache = {key: n}
        return n

    def summary(self) -> dict:
        eps_rdp = self.epsilon(accountant="rdp")
        eps_pld = self.epsilon(accountant="pld")
        return {
            "target_epsilon": self.target_epsilon,
            "epsilon": eps_pld if self.calibrating_accountant == "pld" else eps_rdp,
            "calibrating_accountant": self.calibrating_accountant,
            "delta": self.delta,
            "delta_reserved_for_sensitivity": self.delta_reserved,
            "sampling": self.sampling,
            "private_steps": self.steps,
            "epsilon_rdp": eps_rdp,
            "epsilon_pld": eps_pld,
            "epsilon_pld_note": None
            if eps_pld is not None
            else "dp-accounting has no PLD for fixed-size sampling without replacement",
            **self._reported_summary(),
        }

    def _reported_summary(self) -> dict:
        if not self.reported:
            return {}
        out: dict = {}
        notes = {}
        for name, acct in self.reported.items():
            out[f"epsilon_{name}"] = float(acct.epsilon(self.delta))
            notes[name] = acct.label
        out["reported_accountants"] = notes
        out["reported_accountants_note"] = ("reported for comparison only; never used to calibrate noise or to "
                                            "stop training (`epsilon`, the calibrating accountant's, is the guarantee)")
        return out

    # -- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "sampling": self.sampling,
            "calibrate_with": self.calibrate_with,
            "dataset_size": self.dataset_size,
            "entries": [asdict(e) for e in self.entries],
            **({"reported": {k: a.state_dict() for k, a in self.reported.items()}} if self.reported else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        for key in ("delta", "sampling"):
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"checkpoint ledger has {key}={state[key]!r} but this run has "
                    f"{getattr(self, key)!r}; resume with the same accountant settings"
                )
        saved = state.get("calibrate_with")  # absent in checkpoints written before the setting existed
        if saved is not None and calibrating_accountant(self.sampling, saved) != self.calibrating_accountant:
            raise ValueError(f"checkpoint ledger has accountant.calibrate_with={saved!r} but this run has "
                             f"{self.calibrate_with!r}; resume with the same setting")
        self.entries = [LedgerEntry(**e) for e in state["entries"]]
        self._allowance_cache = {}
        pending = dict(state.get("reported", {}))
        for name, acct in self.reported.items():
            if name in pending:
                acct.load_state_dict(pending.pop(name))
        self._pending_reported = pending

    @classmethod
    def from_state_dict(cls, state: dict) -> PrivacyLedger:
        led = cls(state["target_epsilon"], state["delta"], state["sampling"], state.get("dataset_size"),
                  calibrate_with=state.get("calibrate_with", "auto"))
        led.load_state_dict(state)
        return led
