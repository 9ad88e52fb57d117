"""Ratios against anchors, every figure timed directly in the same run.

* calibration: the previous search (bisection from [0, 1] with RDP) vs ``privacy.calibration.calibrate`` (PLD
  for Poisson; log-log secant + Brent on cached evaluations), and the noise each needs;
* the ledger's budget-stop search: exponential + binary search vs the interpolation search;
* DPSWflow-r transport map at 30,000 particles: the literal three-call form vs the one-sort form;
* DP-SGD per-sample gradients on the mnist_dpsgd CNN: torch.func vmap (dpgen) vs Opacus
  ``GradSampleModule`` vs a non-private backward.

Each figure is the median CPU time of ``REPEATS`` runs after a warm-up; a figure whose runs spread
by more than ``MAX_SPREAD`` (max / min) is printed as "noisy" instead of a ratio.
"""

from __future__ import annotations

import math
import statistics

import torch

from dpgen.privacy import accountants as acc  # noqa: E402
from dpgen.privacy.calibration import calibrate, largest_steps_within  # noqa: E402

from .timing import ms_spread, times

REPEATS, MAX_SPREAD = 5, 1.5


def _ratio(slow: list[float], fast: list[float]) -> str:
    if len(slow) > 1 and max(slow) / max(min(slow), 1e-9) > MAX_SPREAD or max(fast) / max(min(fast), 1e-9) > MAX_SPREAD:
        return "noisy machine: no ratio"
    return f"×{statistics.median(slow) / statistics.median(fast):.2f}"


def _old_calibrate(target: float, delta: float, q: float, steps: int, rel_tol: float = 1e-3) -> float:
    """The search dpgen used before: a reachability check at sigma_max = 1e4, then bisection from
    [0, 1] on RDP, doubling the bracket."""
    a = acc.RDPAccountant("poisson")

    def eps(s):
        e = a.epsilon_of([acc.Release(s, q, steps)], delta)
        return math.inf if math.isnan(e) else e

    if eps(1e4) > target:
        raise ValueError("unreachable")
    lo, hi = 0.0, 1.0
    while eps(hi) > target:
        lo, hi = hi, hi * 2
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps(mid) > target else (lo, mid)
    return hi


def _old_allowance(name: str, sigma: float, q: float, target: float, delta: float) -> int:
    a = acc.make_accountant(name, "poisson")

    def ok(s):
        return a.epsilon_of([acc.Release(sigma, q, s)], delta) <= target

    lo, hi = 1, 2
    while ok(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def calibration_rows() -> list[tuple[str, str]]:
    out = []
    clear = acc.clear_epsilon_cache  # every search timed from a cold cache
    for label, q, steps, delta in (("mnist_dpswd (q = 100/60000, 60,000 steps, δ_conv = 5e-6)", 100 / 60000, 60000, 5e-6),
                                   ("digits_dpswd (q = 32/1347, 8,420 steps, δ_conv = 5e-5)", 32 / 1347, 8420, 5e-5)):
        s_old = _old_calibrate(10.0, delta, q, steps)
        s_rdp = calibrate(10.0, delta, q, steps, "poisson", accountant="rdp")
        s_pld = calibrate(10.0, delta, q, steps, "poisson", accountant="pld")
        t_old = times(lambda: _old_calibrate(10.0, delta, q, steps), repeats=1, warmup=0,  # noqa: B023
                       clear=clear)
        t_rdp = times(lambda: calibrate(10.0, delta, q, steps, "poisson", accountant="rdp"),  # noqa: B023
                       repeats=3, warmup=0, clear=clear)
        t_pld = times(lambda: calibrate(10.0, delta, q, steps, "poisson", accountant="pld"),  # noqa: B023
                       repeats=3, warmup=0, clear=clear)
        out += [(f"calibration {label}: before (RDP, bisection from [0, 1]; one run)", f"{ms_spread(t_old, 0)}, σ = {s_old:.4f}"),
                (f"calibration {label}: RDP, secant + Brent", f"{ms_spread(t_rdp, 0)}, σ = {s_rdp:.4f} "
                 f"({_ratio(t_old, t_rdp)} faster)"),
                (f"calibration {label}: PLD (the default for Poisson), secant + Brent",
                 f"{ms_spread(t_pld, 0)}, σ = {s_pld:.4f}: {100 * (1 - s_pld / s_rdp):.1f} % less noise than RDP "
                 f"({_ratio(t_old, t_pld)} faster than before)")]
        t_a_old = times(lambda: _old_allowance("pld", s_pld, q, 10.0, delta), repeats=1, warmup=0,  # noqa: B023
                         clear=clear)
        t_a_new = times(lambda: largest_steps_within(  # noqa: B023
            lambda s: acc.PLDAccountant().epsilon_of([acc.Release(s_pld, q, s)], delta), 10.0),  # noqa: B023
            repeats=1, warmup=0, clear=clear)
        out.append((f"budget-stop search {label}, PLD: exponential + binary vs interpolation",
                    f"{ms_spread(t_a_old, 0)} vs {ms_spread(t_a_new, 0)} (×{statistics.median(t_a_old) / statistics.median(t_a_new):.1f}; "
                    "one run each)"))
    return out


def flow_rows() -> list[tuple[str, str]]:
    from dpgen.ot import gaussian_projection_release, random_directions
    from dpgen.ot.flows import (
        empirical_quantiles,
        quantile_levels,
        smoothed_projections,
        transport_map,
        transport_map_reference,
    )

    g = torch.Generator().manual_seed(0)
    n, d, k = 30000, 8, 70
    x = torch.randn(n, d, generator=g)
    y = torch.nn.functional.normalize(torch.randn(250, d, generator=g), dim=1)
    u = random_directions(d, k, generator=g)
    out = []
    for m in (30000, 2000):
        levels = quantile_levels(m)
        tq = empirical_quantiles(gaussian_projection_release(y, u, 5.05).T.contiguous(), levels)
        proj = smoothed_projections(x, u, 5.05)
        assert torch.equal(transport_map(proj, tq, levels), transport_map_reference(proj, tq, levels))
        t_ref = times(lambda: transport_map_reference(proj, tq, levels), REPEATS)  # noqa: B023
        t_new = times(lambda: transport_map(proj, tq, levels), REPEATS)  # noqa: B023
        t_sort = times(lambda: torch.sort(proj, dim=-1), REPEATS)  # noqa: B023
        out.append((f"DPSWflow-r transport map, {n} particles, k = {k}, M = {m} levels: literal vs one-sort "
                    "(bit-identical)", f"{ms_spread(t_ref, 0)} vs {ms_spread(t_new, 0)}: {_ratio(t_ref, t_new)}; floor: the sort "
                    f"alone takes {ms_spread(t_sort, 0)}"))
    return out


def dpsgd_rows(batch: int = 64) -> list[tuple[str, str]]:
    from dpgen.models import mnist_convnet
    from dpgen.privacy.dpsgd import per_sample_grads

    torch.manual_seed(0)
    net = mnist_convnet()
    x, y = torch.rand(batch, 1, 28, 28), torch.randint(10, (batch,))
    ce = torch.nn.functional.cross_entropy

    def vmap_grads():
        per_sample_grads(net, lambda f, xi, yi: ce(f(xi), yi.unsqueeze(0)), x, y)

    def plain():
        net.zero_grad()
        ce(net(x), y).backward()

    rows = []
    t_plain, t_vmap = times(plain, REPEATS), times(vmap_grads, REPEATS)
    try:
        from opacus import GradSampleModule

        gsm = GradSampleModule(mnist_convnet())

        def opacus_grads():
            gsm.zero_grad()
            ce(gsm(x), y).backward()

        t_op = times(opacus_grads, REPEATS)
        rows.append((f"DP-SGD per-sample gradients, mnist_dpsgd CNN, batch {batch}: Opacus GradSampleModule",
                     f"{ms_spread(t_op, 0)} ({_ratio(t_op, t_plain)} of a non-private backward)"))
    except Exception as e:  # noqa: BLE001 - Opacus may not support a layer: say so
        t_op = None
        rows.append(("DP-SGD per-sample gradients: Opacus GradSampleModule", f"not measured ({type(e).__name__}: {e})"))
    rows.insert(0, (f"DP-SGD per-sample gradients, mnist_dpsgd CNN, batch {batch}: torch.func vmap (dpgen)",
                    f"{ms_spread(t_vmap, 0)} ({_ratio(t_vmap, t_plain)} of a non-private backward {ms_spread(t_plain, 0)}"
                    + (f"; Opacus / vmap {_ratio(t_op, t_vmap)}" if t_op else "") + ")"))
    return rows


def rows(device: torch.device) -> list[tuple[str, str]]:
    del device  # CPU figures: the anchors (POT, autodp, dp-accounting, Opacus) are CPU code here
    out = calibration_rows() + flow_rows() + dpsgd_rows()
    # the GeomLoss backend choice (tensorized vs online/KeOps) is timed by benches/sinkhorn_backend.py
    return out


if __name__ == "__main__":
    for a, b in rows(torch.device("cpu")):
        print(f"| {a} | {b} |")
