"""The privacy ledger: every private release of a run, and the epsilon it has cost.

A run records each private step with ``record(noise_multiplier, sample_rate)``.  The ledger
answers epsilon at any delta under each accountant (RDP via autodp; PLD via dp-accounting when
the sampling is Poisson), is saved inside every checkpoint (``state_dict``), and tells the
training loop when the next step would exceed the target epsilon (``allows``).

Mechanisms whose sensitivity bound holds only with probability ``1 - beta`` per release
(DP-SWD's random projections, spec dpswd.md §1.3) reserve ``beta`` of delta per step: the
ledger reports ``(eps, delta)`` with the conversion done at ``delta - sum_t beta_t``
(union bound over the releases; Prop. 2 is the one-release case).

*Reported* accountants (``add_reported``): data-dependent or non-standard accountants such as the
Bayesian (BA) and Wasserstein (WA) accountants of ``privacy.bayesian`` / ``privacy.wdp`` receive
per-step statistics from the method directly (``ledger.reported[name].step(...)``), are saved in
``state_dict`` and appear in ``summary()`` as ``epsilon_<name>`` with a label.  They are NEVER used
for calibration or for the budget stop: RDP calibrates and ``allowance`` enforces the target.
They are computed from un-noised statistics of private records (WA, BA), so publishing them is not
covered by the run's epsilon: they need the explicit opt-in ``data_dependent_reports=True``
(``accountant.data_dependent_reports=true``), and such a run is labelled
``"not DP: data-dependent reports"`` in ``summary()`` (results.json, the printed table, W&B).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from .accountants import (
    PLDAccountant,
    RDPAccountant,
    Release,
    check_epsilon_delta,
    check_sampling,
)

NOT_DP_DATA_DEPENDENT = "not DP: data-dependent reports"


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
        data_dependent_reports: bool = False,
    ) -> None:
        check_epsilon_delta(epsilon, delta)
        self.data_dependent_reports = bool(data_dependent_reports)
        self.target_epsilon = None if epsilon is None else float(epsilon)
        self.delta = float(delta)
        self.sampling = check_sampling(sampling)
        self.dataset_size = dataset_size
        self.entries: list[LedgerEntry] = []
        self._rdp = RDPAccountant(sampling)
        self._pld = PLDAccountant(sampling) if sampling == "poisson" else None
        self._allowance_cache: dict = {}
        self.reported: dict = {}  # name -> reported-only accountant (epsilon(delta), state_dict, label)
        self._pending_reported: dict = {}  # states from a checkpoint waiting for add_reported

    # -- reported-only accountants ---------------------------------------------------------
    def add_reported(self, accountant) -> None:
        """Attach a reported-only accountant (needs ``name``, ``label``, ``epsilon(delta)``,
        ``state_dict``, ``load_state_dict``).  A state from a loaded checkpoint is restored into it."""
        name = accountant.name
        if name in ("rdp", "pld"):
            raise ValueError(f"reported accountant name {name!r} clashes with the calibrating accountants")
        if not self.data_dependent_reports:
            raise ValueError(f"the {name!r} accountant is computed from un-noised private statistics and would be "
                             "published outside the guarantee: set accountant.data_dependent_reports=true to report "
                             "it (the run is then labelled 'not DP: data-dependent reports')")
        self.reported[name] = accountant
        if name in self._pending_reported:
            accountant.load_state_dict(self._pending_reported.pop(name))

    def calibrate(self, sample_rate: float, steps: int) -> float:
        """Noise multiplier for ``steps`` more releases at ``sample_rate`` so that RDP epsilon <= target
        (the recorded history included).  For releases without a per-step sensitivity reservation
        (DP-SGD: clipping makes the bound hold surely); DP-SWD calibrates with ``calibrate_dpswd``."""
        if self.target_epsilon is None:
            raise ValueError("calibration needs accountant.epsilon (a number), got null")
        self._rdp.history = self._releases(self.entries)
        try:
            return self._rdp.calibrate(self.target_epsilon, self.delta - self.delta_reserved, sample_rate, steps)
        finally:
            self._rdp.reset()

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

    def epsilon(self, delta: float | None = None, accountant: str = "rdp") -> float | None:
        """Epsilon spent so far at ``delta`` (default: the run's delta).

        Returns ``None`` for the PLD accountant when sampling is without replacement
        (dp-accounting has no PLD for that sampler).
        """
        if accountant not in ("rdp", "pld"):
            raise ValueError(f"unknown accountant {accountant!r}; choose rdp or pld")
        return self._eps(self.entries, self.delta if delta is None else delta, accountant)

    def allowance(self, noise_multiplier: float, sample_rate: float, delta_per_step: float = 0.0) -> int:
        """How many more releases with these parameters keep RDP epsilon <= target.

        Exponential then binary search over the step count (epsilon is non-decreasing in it);
        cached, so the per-step check in a training loop costs nothing.
        """
        if self.target_epsilon is None:
            return 2**62
        key = (tuple(self.entries), noise_multiplier, sample_rate, delta_per_step)
        if key in self._allowance_cache:
            return self._allowance_cache[key]

        def ok(s: int) -> bool:
            extra = LedgerEntry(noise_multiplier, sample_rate, s, delta_per_step)
            eps = self._eps(self.entries + [extra], self.delta, "rdp")
            return eps is not None and eps <= self.target_epsilon

        if not ok(1):
            n = 0
        else:
            lo, hi = 1, 2
            while ok(hi):
                lo, hi = hi, hi * 2
                if hi > 2**40:
                    break
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if ok(mid):
                    lo = mid
                else:
                    hi = mid
            n = lo
        self._allowance_cache = {key: n}
        return n

    def summary(self) -> dict:
        eps_rdp = self.epsilon(accountant="rdp")
        eps_pld = self.epsilon(accountant="pld")
        return {
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "delta_reserved_for_sensitivity": self.delta_reserved,
            "sampling": self.sampling,
            "private_steps": self.steps,
            "epsilon_rdp": eps_rdp,
            "epsilon_pld": eps_pld,
            "epsilon_pld_note": None
            if eps_pld is not None
            else "dp-accounting has no PLD for fixed-size sampling without replacement",
            "data_dependent_reports": self.data_dependent_reports,
            **({"status": NOT_DP_DATA_DEPENDENT} if self.data_dependent_reports else {}),
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
                                            "stop training (epsilon_rdp is the guarantee)")
        return out

    # -- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "sampling": self.sampling,
            "dataset_size": self.dataset_size,
            "data_dependent_reports": self.data_dependent_reports,
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
        old_reports = bool(state.get("data_dependent_reports", bool(state.get("reported"))))
        if old_reports != self.data_dependent_reports:
            raise ValueError(f"checkpoint ledger has data_dependent_reports={old_reports} but this run has "
                             f"{self.data_dependent_reports}; resume with accountant.data_dependent_reports="
                             f"{str(old_reports).lower()}")
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
                  bool(state.get("data_dependent_reports", bool(state.get("reported")))))
        led.load_state_dict(state)
        return led
