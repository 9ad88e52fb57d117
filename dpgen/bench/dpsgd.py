"""DP-SGD beside Opacus on the same network, batch, clip norm and noise multiplier (``dpgen bench --only dpsgd``).

Both sides train the mnist_dpsgd network (``models.mnist_convnet``, GroupNorm) on Poisson batches of expected
size B from N = 16 B random MNIST-shaped public images, clip norm C = 1, noise multiplier sigma = 1, plain SGD:

* **dpgen**: ``methods.dpsgd_classifier.DPSGDClassifier`` (``model.per_sample`` as given: ``unfold`` and
  ``ghost``, the two layer-rule paths of ``privacy.per_sample``, one row each), its own Poisson sampler and
  ``NoisyGradientSum``;
* **Opacus**: ``PrivacyEngine.make_private`` (``GradSampleModule`` hooks, Poisson sampling, its DP optimiser).

Each side runs in a child process of its own (spawned: the peak memory of one side is not the other's), one
torch thread on the CPU: ``warmup`` untimed steps then ``steps`` timed ones (wall clock; on CUDA the device is
synchronised at both ends).  Peak memory: the child's peak resident set on the CPU (``ru_maxrss``: Python, torch
and the data included, the same on both sides), the peak allocated device memory on CUDA.  :func:`kernel_table` is
the ``torch.profiler`` table of one DP-SGD step (the GPU check's profile: CUDA kernels by time).
"""

from __future__ import annotations

import multiprocessing as mp
import platform
import textwrap
import time

import torch

from ..utils.misc import on_gpu

BATCH, SIGMA, CLIP, STEPS, WARMUP = 1024, 1.0, 1.0, 4, 1


def _images(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """N = 16 B random MNIST-shaped public images and labels (the same on both sides)."""
    g = torch.Generator().manual_seed(0)
    n = 16 * batch
    return torch.rand(n, 1, 28, 28, generator=g), torch.randint(10, (n,), generator=g)


def _data(batch: int, device: torch.device):
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit

    x, y = _images(batch)
    return DataSplits("random-mnist-shape", PrivateSplit(x, y), TensorSplit(x[:8], y[:8]), None, 10, (1, 28, 28))


def dpgen_method(batch: int, device: torch.device, per_sample: str = "auto", run_dir=None):
    """The DP-SGD classifier set up on random MNIST-shaped data (sigma fixed, no data-dependent reports)."""
    import tempfile
    from pathlib import Path

    from dpgen.logging import RunLogger
    from dpgen.methods.base import TrainContext
    from dpgen.methods.dpsgd_classifier import DPSGDClassifier
    from dpgen.models import mnist_convnet
    from dpgen.privacy import PrivacyLedger

    run_dir = Path(run_dir or tempfile.mkdtemp())
    ctx = TrainContext(device=device, logger=RunLogger(run_dir), run_dir=run_dir, progress=False, deterministic=True)
    m = DPSGDClassifier(network=mnist_convnet, batch_size=batch, epochs=1, lr=0.1, clip_norm=CLIP,
                        noise_multiplier=SIGMA, per_sample=per_sample)
    m.setup(_data(batch, device), PrivacyLedger(None, 1e-5), ctx)
    return m


def _peak(device: torch.device) -> float:
    """MiB: the peak allocated device memory (CUDA) or the process's peak resident set (CPU)."""
    if on_gpu(device):
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(step, device: torch.device, steps: int, warmup: int) -> float:
    from dpgen.utils.misc import synchronize

    for t in range(warmup):
        step(t)
    synchronize(device)
    t0 = time.perf_counter()
    for t in range(warmup, warmup + steps):
        step(t)
    synchronize(device)
    return steps / (time.perf_counter() - t0)


def run_dpgen(device: str, batch: int, steps: int, warmup: int, per_sample: str = "auto") -> dict:
    dev = torch.device(device)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    m = dpgen_method(batch, dev, per_sample)
    rate = _timed(m.step, dev, steps, warmup)
    return {"steps_per_s": rate, "peak_mib": _peak(dev), "per_sample": m.rule, "microbatch": m.microbatch}


def run_opacus(device: str, batch: int, steps: int, warmup: int) -> dict:
    from opacus import PrivacyEngine

    from dpgen.models import mnist_convnet

    dev = torch.device(device)
    if dev.type == "cpu":
        torch.set_num_threads(1)
    x, y = _images(batch)
    ds = torch.utils.data.TensorDataset(x.to(dev), y.to(dev))
    net = mnist_convnet().to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    net, opt, loader = PrivacyEngine().make_private(
        module=net, optimizer=opt, data_loader=torch.utils.data.DataLoader(ds, batch_size=batch),
        noise_multiplier=SIGMA, max_grad_norm=CLIP, poisson_sampling=True)
    mean, std = 0.1307, 0.3081
    batches = iter(())

    def step(_t: int) -> None:
        nonlocal batches
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net((x - mean) / std), y).backward()
        opt.step()

    return {"steps_per_s": _timed(step, dev, steps, warmup), "peak_mib": _peak(dev)}


SIDES = (("dpgen", run_dpgen, ("unfold",)), ("dpgen_ghost", run_dpgen, ("ghost",)), ("opacus", run_opacus, ()))


def beside(device: str = "cpu", batch: int = BATCH, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """Every side, each in a spawned child process: ``{"dpgen": {...}, "dpgen_ghost": {...}, "opacus": {...}}``
    (an error is a row)."""
    ctx = mp.get_context("spawn")
    out = {}
    for name, fn, extra in SIDES:
        with ctx.Pool(1) as pool:
            try:
                out[name] = pool.apply(fn, (device, batch, steps, warmup, *extra))
            except Exception as err:  # noqa: BLE001 - reported in the row (Opacus may be missing or fail)
                out[name] = {"error": f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"}
    return out


def kernel_table(device: str = "cuda", batch: int = BATCH, rows: int = 25) -> str:
    """``torch.profiler`` table of one steady DP-SGD step (after two untimed ones) of the mnist_dpsgd network:
    the kernels by total device time on CUDA (by CPU time elsewhere)."""
    from torch.profiler import ProfilerActivity, profile

    dev = torch.device(device)
    m = dpgen_method(batch, dev)
    m.step(0)
    m.step(1)
    cuda = on_gpu(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        m.step(2)
        if cuda:
            torch.cuda.synchronize(dev)
    return prof.key_averages().table(sort_by="cuda_time_total" if cuda else "cpu_time_total", row_limit=rows)


def _cell(r: dict) -> tuple[str, str]:
    if "error" in r:
        return f"not measured ({r['error']})", ""
    return f"{r['steps_per_s']:.3f}", f"{r['peak_mib']:,.0f}"


def section(device: torch.device) -> str:
    """The markdown section ``dpgen bench --only dpsgd`` writes into docs/benchmarks.md."""
    dev = torch.device(device).type  # "cuda" or "cpu": the bench is named by its device type
    r = beside(dev)
    d, g, o = r["dpgen"], r["dpgen_ghost"], r["opacus"]
    memory = "peak allocated device memory" if dev == "cuda" else "peak resident set of the side's process"
    text = (
        f"The mnist_dpsgd network (GroupNorm), Poisson batches of expected size {BATCH} from {16 * BATCH:,} random "
        f"MNIST-shaped images, C = {CLIP}, sigma = {SIGMA}, SGD; {WARMUP} warm-up step then {STEPS} timed steps "
        f"(wall clock), each side in its own process, {dev}"
        + (", one torch thread" if dev == "cpu" else "") + f" ({platform.processor() or platform.machine()}); "
        f"memory: the {memory} (MiB). `dpgen/bench/dpsgd.py`.")
    lines = [
        "## DP-SGD beside Opacus (`--only dpsgd`)", "",
        textwrap.fill(text, width=110, break_long_words=False, break_on_hyphens=False), "",
        "| implementation | steps/s | peak memory (MiB) |", "|---|---|---|",
        *(f"| dpgen (`model.per_sample={r.get('per_sample', '?')}`, chunks of {r.get('microbatch', '?')}) | "
          + " | ".join(_cell(r)) + " |" for r in (d, g)),
        "| Opacus (`make_private`, Poisson) | " + " | ".join(_cell(o)) + " |",
    ]
    ratios = [f"{r['per_sample']} ×{r['steps_per_s'] / o['steps_per_s']:.2f}" for r in (d, g)
              if "error" not in r and "error" not in o]
    if ratios:
        lines += ["", f"dpgen / Opacus steps/s: {', '.join(ratios)}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(beside(sys.argv[1] if len(sys.argv) > 1 else "cpu"), indent=1))
