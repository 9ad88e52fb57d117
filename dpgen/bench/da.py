"""Domain-adaptation benchmarks: adapter training steps per second for each variant on the
embedded ``digits_shift`` preset (28x28 digits CNN, batch 32, every step aligning), and the
per-sample-gradient overhead of DP-DANN relative to DANN.

    python dpgen/bench/da.py            # prints the rows
"""

from __future__ import annotations

import statistics
import tempfile
from functools import partial
from pathlib import Path

import torch

from dpgen.data.domain import domain_pair, sklearn_digits_domain  # noqa: E402
from dpgen.logging import RunLogger  # noqa: E402
from dpgen.methods import loop  # noqa: E402
from dpgen.methods.base import TrainContext  # noqa: E402
from dpgen.methods.domain_adaptation import (  # noqa: E402
    DANNAlignment,
    DomainAdaptation,
    DPDANNAlignment,
    DPSWDAlignment,
    SWDAlignment,
)
from dpgen.models.da import DigitsFeatureExtractor, DomainDiscriminator, MLPClassifier  # noqa: E402
from dpgen.privacy import PrivacyLedger, ProjectionDP  # noqa: E402
from dpgen.utils import pick_device

STEPS, WARMUP, REPEATS = 60, 10, 3


def _variants():
    disc = partial(DomainDiscriminator, hidden=100)
    return {"swd": (SWDAlignment(0.1, 200), False), "dpswd": (DPSWDAlignment(0.5, ProjectionDP(200, "bernstein")), True),
            "dann": (DANNAlignment(disc, 0.1), False), "dp_dann": (DPDANNAlignment(disc, 0.1), True)}


def _fit_time(data, alignment, private: bool, device: torch.device, steps: int) -> float:
    """Wall time of one fresh ``fit`` of ``steps`` aligning steps (calibration included)."""
    m = DomainAdaptation(DigitsFeatureExtractor, MLPClassifier, alignment, batch_size=32, epochs=1000,
                         start_align=0, lr=1e-3, private=private)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = PrivacyLedger(10.0 if private else None, 1e-4, "poisson")
        ctx = TrainContext(device=device, logger=RunLogger(tmp), run_dir=Path(tmp), progress=False,
                           deterministic=True, max_steps=steps, checkpoint_every=10**9, log_every=10**9)
        return loop.train(m, data, ledger, ctx)["train_time_s"]


def _steps_per_s(data, name: str, alignment, private: bool, device: torch.device, steps: int,
                 repeats: int = REPEATS) -> float | None:
    """Aligning steps per second from fits of ``WARMUP`` and ``WARMUP + steps`` steps (setup and
    calibration cancel out), ``repeats`` of each.  The rate is a difference of two timings, so it is
    refused (``None``) when that difference is not clearly above their spread — a noisy machine, not
    a measurement (the old code divided by max(diff, 1e-9) and printed 6e10 steps/s)."""
    short = [_fit_time(data, alignment, private, device, WARMUP) for _ in range(repeats)]
    long = [_fit_time(data, alignment, private, device, WARMUP + steps) for _ in range(repeats)]
    diff = statistics.median(long) - statistics.median(short)
    spread = (max(long) - min(long)) + (max(short) - min(short))
    if diff <= 0 or diff < 2 * spread:
        return None
    return steps / diff


def rows(device: torch.device) -> list[tuple[str, str]]:
    torch.set_num_threads(max(1, torch.get_num_threads()))
    data = domain_pair(sklearn_digits_domain(0), sklearn_digits_domain(1, rotation=30.0, thicken=3))
    out, rate = [], {}
    for name, (alignment, private) in _variants().items():
        rate[name] = _steps_per_s(data, name, alignment, private, device, STEPS)
        out.append((f"DA adapter training, digits_shift, {name} (batch 32, digits CNN, {device.type})",
                    f"{rate[name]:.1f} steps/s" if rate[name] else "not measured: timing spread larger than the "
                    "difference (noisy machine)"))
    if rate["dann"] and rate["dp_dann"]:
        out.append(("DP-DANN per-sample-gradient overhead vs DANN (step time ratio)",
                    f"×{rate['dann'] / rate['dp_dann']:.2f}"))
    return out


if __name__ == "__main__":
    for k, v in rows(pick_device("auto")):
        print(f"| {k} | {v} |")
