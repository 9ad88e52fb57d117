"""Benchmarks (``make bench``): writes a markdown table; no timing is asserted anywhere.

1. DP-SWD loss vs POT's ``ot.sliced_wasserstein_distance`` on the same inputs (n=1000, d=784, k=1000).
2. Wall time of the sigma calibration (MNIST row of Table 4, dpgen run preset).
3. DP-SWD generator training steps per second on ``mnist_dpswd`` (real MNIST when the data root has it).
4. Every ``dpgen/bench/<name>.py``: rows of the main table, or a marked section of its own
   (``steps``: per-step cost before / after).  ``--only a,b`` runs those modules alone and
   merges their sections into the existing file.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import torch

from dpgen.config import require_checkout
from dpgen.ot import dp_sliced_wasserstein, random_directions  # noqa: E402
from dpgen.privacy import dpswd_noise  # noqa: E402
from dpgen.utils.misc import device_name, synchronize

from .timing import wall_median


def bench_loss(device: torch.device, n: int = 1000, d: int = 784, k: int = 1000) -> list[tuple[str, str]]:
    import ot as pot

    g = torch.Generator().manual_seed(0)
    xs, xt = torch.rand(n, d, generator=g), torch.rand(n, d, generator=g)
    u = random_directions(d, k, generator=g)
    xs_np, xt_np, u_np = xs.double().numpy(), xt.double().numpy(), u.double().numpy()
    t_pot = wall_median(lambda: pot.sliced_wasserstein_distance(xs_np, xt_np, projections=u_np, p=2))
    xs_d, xt_d, u_d = xs.to(device), xt.to(device), u.to(device)

    def ours(sigma: float) -> None:
        dp_sliced_wasserstein(xs_d, xt_d, sigma, directions=u_d)
        synchronize(device)

    def ours_fresh() -> None:  # what a training step does: fresh directions + noise + backward
        x = xs_d.clone().requires_grad_(True)
        dp_sliced_wasserstein(x, xt_d, 2.9, k=k).backward()
        synchronize(device)

    t0, t1, t2 = wall_median(lambda: ours(0.0)), wall_median(lambda: ours(2.9)), wall_median(ours_fresh)
    return [
        (f"POT sliced_wasserstein_distance (numpy float64, n={n}, d={d}, k={k})", f"{1e3 * t_pot:.1f} ms"),
        (f"dpgen SWD, σ=0, same directions ({device.type}, float32)", f"{1e3 * t0:.1f} ms (×{t_pot / t0:.1f} vs POT)"),
        (f"dpgen DP-SWD, σ=2.9, same directions ({device.type})", f"{1e3 * t1:.1f} ms (×{t_pot / t1:.1f} vs POT)"),
        (f"dpgen DP-SWD, fresh directions + backward ({device.type})", f"{1e3 * t2:.1f} ms"),
    ]


def bench_calibration() -> list[tuple[str, str]]:
    t = time.perf_counter()
    noise = dpswd_noise(10.0, 1e-5, d=794, k=1000, sample_rate=100 / 60000, steps=60000, bound="bernstein",
                            partners=60001)
    dt = time.perf_counter() - t
    return [("σ calibration, mnist_dpswd as train.py does it (auto: PLD for Poisson, 60000 steps, β/(N+1))",
             f"{dt:.2f} s (σ = {noise.noise_std:.3f})")]


def bench_training(device: torch.device, steps: int = 200) -> list[tuple[str, str]]:
    from functools import partial

    from dpgen.data import DataSplits, PrivateSplit, TensorSplit
    from dpgen.logging import RunLogger
    from dpgen.methods import DPSWDGenerator, TrainContext, loop
    from dpgen.models import ConvCondGen
    from dpgen.privacy import PrivacyLedger, ProjectionDP

    root = os.environ.get("DPGEN_DATA_ROOT")
    try:
        from dpgen.data.datasets import mnist

        data, src = mnist(root=root), "MNIST"
    except Exception:  # no data root: same shapes, random pixels
        x, y = torch.rand(60000, 1, 28, 28), torch.randint(10, (60000,))
        data, src = DataSplits("random", PrivateSplit(x, y), TensorSplit(x[:100], y[:100]), None, 10,
                               (1, 28, 28)), "random 28x28 (no MNIST under DPGEN_DATA_ROOT)"
    m = DPSWDGenerator(generator=partial(ConvCondGen), dp=ProjectionDP(1000, "bernstein"), batch_size=100, epochs=100, lr=1e-4,
                       label_mode="concat")
    with tempfile.TemporaryDirectory() as tmp:
        ctx = TrainContext(device=device, logger=RunLogger(tmp), run_dir=Path(tmp), log_every=10**9,
                           checkpoint_every=10**9, max_steps=steps, progress=False)
        t = time.perf_counter()
        out = loop.train(m, data, PrivacyLedger(10.0, 1e-5), ctx)
        dt = time.perf_counter() - t
    sps = out["train_steps"] / out["train_time_s"]
    return [(f"mnist_dpswd training ({src}, B=100, k=1000, {device.type})",
             f"{sps:.1f} steps/s ({out['train_steps']} steps; full 100-epoch run ≈ {60000 / sps / 60:.0f} min; "
             f"fit incl. calibration {dt:.1f} s)")]


NOT_PLUGINS = ("run", "gpu_check", "timing")  # this driver, `make gpu-check` (its own report, docs/benchmarks-gpu.md)
# and the timing helpers the benchmarks share


def _plugins(only: set[str] | None = None):
    """Every benchmark module ``dpgen/bench/<name>.py`` (or only those named), imported: ``[(name, module)]``."""
    import importlib

    mods = []
    for path in sorted(Path(__file__).resolve().parent.glob("[a-z]*.py")):
        if path.stem in NOT_PLUGINS or (only is not None and path.stem not in only):
            continue
        mods.append((path.stem, importlib.import_module(f"{__package__}.{path.stem}")))
    return mods


def bench_plugins(device: torch.device, only: set[str] | None = None) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Per-method benchmarks: a module exposing ``section(device) -> str`` writes its own markdown section;
    one exposing ``rows(device)`` adds (benchmark, result) rows to the main table.  Returns (rows, sections)."""
    rows: list[tuple[str, str]] = []
    sections: dict[str, str] = {}
    for name, mod in _plugins(only):
        print(f"[bench] {name} ...", flush=True)
        if hasattr(mod, "section"):
            sections[name] = mod.section(device)
        else:
            rows += mod.rows(device)
    return rows, sections


def rows_markdown(rows: list[tuple[str, str]], width: int = 300) -> list[str]:
    """``| benchmark | result |`` rows, each on one line of at most ``width`` characters: a longer row keeps its
    benchmark in the table, and its result is listed under the table (lines of 110 characters)."""
    table, below = ["| benchmark | result |", "|---|---|"], []
    for a, b in rows:
        if len(f"| {a} | {b} |") <= width:
            table.append(f"| {a} | {b} |")
        else:
            table.append(f"| {a} | below |")
            below += textwrap.wrap(f"{a}: {b}", 110, initial_indent="* ", subsequent_indent="  ",
                                   break_long_words=False, break_on_hyphens=False)
    return table + (["", "Results too long for the table:", "", *below] if below else [])


def _marked(name: str, text: str) -> str:
    return f"<!-- bench:{name} (generated by dpgen/bench/run.py) -->\n{text.rstrip()}\n<!-- /bench:{name} -->\n"


def merge_sections(doc: str, sections: dict[str, str]) -> str:
    """Replace each ``<!-- bench:NAME ... -->`` ... ``<!-- /bench:NAME -->`` block of ``doc`` by the new
    section of that name (appended at the end when the doc has none); the rest of ``doc`` is kept."""
    import re

    for name, text in sections.items():
        block = _marked(name, text)
        pat = re.compile(rf"<!-- bench:{re.escape(name)}\b.*?<!-- /bench:{re.escape(name)} -->\n?", re.S)
        if pat.search(doc):
            doc = pat.sub(lambda _m, b=block: b, doc, count=1)
        else:
            doc = doc.rstrip("\n") + "\n\n" + block
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    ap.add_argument("--device", default="auto")
    ap.add_argument("--train-steps", type=int, default=200)
    ap.add_argument("--only", default=None, help="comma-separated bench modules (e.g. steps,anchors): only "
                    "those, without the core rows, merged into the existing --out file (their marked sections are "
                    "replaced, everything else is kept)")
    args = ap.parse_args(argv)
    require_checkout("dpgen bench")  # its rows run train.py and scripts of the checkout, and merge into docs/
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    only = {n.replace("-", "_") for n in args.only.split(",")} if args.only else None  # step-overhead: step_overhead
    rows = [] if only else bench_loss(device) + bench_calibration() + bench_training(device, args.train_steps)
    plugin_rows, sections = bench_plugins(device, only)
    if only:  # merge: only the named sections change; a rows-only module gets a marked table of its own
        if plugin_rows:
            names = sorted(n for n, m in _plugins(only) if not hasattr(m, "section"))
            sections["+".join(names)] = "\n".join([f"## {', '.join(names)} (`--only {','.join(names)}`)\n",
                                                    *rows_markdown(plugin_rows)])
        doc = args.out.read_text() if args.out.exists() else "# Benchmarks\n"
        text = merge_sections(doc, sections)
    else:
        rows += plugin_rows
        machine = (device_name(device) or
                   f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU threads, torch "
                   f"{torch.get_num_threads()} threads")
        md = ["# Benchmarks\n", textwrap.fill(
              f"Machine: {machine}; torch {torch.__version__}; numpy {np.__version__}. "
              f"Median of 5 repeats after a warm-up. Produced by `make bench` "
              f"(`dpgen bench --out {args.out}`). Load average at the start: "
              f"{' '.join(f'{v:.1f}' for v in os.getloadavg())} (a shared machine inflates every figure; ratios "
              f"within one row are measured in the same run).", 110, break_long_words=False,
              break_on_hyphens=False) + "\n", *rows_markdown(rows)]
        text = merge_sections("\n".join(md) + "\n", sections)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
