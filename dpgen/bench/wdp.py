"""WDP / DP-SGD benchmarks: accountants over 10,000 steps; DP-SGD vs non-private step rate (mnist_dpsgd net)."""

from __future__ import annotations

import time

import numpy as np
import torch

from dpgen.methods.dpsgd_classifier import DPSGDClassifier  # noqa: E402
from dpgen.models import mnist_convnet  # noqa: E402
from dpgen.privacy import PLDAccountant, PrivacyLedger, RDPAccountant, Release  # noqa: E402
from dpgen.privacy.bayesian import BayesianAccountant, MomentsAccountant  # noqa: E402
from dpgen.privacy.mechanisms import NoisyGradientSum  # noqa: E402
from dpgen.privacy.noise import FixedMultiplier  # noqa: E402
from dpgen.privacy.wdp import WassersteinAccountant  # noqa: E402
from dpgen.utils import pick_device

from .timing import times

STEPS, Q, SIGMA, DELTA = 10_000, 256 / 60000, 1.0, 1e-5


def accountant_rows() -> list[tuple[str, str]]:
    rng = np.random.default_rng(0)
    dists = rng.uniform(0.2, 1.0, size=(STEPS, 8))  # 8 add/remove pair distances per step (the preset's P)

    def wa() -> None:
        a = WassersteinAccountant(16, 32)
        for d in dists:
            a.step(d, SIGMA, Q)
        a.epsilon(DELTA)

    def ba() -> None:
        a = BayesianAccountant(16, total_steps=STEPS)
        for d in dists:
            a.step(d, SIGMA, Q)
        a.epsilon(DELTA)

    def ma() -> None:
        a = MomentsAccountant(16)
        for _ in range(STEPS):
            a.step(1.0, SIGMA, Q)
        a.epsilon(DELTA)

    hist = [Release(SIGMA, Q, STEPS)]
    out = []
    for name, fn in (("WA (Theorem 2, 8 pairs/step, per-step update)", wa),
                     ("BA (8 pairs/step, per-step update)", ba), ("MA (lambda = 16, per-step update)", ma),
                     ("RDP (autodp, one query for the whole history)", lambda: RDPAccountant().epsilon_of(hist, DELTA)),
                     ("PLD (dp-accounting, one query for the whole history)",
                      lambda: PLDAccountant().epsilon_of(hist, DELTA))):
        out.append((f"wdp: {name}, {STEPS:,} steps", f"{times(fn, repeats=1, warmup=0, clock=time.perf_counter)[0]:.2f} s"))
    return out


def dpsgd_rows(device: torch.device, batch: int = 256, repeats: int = 3) -> list[tuple[str, str]]:
    """One step of the mnist_dpsgd network on a random MNIST-shaped batch (timing does not depend on
    the pixel values): per-sample clip + noise + pair statistics vs a plain mean-loss step."""
    torch.manual_seed(0)
    m = DPSGDClassifier(network=mnist_convnet, batch_size=batch, normalize_mean=(0.1307,), normalize_std=(0.3081,))
    m.net, m.device = mnist_convnet().to(device), device
    # the DP-SGD release with the accountant.data_dependent_reports=true pair statistics (the WDP path)
    m.gradient_release = NoisyGradientSum(PrivacyLedger(None, 1e-5, data_dependent_reports=True), clip_norm=1.0,
                                          sample_rate=batch / 60000, expected_batch_size=float(batch),
                                          noise=FixedMultiplier(1.0), seed=0)
    m.reports, m.pair_gen = True, torch.Generator().manual_seed(0)
    m.wa, m.ba, m.ma = WassersteinAccountant(16, 32), BayesianAccountant(16, total_steps=10**6), MomentsAccountant(16)
    x, y = m.normalize(torch.rand(batch, 1, 28, 28).to(device)), torch.randint(10, (batch,)).to(device)
    m.private_gradient(x, y)  # warm-up
    m.plain_gradient(x, y)
    t_priv = min(times(lambda: m.private_gradient(x, y), repeats, warmup=0, clock=time.perf_counter))
    t_plain = min(times(lambda: m.plain_gradient(x, y), repeats, warmup=0, clock=time.perf_counter))
    return [(f"wdp: DP-SGD step, mnist_dpsgd CNN, batch {batch} ({device.type})", f"{1 / t_priv:.2f} steps/s"),
            (f"wdp: non-private SGD step, same net and batch ({device.type})", f"{1 / t_plain:.2f} steps/s"),
            ("wdp: DP-SGD / non-private step-time ratio", f"{t_priv / t_plain:.1f}x slower")]


def rows(device: torch.device) -> list[tuple[str, str]]:
    return accountant_rows() + dpsgd_rows(device)


if __name__ == "__main__":
    for a, b in rows(pick_device("auto")):
        print(f"| {a} | {b} |")
