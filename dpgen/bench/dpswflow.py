"""DPSWflow benchmarks: particle-flow steps per second (DPSWflow paper, its constants).

One DPSWflow-r step = fresh directions, noisy projections of a 250-row private batch and of all
particles, both quantile functions at M levels, drift, Euler-Maruyama update.
"""

from __future__ import annotations

import time

import torch

from dpgen.ot import gaussian_projection_release, random_directions
from dpgen.ot.flows import empirical_quantiles, flow_step, quantile_levels
from dpgen.utils import pick_device
from dpgen.utils.misc import synchronize


def _flow_r_step(x, y, k, levels, sigma):
    u = random_directions(x.shape[1], k, device=x.device)
    tq = empirical_quantiles(gaussian_projection_release(y, u, sigma).T.contiguous(), levels)
    return flow_step(x, u, tq, levels, sigma, 3.0, 0.0)


def _rate(fn, device, repeats: int = 3) -> float:
    fn()  # warm-up
    synchronize(device)
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    synchronize(device)
    return repeats / (time.perf_counter() - t)


def rows(device: torch.device) -> list[tuple[str, str]]:
    g = torch.Generator().manual_seed(0)
    n, d, k, m = 30000, 8, 70, 30000
    x = torch.randn(n, d, generator=g).to(device)
    y = torch.nn.functional.normalize(torch.randn(250, d, generator=g), dim=1).to(device)
    out = []
    with torch.no_grad():
        for levels_m in (m, 2000):
            levels = quantile_levels(levels_m, device=device)
            sps = _rate(lambda levels=levels: _flow_r_step(x, y, k, levels, 5.05), device)
            out.append((f"DPSWflow-r step ({device.type}): {n} particles, d={d}, N_θ={k}, b=250, M={levels_m} levels",
                        f"{sps:.2f} steps/s ({1e3 / sps:.0f} ms/step)"))
        levels = quantile_levels(m, device=device)
        u = random_directions(d, 31, device=device)
        tq = empirical_quantiles(gaussian_projection_release(torch.nn.functional.normalize(
            torch.randn(30000, d, generator=g), dim=1).to(device), u, 3.45).T.contiguous(), levels)

        def flow2() -> None:
            idx = torch.randperm(31, device=device)[:25]
            flow_step(x, u[:, idx], tq[idx], levels, 3.45, 3.0, 0.0)

        sps = _rate(flow2, device)
        out.append((f"DPSWflow step ({device.type}): {n} particles, d={d}, M_θ=25 of N_θ=31, M={m} levels",
                    f"{sps:.2f} steps/s ({1e3 / sps:.0f} ms/step)"))
    return out


if __name__ == "__main__":
    dev = pick_device("auto")
    for a, b in rows(dev):
        print(f"| {a} | {b} |")
