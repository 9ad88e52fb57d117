"""Noise calibration: every sigma search of dpgen behind one public :func:`calibrate`.

Calibration sits on top of accounting: an accountant (``privacy.accountants``) answers the epsilon of
a history of releases; :func:`calibrate` finds the smallest noise multiplier (noise std / L2
sensitivity) whose epsilon, after ``history`` plus ``steps`` releases at ``sample_rate``, is within
the target.  One search (:func:`_solve`, on the log-log curve) serves every accountant, and the
returned multiplier's epsilon *was evaluated*, so a calibration never overshoots the budget.

The ledger (``PrivacyLedger.calibrate``), the mechanisms' ``Calibrated`` noise policy, the DP-SWD and
DPSWflow noise (``privacy.dpswd``, ``privacy.dpswflow``) and the reproduction scripts all calibrate
through :func:`calibrate`.  :func:`largest_steps_within` is the budget stop's search (the step count
a fixed noise affords).

No Hydra import here: this module is usable on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .accountants import (
    Release,
    analytic_gaussian_epsilon,
    calibrating_accountant,
    check_epsilon_delta,
    make_accountant,
)
from .errors import PrivacySettingError

SINGLE_GAUSSIAN = ("analytic", "classic")  # one un-subsampled Gaussian release (DPSWflow's Algorithm 2)


def calibrate(target_epsilon: float, delta: float, sample_rate: float = 1.0, steps: int = 1,
              sampling: str = "poisson", accountant: str | Callable[[float], float] = "auto",
              history: Sequence[Release] = (), rel_tol: float = 1e-3, sigma_max: float = 1e4,
              sigma_guess: float | None = None) -> float:
    """Smallest noise multiplier (to a factor ``1 + rel_tol``) with ``epsilon <= target_epsilon`` at ``delta``.

    ``accountant``:

    * ``auto`` / ``rdp`` / ``pld``: ``history`` plus ``steps`` subsampled Gaussian releases at
      ``sample_rate`` under ``sampling``, accounted by the calibrating accountant
      (:func:`~dpgen.privacy.accountants.calibrating_accountant`: ``auto`` is PLD for Poisson sampling,
      RDP otherwise) -- the accountant that also stops the run;
    * ``analytic``: one Gaussian release (``sample_rate = 1``, ``steps = 1``, no history), exact
      epsilon (Balle & Wang 2018);
    * ``classic``: one Gaussian release, the closed form ``sqrt(2 ln(1.25 / delta)) / epsilon``
      (Dwork & Roth Thm A.1; proven for epsilon < 1 only, kept to reproduce papers);
    * a function ``noise_multiplier -> epsilon`` (non-increasing; e.g. a paper's own accountant of
      its planned releases at ``delta``).

    ``sigma_guess``: where the search starts (default 1; for one un-subsampled release without history,
    the exact single-Gaussian multiplier, :func:`_one_gaussian_multiplier`).

    Raises :class:`PrivacySettingError` (``target_epsilon``) when no multiplier <= ``sigma_max`` reaches
    the target.
    """
    check_epsilon_delta(target_epsilon, delta)
    if callable(accountant):
        return _solve(accountant, target_epsilon, rel_tol=rel_tol, sigma_max=sigma_max, sigma_guess=sigma_guess,
                      what="the given accountant")
    if accountant in SINGLE_GAUSSIAN:
        if sample_rate != 1.0 or int(steps) != 1 or history:
            raise ValueError(f"the {accountant} calibration is for one Gaussian release (sample_rate=1, steps=1, no "
                             f"history), got sample_rate={sample_rate}, steps={steps}, {len(history)} earlier releases")
        if accountant == "classic":
            return math.sqrt(2.0 * math.log(1.25 / delta)) / target_epsilon
        return _solve(lambda sig: analytic_gaussian_epsilon(sig, delta), target_epsilon, rel_tol=rel_tol,
                      sigma_max=sigma_max, sigma_guess=sigma_guess, what="one Gaussian release")
    if int(steps) < 1:
        raise ValueError(f"calibration needs steps >= 1, got {steps}")
    acct = make_accountant(calibrating_accountant(sampling, accountant), sampling)
    base = list(history)
    known_above: tuple[float, ...] = ()
    if sigma_guess is None and sample_rate >= 1.0 and int(steps) == 1 and not base:
        sigma_guess, known_above = _one_gaussian_multiplier(target_epsilon, delta, rel_tol, sigma_max)

    def eps(sig: float) -> float:
        e = acct.epsilon_of(base + [Release(sig, sample_rate, int(steps))], delta)
        # a NaN from the numerics (autodp at tiny sigma) must never count as "within budget"
        return math.inf if math.isnan(e) else e

    return _solve(eps, target_epsilon, rel_tol=rel_tol, sigma_max=sigma_max, sigma_guess=sigma_guess,
                  known_above=known_above, what=f"sample_rate={sample_rate}, steps={steps}")


def _one_gaussian_multiplier(target_epsilon: float, delta: float, rel_tol: float,
                             sigma_max: float) -> tuple[float | None, tuple[float, ...]]:
    """The exact multiplier of one un-subsampled Gaussian release (Balle & Wang 2018; milliseconds), and the
    multipliers the exact search found above the target: the starting point of that release's search under an
    accountant.  Every accountant's epsilon is an upper bound on the exact one, so a multiplier whose exact
    epsilon is above the target is above it for the accountant too (it need not be evaluated), and the
    accountant's multiplier lies at or above the exact one.  When the accountant accepts the exact multiplier
    (PLD does at these sizes), one accountant evaluation certifies it, instead of 3 from this starting point
    alone or 5-6 from ``sigma = 1`` (a PLD evaluation at a small multiplier costs ~0.3 s)."""
    seen: dict[float, float] = {}

    def exact(sig: float) -> float:
        seen[sig] = analytic_gaussian_epsilon(sig, delta)
        return seen[sig]

    try:
        best = _solve(exact, target_epsilon, rel_tol=rel_tol, sigma_max=sigma_max)
    except PrivacySettingError:  # unreachable exactly: the accountant's search reports it
        return None, ()
    return best, tuple(sig for sig, e in seen.items() if e > target_epsilon)


def _solve(eps_fn, target: float, *, rel_tol: float = 1e-3, sigma_max: float = 1e4,
                           sigma_guess: float | None = None, known_above: Sequence[float] = (), what: str = "") -> float:
    """Smallest ``sigma`` (to a factor ``1 + rel_tol``) with ``eps_fn(sigma) <= target``.

    ``known_above``: multipliers known (not evaluated) to have ``eps_fn(sigma) > target``.

    ``eps_fn`` is non-increasing in ``sigma``.  ``eps(sigma)`` is close to a power law, so the
    search runs on ``f(x) = log eps(e^x) - log target``: secant steps from ``sigma_guess`` (default
    1) until the root is bracketed, then Brent's method (``scipy.optimize.brentq``) with ``xtol =
    rel_tol / 2``, which ends with both bracket ends evaluated and at most ``e^rel_tol`` apart.
    Returns the smallest *evaluated* sigma whose epsilon is <= ``target`` — never one above it.
    Typically 4-7 accountant evaluations instead of the ~14 of a bisection from [0, 1].
    """
    from scipy.optimize import brentq

    seen: dict[float, float] = {}
    log_t = math.log(target)

    def f(x: float) -> float:
        sig = math.exp(x)
        if sig not in seen:
            e = eps_fn(sig)
            seen[sig] = math.inf if math.isnan(e) else e
        e = seen[sig]
        if e <= 0.0:
            return -1e3  # e.g. nothing to account: any sigma is within budget
        if not math.isfinite(e):
            return 1e3
        fx = min(1e3, math.log(e) - log_t)
        return max(fx, 1e-300) if e > target else fx  # the sign says within budget or not, never 0 above it

    x_max = math.log(sigma_max)

    def unreachable() -> PrivacySettingError:
        return PrivacySettingError("target_epsilon", f"target epsilon {target} cannot be reached with noise "
                                                     f"multiplier <= {sigma_max} ({what}); raise the target epsilon "
                                                     "or lower the number of steps")

    # bracket [lo, hi] with f(lo) > 0 >= f(hi), by secant steps on the log-log curve.  sigma_max is
    # evaluated only if the search gets there (autodp is slow at huge sigma: its best order is huge)
    lo, hi = -math.inf, math.inf
    for sig in known_above:
        seen[sig] = math.inf
        lo = max(lo, math.log(sig))
    x = min(math.log(sigma_guess) if sigma_guess else 0.0, x_max)
    slope, prev = -2.0, None  # d log eps / d log sigma: -2 for a Gaussian at large sigma
    for _ in range(80):
        fx = f(x)
        if fx > 0:
            if x >= x_max:
                raise unreachable()
            lo = max(lo, x)
        else:
            hi = min(hi, x)
        if lo > -math.inf and hi < math.inf:
            break
        if prev is not None and max(abs(fx), abs(prev[1])) < 1e3 and x != prev[0]:
            secant = (fx - prev[1]) / (x - prev[0])
            slope = secant if secant < -0.1 else slope
        prev = (x, fx)
        step = max(-3.0, min(3.0, -fx / slope)) if abs(fx) < 1e3 else 1.0  # the local power law's root
        x_new = x + step + math.copysign(rel_tol, step)  # aim just past the root: the next point brackets it
        if x_new >= hi:
            x_new = hi - 1.0
        if x_new <= lo:
            x_new = lo + 1.0
        x = min(x_new, x_max)
    if lo > -math.inf and hi < math.inf and hi - lo > rel_tol:
        brentq(f, lo, hi, xtol=rel_tol / 2, rtol=1e-12, maxiter=200)
    if not any(e <= target for e in seen.values()):
        raise unreachable()
    while True:  # certify the tolerance from the evaluated points (bisect if Brent stopped early)
        best = min(sig for sig, e in seen.items() if e <= target)
        below = [sig for sig, e in seen.items() if e > target and sig < best]
        if not below or math.log(best) - math.log(max(below)) <= rel_tol:
            return best
        f(0.5 * (math.log(best) + math.log(max(below))))


def largest_steps_within(eps_of_steps, target: float, guess: int = 1000, max_steps: int = 2**40) -> int:
    """Largest ``s >= 0`` with ``eps_of_steps(s) <= target`` (``eps_of_steps`` non-decreasing in s).

    Interpolation search on the log-log curve (epsilon grows roughly like a power of the step
    count) from ``guess``, then the exact integer answer: ``s`` and ``s + 1`` are both evaluated
    (``s`` within the target, ``s + 1`` above it).  About 5-8 accountant calls instead of the ~30 of
    an exponential-then-binary search.
    """
    seen: dict[int, float] = {}

    def ok(n: int) -> bool:
        if n not in seen:
            e = eps_of_steps(n)
            seen[n] = math.inf if math.isnan(e) else e
        return seen[n] <= target

    if not ok(1):
        return 0
    lo, hi = 1, None  # ok(lo), not ok(hi)
    s, slope, last_ok = max(2, int(guess)), 0.5, True
    for _ in range(200):
        s = min(s, max_steps)
        last_ok = ok(s)
        if last_ok:
            lo = s
            if s == max_steps:
                return s
        else:
            hi = s
        if hi is not None and hi - lo <= 1:
            return lo
        # power law through the bracket ends (or one end and the last slope): log eps = a + p log s
        e_lo = seen[lo]
        if hi is not None and math.isfinite(seen[hi]) and e_lo > 0:
            p = (math.log(seen[hi]) - math.log(e_lo)) / (math.log(hi) - math.log(lo))
            slope = p if p > 0.05 else slope
        est = lo * math.exp((math.log(target) - math.log(e_lo)) / slope) if e_lo > 0 else 2.0 * lo
        if hi is None:  # not bracketed yet: jump just past the estimate (at most x64)
            s = int(min(max(est * 1.001 + 1, lo + 1), 64.0 * lo))
            continue
        # bracketed: probe next to the estimate on the side that closes the bracket from the other
        # end (an ok point just below after a failure, a failing point just above after a success)
        s = math.floor(est) + (1 if last_ok else 0)
        if not lo < s < hi or s in seen:
            s = (lo + hi) // 2
    return lo
