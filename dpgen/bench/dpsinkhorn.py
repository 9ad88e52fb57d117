"""DP-Sinkhorn benchmarks: time per training step at the MNIST preset's batch, and the
Sinkhorn loss + gradient (GeomLoss, dpgen's settings) against a plain POT log-domain solve of the
same problem.  No timing is asserted anywhere."""

from __future__ import annotations

from functools import partial

import torch

from dpgen.utils import pick_device
from dpgen.utils.misc import synchronize

from .timing import wall_median


def _step_time(device: torch.device, batch: int = 50) -> tuple[str, str]:
    from pathlib import Path

    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit
    from dpgen.methods import TrainContext
    from dpgen.methods.dpsinkhorn import DPSinkhorn
    from dpgen.models import DCGANCondGenerator
    from dpgen.privacy import PrivacyLedger

    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(60000, 1, 28, 28, generator=g), torch.randint(10, (60000,), generator=g)
    data = DataSplits("bench", PrivateSplit(x, y), TensorSplit(x[:10], y[:10]), None, 10, (1, 28, 28))
    m = DPSinkhorn(partial(DCGANCondGenerator), batch_size=batch, steps=10, m=1.0, noise_multiplier=1.1, lr=1e-5)
    m.setup(data, PrivacyLedger(10.0, 1e-5), TrainContext(device=device, logger=None, run_dir=Path("."),
                                                         progress=False, deterministic=True))

    def step() -> None:
        m.step(0)
        synchronize(device)

    t = wall_median(step)
    return (f"DP-Sinkhorn training step (mnist_dpsinkhorn: B=50 Poisson + 20 debias rows, 28x28 DCGAN, "
            f"L1+L2, λ=0.05, scaling 0.9, {device.type})",
            f"{1000 * t:.0f} ms/step ({1 / t:.1f} steps/s; the paper's 3.4M steps ≈ {3.4e6 * t / 86400:.1f} days)")


def _loss_vs_pot(device: torch.device, n: int = 50, d: int = 794, reg: float = 0.05) -> tuple[str, str]:
    import ot as pot

    from dpgen.ot.sinkhorn import EntropicOT, cost_matrix

    g = torch.Generator().manual_seed(0)
    x0 = (torch.rand(n, d, generator=g) * 2 - 1).to(device)
    y = (torch.rand(n, d, generator=g) * 2 - 1).to(device)
    w = EntropicOT(reg=reg, cost="l1+l2", m=1.0, scaling=0.9)

    def ours() -> None:
        x = x0.clone().requires_grad_(True)
        w(x, y).backward()

    a = torch.full((n,), 1.0 / n, device=device, dtype=torch.float64)

    def plain_pot() -> None:  # POT's log-domain Sinkhorn (torch backend) + autograd through the cost
        x = x0.double().clone().requires_grad_(True)
        c = cost_matrix(x, y.double(), "l1+l2", 1.0)
        pot.sinkhorn2(a, a, c, reg, method="sinkhorn_log", numItermax=1000, stopThr=1e-9).backward()

    t_ours, t_pot = wall_median(ours), wall_median(plain_pot)
    return (f"Sinkhorn loss+gradient, n=m={n}, D={d} (L1+L2, λ={reg}, {device.type}): GeomLoss (dpgen settings) "
            "vs POT sinkhorn_log (≤1000 iterations, stopThr 1e-9)",
            f"{1000 * t_ours:.1f} ms vs {1000 * t_pot:.1f} ms (ratio ours/POT {t_ours / t_pot:.2f})")


def rows(device: torch.device) -> list[tuple[str, str]]:
    return [_step_time(device), _loss_vs_pot(device)]


if __name__ == "__main__":
    for r in rows(pick_device("auto")):
        print(" | ".join(r))
