"""GeomLoss backend for DP-Sinkhorn: one semi-debiased loss + gradient at the
mnist_dpsinkhorn sizes with ``model.sinkhorn_backend=tensorized`` and ``=online`` (KeOps) side by side.
CPU time (``time.process_time``), median of 5 after a warm-up; KeOps' one-off kernel compilation is
timed separately (into a temporary build folder, never the user's cache).  No timing is asserted."""

from __future__ import annotations

import statistics
import tempfile
import time

import torch

from .timing import ms_spread, times

SIZES = dict(n=50, extra=20, m_real=50, d=28 * 28 + 10)  # B = 50 generated + floor(0.4*50) debias rows, 50 real


def rows(device: torch.device) -> list[tuple[str, str]]:
    from dpgen.ot.sinkhorn import EntropicOT, sinkhorn_generator_loss

    n, extra, m_real, d = SIZES["n"], SIZES["extra"], SIZES["m_real"], SIZES["d"]
    g = torch.Generator().manual_seed(0)
    x0 = (torch.rand(n + extra, d, generator=g) * 2 - 1).to(device)
    y = (torch.rand(m_real, d, generator=g) * 2 - 1).to(device)
    label = (f"GeomLoss backend for DP-Sinkhorn: semi-debiased loss + gradient, mnist_dpsinkhorn sizes "
             f"({n}+{extra} generated rows, {m_real} real, D = {d}, L1+L2 m = 1, λ = 0.05, scaling 0.9, float32, "
             f"{device.type}): tensorized vs online (KeOps)")

    def run(ot: EntropicOT) -> tuple[float, torch.Tensor]:
        x = x0.clone().requires_grad_(True)
        loss = sinkhorn_generator_loss(ot, x, y, n=n, debias="semi", ratio=extra / n)
        loss.backward()
        return float(loss), x.grad

    tens = EntropicOT(reg=0.05, cost="l1+l2", m=1.0, scaling=0.9, backend="tensorized")
    t_tens = times(lambda: run(tens))
    try:
        import pykeops
    except Exception as e:  # noqa: BLE001 - report, do not fail the bench
        return [(label, f"{ms_spread(t_tens)} vs not measured (pykeops cannot be imported: {type(e).__name__})")]
    old = pykeops.get_build_folder()
    with tempfile.TemporaryDirectory() as build:
        pykeops.set_build_folder(build)
        try:
            onl = EntropicOT(reg=0.05, cost="l1+l2", m=1.0, scaling=0.9, backend="online")
            t0 = time.perf_counter()
            run(onl)  # compiles the KeOps kernels (forward + gradient)
            compile_s = time.perf_counter() - t0
            t_onl = times(lambda: run(onl), warmup=0)
            (lt, gt), (lo, go) = run(tens), run(onl)
        finally:
            pykeops.set_build_folder(old)
    ratio = statistics.median(t_onl) / statistics.median(t_tens)
    agree = (f"loss rel. diff {abs(lo - lt) / abs(lt):.1e}, gradient max rel. diff "
             f"{float((go - gt).abs().max() / gt.abs().max()):.1e}")
    return [(label, f"{ms_spread(t_tens)} vs {ms_spread(t_onl)}: online/tensorized ×{ratio:.2f} ({agree}; first online call "
                    f"incl. KeOps compilation {compile_s:.0f} s wall, one run). Default stays tensorized")]


if __name__ == "__main__":
    for a, b in rows(torch.device("cpu")):
        print(f"| {a} | {b} |")
