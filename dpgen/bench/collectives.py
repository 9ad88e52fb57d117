"""What one collective costs between the processes of a run: the floor under any data-parallel step.

``torchrun --standalone --nproc-per-node N -m dpgen.bench.collectives [cpu|cuda]`` times, on the backend a run of
that device uses (gloo for CPU tensors, NCCL for CUDA ones), the collectives of :mod:`dpgen.utils.dist` that a
private step makes: an all-reduce of one number (a share of a loss), of 100,000 numbers (a small model's
gradients), an all-gather of 100 rows of 1,000 (projected rows) and a broadcast of 100 numbers.  Each is run 30 times to warm up and then 300 times; rank 0
prints the median microseconds of blocks of 30 as one JSON line.  :mod:`dpgen.bench.distributed` runs it beside
its 1 vs N rows (``dpgen bench --only distributed``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch

from ..utils import dist
from ..utils.misc import pick_device, synchronize

WARMUP, BLOCKS, PER_BLOCK = 30, 10, 30


def _median_us(fn, device: torch.device) -> float:
    """Median over :data:`BLOCKS` blocks of the mean microseconds of one call (the device synchronised)."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(BLOCKS):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(PER_BLOCK):
            fn()
        synchronize(device)
        times.append((time.perf_counter() - t0) / PER_BLOCK * 1e6)
    return statistics.median(times)


def measure(device: torch.device) -> dict[str, float]:
    """``{collective: median µs}`` as :mod:`dpgen.utils.dist` makes them in a step (every rank calls it)."""
    one, grads = torch.zeros(1, device=device), torch.zeros(100_000, device=device)
    lo, hi = dist.shard_bounds(100)
    rows, small = torch.zeros(hi - lo, 1000, device=device), torch.zeros(100, device=device)
    return {
        "all-reduce of 1 number": _median_us(lambda: dist.all_reduce_sum(one), device),
        "all-reduce of 100,000 numbers": _median_us(lambda: dist.all_reduce_sum(grads), device),
        "all-gather of 100 x 1,000 rows": _median_us(lambda: dist.gather_shards(rows, 100), device),
        "broadcast of 100 numbers": _median_us(lambda: dist.broadcast(small), device),
    }


def main(device_type: str = "cpu") -> None:
    """Join the launcher's group as a run does (:func:`dpgen.utils.dist.init_from_env`: gloo for the CPU, NCCL
    with a GPU per process) and print rank 0's medians."""
    torch.set_num_threads(1)
    device = pick_device(device_type, "the device argument")
    if not dist.init_from_env():
        raise SystemExit("error: run it under torchrun --nproc-per-node N (N >= 2)")
    try:
        out = measure(dist.device_of_rank(device))
        if dist.is_main():
            print(json.dumps({**dist.processes(), "us": out}))
    finally:
        dist.shutdown()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
