"""The privacy ledger: every private release of a run, and the epsilon it has cost.

Releases are recorded by the mechanism objects of ``privacy.mechanisms`` (``Mechanism.release``
adds the noise and calls ``record`` in the same call; no method records by hand).  Each entry keeps
its noise multiplier (noise std / L2 sensitivity *under its neighbouring relation*), sample rate,
neighbouring relation (``add_remove`` for Poisson subsampling, ``replace_one`` for fixed-size
sampling without replacement or a release of the whole set with N public), the mechanism kind and
its guarantee label.  The ledger
answers epsilon at any delta under each accountant (RDP via autodp; PLD via dp-accounting when
the sampling is Poisson), is saved inside every checkpoint (``state_dict``), and tells the
training loop when the next step would exceed the target epsilon (``allowance``).

ONE accountant calibrates the noise and stops the run: ``calibrating_accountant``, chosen by
``accountant.calibrate_with`` (``auto``: PLD for Poisson sampling with add/remove neighbours — the
tightest valid accounting of the subsampled Gaussian, ~5-11 % less noise than RDP at the presets'
scales — and RDP for sampling without replacement).  ``calibrate`` and ``allowance`` both use it,
so a PLD-calibrated sigma is never stopped early by RDP; every accountant's epsilon is reported.

Mechanisms whose sensitivity bound holds only with probability ``1 - beta`` per release
(DP-SWD's random projections, DP-SWD paper, Lemma 2 and the CLT bound) reserve ``beta`` of delta per step: the
ledger reports ``(eps, delta)`` with the conversion done at ``delta - sum_t beta_t``
(union bound over the releases; Prop. 2 is the one-release case).

*Reported* accountants (``add_reported``): data-dependent or non-standard accountants such as the
Bayesian (BA) and Wasserstein (WA) accountants of ``privacy.bayesian`` / ``privacy.wdp`` receive
per-step statistics from the method (``ledger.reported[name].step(...)``, submitted like a record:
:class:`ReportedStep`, so a captured step accounts them after each replay), are saved in
``state_dict`` and appear in ``summary()`` as ``epsilon_<name>`` with a label.  They are NEVER used
for calibration or for the budget stop: the calibrating accountant does both.
They are computed from un-noised statistics of private records (WA, BA), so publishing them is not
covered by the run's epsilon: they need the explicit opt-in ``data_dependent_reports=True``
(``accountant.data_dependent_reports=true``), and such a run is labelled
``"not DP: data-dependent reports"`` in ``summary()`` (results.json, the printed table, W&B).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from .accountants import (
    PLDAccountant,
    RDPAccountant,
    Release,
    calibrating_accountant,
    check_epsilon_delta,
    check_sampling,
)
from .calibration import calibrate, largest_steps_within
from .errors import PrivacySettingError
from .guarantee import DATA_DEPENDENT, LABELS, RIGOROUS, combine

RELATIONS: tuple[str, ...] = ("add_remove", "replace_one")
ACCOUNTANTS: tuple[str, ...] = ("rdp", "pld")


def relation_of_sampling(sampling: str) -> str:
    """The neighbouring relation a subsampling scheme's amplification bound is stated for.

    Poisson subsampling (Mironov et al. 2019; dp-accounting): add/remove one record.  Fixed-size
    sampling without replacement (Wang, Balle & Kasiviswanathan 2019): replace one record.
    """
    return {"poisson": "add_remove", "without_replacement": "replace_one"}[check_sampling(sampling)]

NOT_DP_DATA_DEPENDENT = DATA_DEPENDENT


@dataclass(frozen=True)
class Pending:
    """A record collected by :meth:`PrivacyLedger.deferred` (a captured step's release, or its reported-only
    statistics): ``entry`` is what it adds, calling it records it (the mechanism's own recording,
    ``Mechanism._record``; a method's accounting of its reports)."""

    entry: LedgerEntry | ReportedStep
    apply: Callable[[], None]

    def __call__(self) -> None:
        self.apply()


@dataclass(frozen=True)
class LedgerEntry:
    noise_multiplier: float
    sample_rate: float
    steps: int
    delta_per_step: float = 0.0  # failure probability of the sensitivity bound, per release
    relation: str = "add_remove"  # neighbouring relation the noise multiplier is stated for
    mechanism: str = ""  # kind of release (privacy.mechanisms)
    guarantee: str = RIGOROUS  # privacy.guarantee label

    def same_release(self, other: LedgerEntry) -> bool:
        """Everything but ``steps`` equal (consecutive such entries are merged)."""
        return (self.noise_multiplier, self.sample_rate, self.delta_per_step, self.relation, self.mechanism,
                self.guarantee) == (other.noise_multiplier, other.sample_rate, other.delta_per_step, other.relation,
                                    other.mechanism, other.guarantee)


@dataclass(frozen=True)
class ReportedStep:
    """What one step adds to the reported-only accountants ``accountants`` (their per-step statistics, computed on
    the device from a release of noise std ``noise_std`` at ``sample_rate``): submitted like a release's record
    (:meth:`PrivacyLedger.submit`), so a step captured in a graph accounts them after each replay."""

    accountants: tuple[str, ...]
    noise_std: float
    sample_rate: float


class PrivacyLedger:
    """Records private releases; answers epsilon; enforces the target epsilon."""

    def __init__(
        self,
        epsilon: float | None,
        delta: float,
        sampling: str = "poisson",
        data_dependent_reports: bool = False,
        calibrate_with: str = "auto",
    ) -> None:
        check_epsilon_delta(epsilon, delta)
        self.data_dependent_reports = bool(data_dependent_reports)
        self.calibrate_with = calibrate_with
        self.calibrating_accountant = calibrating_accountant(sampling, calibrate_with)  # "pld" | "rdp"
        self.target_epsilon = None if epsilon is None else float(epsilon)
        self.delta = float(delta)
        self.sampling = check_sampling(sampling)
        self.entries: list[LedgerEntry] = []
        self._rdp = RDPAccountant(sampling)
        self._pld = PLDAccountant(sampling) if sampling == "poisson" else None
        self._allowance_cache: dict = {}
        self._planned: dict = {}  # (multiplier, rate, beta) -> steps of the last calibration (allowance's guess)
        self.reported: dict = {}  # name -> reported-only accountant (epsilon(delta), state_dict, label)
        self._pending_reported: dict = {}  # states from a checkpoint waiting for add_reported
        self._deferred: list[Pending] | None = None  # inside deferred(): the records collected, not made

    # -- a captured step's records (methods.capture) ------------------------------------------
    @contextlib.contextmanager
    def deferred(self) -> Iterator[list[Pending]]:
        """Inside, a release's record is collected in the yielded list instead of made: the Python side of a step
        captured in a CUDA graph, which the graph cannot replay.  The capture wrapper applies the collected
        records after EACH replay (one record per replayed release, the entry the eager step makes)."""
        outer, self._deferred = self._deferred, []
        try:
            yield self._deferred
        finally:
            self._deferred = outer

    def submit(self, entry: LedgerEntry | ReportedStep, apply: Callable[[], None]) -> None:
        """``apply()`` (a mechanism's recording of one release, whose ledger entry is ``entry``, or a step's
        reported-only statistics) now, or, inside :meth:`deferred`, collected for later."""
        if self._deferred is not None:
            self._deferred.append(Pending(entry, apply))
        else:
            apply()

    # -- reported-only accountants ---------------------------------------------------------
    def add_reported(self, accountant) -> None:
        """Attach a reported-only accountant (needs ``name``, ``label``, ``epsilon(delta)``,
        ``state_dict``, ``load_state_dict``).  A state from a loaded checkpoint is restored into it."""
        name = accountant.name
        if name in ("rdp", "pld"):
            raise ValueError(f"reported accountant name {name!r} clashes with the calibrating accountants")
        if not self.data_dependent_reports:
            raise PrivacySettingError("data_dependent_reports", f"the {name!r} accountant is computed from un-noised "
                                      "private statistics and would be published outside the guarantee: set it to "
                                      "true to report it (the run is then labelled 'not DP: data-dependent reports')")
        self.reported[name] = accountant
        if name in self._pending_reported:
            accountant.load_state_dict(self._pending_reported.pop(name))

    def calibrate(self, sample_rate: float, steps: int, delta_per_step: float = 0.0,
                  accountant: str | None = None, history: bool = True, epsilon: float | None = None) -> float:
        """Noise multiplier for ``steps`` more releases at ``sample_rate`` so that epsilon <= target.

        ``accountant`` (default: the ledger's ``calibrating_accountant``, which also stops the run)
        evaluates epsilon; the returned multiplier's epsilon was evaluated, so it is never above the
        target under that accountant.  The sensitivity failure probability is included: the
        conversion is done at ``delta - reserved so far - steps * delta_per_step`` (union bound).
        ``history=True``: the recorded releases are included (calibrating the rest of a run);
        ``history=False``: the ``steps`` releases alone spend the target (a run's noise is fixed
        before its first step, the same on a resume; earlier releases are enforced by the budget
        stop).  ``epsilon``: calibrate for this part of the target instead (<= target; the first phase of a
        warm-started run).  Mechanisms call this (a ``Calibrated`` noise policy); methods never calibrate themselves.
        """
        if self.target_epsilon is None:
            raise PrivacySettingError("target_epsilon", "calibrating the noise needs a target epsilon (a number), "
                                                        "got None")
        target = self.target_epsilon if epsilon is None else float(epsilon)
        if not 0 < target <= self.target_epsilon:
            raise PrivacySettingError("target_epsilon", f"a calibration target must lie in (0, {self.target_epsilon}], "
                                                        f"got {target}")
        accountant = self.calibrating_accountant if accountant is None else accountant
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"unknown accountant {accountant!r}; choose rdp or pld")
        steps = int(steps)
        past = list(self.entries) if history else []
        # the conversion's delta, as ``_eps`` computes it for these releases (union bound over the reservations)
        delta_conv = self.delta - sum([e.steps * e.delta_per_step for e in past] + [steps * delta_per_step])
        if delta_conv <= 0:
            raise PrivacySettingError("sensitivity_fraction", f"the sensitivity bounds reserve all of delta = "
                                                              f"{self.delta}; lower the share of delta they take")
        sigma = calibrate(target, delta_conv, sample_rate, steps, self.sampling, accountant,
                          history=self._releases(past))
        self._planned = {(sigma, float(sample_rate), float(delta_per_step)): steps}
        return sigma

    # -- recording -----------------------------------------------------------------------
    def record(
        self, noise_multiplier: float, sample_rate: float, steps: int = 1, delta_per_step: float = 0.0,
        relation: str | None = None, mechanism: str = "", guarantee: str = RIGOROUS,
    ) -> None:
        """Record ``steps`` releases.  Called by ``Mechanism.release`` (methods never call it).

        ``relation`` defaults to the one of the ledger's sampling; a subsampled release (q < 1) must
        use exactly that relation (the amplification bound is proven for it only).  A noise
        multiplier of 0 is an un-noised release: epsilon = infinity.
        """
        Release(noise_multiplier, sample_rate, steps)  # validates
        relation = relation_of_sampling(self.sampling) if relation is None else relation
        if relation not in RELATIONS:
            raise ValueError(f"unknown neighbouring relation {relation!r}; choose one of {', '.join(RELATIONS)}")
        if sample_rate < 1.0 and relation != relation_of_sampling(self.sampling):
            raise ValueError(f"a release subsampled with {self.sampling} sampling is accounted under "
                             f"{relation_of_sampling(self.sampling)} neighbours, not {relation}")
        if guarantee not in LABELS:
            raise ValueError(f"unknown guarantee label {guarantee!r}")
        others = {x.relation for x in self.entries
                  if x.steps > 0 and x.noise_multiplier > 0 and x.relation != relation}
        if others and steps > 0 and noise_multiplier > 0:  # an un-noised release is epsilon = inf anyway
            # Composition theorems hold for one neighbouring relation: a run whose releases are
            # stated under add/remove AND replace-one has no guarantee under either without a
            # conversion, so such a ledger is refused rather than reported as "mixed".
            raise ValueError(f"this ledger already holds releases under {', '.join(sorted(others))} neighbours; "
                             f"a release under {relation} neighbours cannot be composed with them. Record every "
                             "release of a run under one relation (Mechanism.sensitivity_under(ledger relation)).")
        e = LedgerEntry(float(noise_multiplier), float(sample_rate), int(steps), float(delta_per_step), relation,
                        str(mechanism), guarantee)
        last = self.entries[-1] if self.entries else None
        if last and last.same_release(e):
            self.entries[-1] = LedgerEntry(last.noise_multiplier, last.sample_rate, last.steps + e.steps,
                                           last.delta_per_step, last.relation, last.mechanism, last.guarantee)
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
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"unknown accountant {accountant!r}; choose rdp or pld")
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

    def by_mechanism(self) -> list[dict]:
        """Each mechanism kind's releases, in the order they were first recorded, with the epsilon of those
        releases ALONE under every accountant (at the run's delta; composition makes the run's epsilon no
        more than their sum, usually less): a warm-started run's phase 1 (``class_moments``) and phase 2.  A
        ledger of one kind gives one row with the run's own epsilon."""
        kinds = list(dict.fromkeys(e.mechanism for e in self.entries if e.steps > 0))
        rows = []
        for kind in kinds:
            entries = [e for e in self.entries if e.mechanism == kind and e.steps > 0]
            alone = {a: (self._eps(entries, self.delta, a) if len(kinds) > 1 else self.epsilon(accountant=a))
                     for a in ACCOUNTANTS}
            multipliers = sorted({e.noise_multiplier for e in entries})
            rows.append({"mechanism": kind, "releases": sum(e.steps for e in entries),
                         "noise_multiplier": multipliers[0] if len(multipliers) == 1 else multipliers,
                         "sample_rate": entries[0].sample_rate,
                         "epsilon": alone[self.calibrating_accountant],
                         **{f"epsilon_{a}": v for a, v in alone.items()}})
        return rows

    def allowance(self, noise_multiplier: float, sample_rate: float, delta_per_step: float = 0.0,
                  accountant: str | None = None, at_most: int | None = None, guess: int | None = None) -> int:
        """How many more releases with these parameters keep epsilon <= target (see ``allowance_for``)."""
        return self.allowance_for([LedgerEntry(noise_multiplier, sample_rate, 1, delta_per_step)], accountant,
                                  at_most, guess)

    def allowance_for(self, per_step: list[LedgerEntry], accountant: str | None = None,
                      at_most: int | None = None, guess: int | None = None) -> int:
        """How many more steps, each releasing every entry of ``per_step`` once, keep epsilon <= target
        under ``accountant`` (default: the calibrating accountant, the one that set the noise).

        ``at_most``: the caller needs no more than this many (one accountant call when they all fit).
        Otherwise an interpolation search over the step count (epsilon is non-decreasing in it; both
        the answer ``n`` and ``n + 1`` are evaluated) started at ``guess`` (default: the steps the last
        calibration planned for this release); cached, so the per-step check in the training loop
        costs nothing.
        """
        if self.target_epsilon is None:
            return 2**62 if at_most is None else at_most
        accountant = self.calibrating_accountant if accountant is None else accountant
        key = (tuple(self.entries), tuple(per_step), accountant, at_most)
        if key in self._allowance_cache:
            return self._allowance_cache[key]

        def eps(s: int) -> float:
            extra = [LedgerEntry(e.noise_multiplier, e.sample_rate, s, e.delta_per_step) for e in per_step]
            e = self._eps(self.entries + extra, self.delta, accountant)
            if e is None:
                raise PrivacySettingError("sampling", "the PLD accountant needs Poisson sampling")
            return e

        if at_most is not None and at_most >= 1 and eps(at_most) <= self.target_epsilon:
            n = at_most
        else:
            first = per_step[0] if per_step else None
            guess = guess or at_most or (self._planned.get((first.noise_multiplier, first.sample_rate, first.delta_per_step),
                                                  1000) if first else 1000)
            n = largest_steps_within(eps, self.target_epsilon, guess=max(int(guess), 2), max_steps=2**40)
            n = n if at_most is None else min(n, at_most)
        self._allowance_cache = {key: n}
        return n

    @property
    def relation(self) -> str | None:
        """The neighbouring relation of the recorded releases (``record`` refuses to mix relations)."""
        rels = sorted({e.relation for e in self.entries if e.steps > 0})
        if not rels:
            return relation_of_sampling(self.sampling)
        return rels[0] if len(rels) == 1 else "mixed: " + " + ".join(rels)

    @property
    def guarantee(self) -> str:
        """The weakest guarantee label of the recorded releases (``privacy.guarantee``); a run that publishes
        data-dependent reports is "not DP" whatever its releases."""
        labels = [e.guarantee for e in self.entries if e.steps > 0]
        labels += ["non-private" for e in self.entries if e.steps > 0 and e.noise_multiplier == 0]
        labels += [DATA_DEPENDENT] if self.data_dependent_reports else []
        return combine(labels)

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
            "neighbouring_relation": self.relation,
            "guarantee": self.guarantee,
            "private_steps": self.steps,
            "epsilon_rdp": eps_rdp,
            "epsilon_pld": eps_pld,
            "epsilon_pld_note": None
            if eps_pld is not None
            else "dp-accounting has no PLD for fixed-size sampling without replacement",
            "data_dependent_reports": self.data_dependent_reports,
            **({"by_mechanism": self.by_mechanism()} if len({e.mechanism for e in self.entries if e.steps}) > 1 else {}),
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
                                            "stop training (`epsilon`, the calibrating accountant's, is the guarantee)")
        return out

    # -- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "target_epsilon": self.target_epsilon,
            "delta": self.delta,
            "sampling": self.sampling,
            "data_dependent_reports": self.data_dependent_reports,
            "calibrate_with": self.calibrate_with,
            "entries": [asdict(e) for e in self.entries],
            **({"reported": {k: a.state_dict() for k, a in self.reported.items()}} if self.reported else {}),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore the recorded releases; refuse a checkpoint accounted against another target.

        A resume with a changed ``accountant.epsilon``, ``accountant.delta`` or ``accountant.sampling``
        would silently mix two budgets (the noise was calibrated for the old one): refused, naming
        the setting.
        """
        for key in ("target_epsilon", "delta", "sampling"):
            if state[key] != getattr(self, key):
                raise PrivacySettingError(key, f"cannot resume: the checkpoint was accounted with {key}={state[key]!r} "
                                               f"but this run has {key}={getattr(self, key)!r}; resume with "
                                               f"{key}={state[key]!r} (or start a new run folder)")
        old_reports = bool(state.get("data_dependent_reports", bool(state.get("reported"))))
        if old_reports != self.data_dependent_reports:
            raise PrivacySettingError("data_dependent_reports", f"cannot resume: the checkpoint ledger has "
                                      f"data_dependent_reports={old_reports} but this run has "
                                      f"{self.data_dependent_reports}; resume with {str(old_reports).lower()}")
        saved = state.get("calibrate_with")  # absent in checkpoints written before the setting existed
        if saved is not None and calibrating_accountant(self.sampling, saved) != self.calibrating_accountant:
            raise PrivacySettingError("calibrate_with", f"cannot resume: the checkpoint ledger has calibrate_with="
                                                        f"{saved!r} but this run has {self.calibrate_with!r}; resume "
                                                        "with the same setting")
        self.entries = [LedgerEntry(**e) for e in state["entries"]]
        self._allowance_cache = {}
        pending = dict(state.get("reported", {}))
        for name, acct in self.reported.items():
            if name in pending:
                acct.load_state_dict(pending.pop(name))
        self._pending_reported = pending

    @classmethod
    def from_state_dict(cls, state: dict) -> PrivacyLedger:
        led = cls(state["target_epsilon"], state["delta"], state["sampling"],
                  data_dependent_reports=bool(state.get("data_dependent_reports", bool(state.get("reported")))),
                  calibrate_with=state.get("calibrate_with", "auto"))
        led.load_state_dict(state)
        return led
