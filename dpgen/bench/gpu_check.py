"""The GPU check (``make gpu-check``): one command that says whether dpgen works, and how fast, on a GPU.

    python -m dpgen.bench.gpu_check                  # on a CUDA machine: everything, writes docs/benchmarks-gpu.md
    python -m dpgen.bench.gpu_check --dry-run        # anywhere: lists what it would run, runs nothing
    python -m dpgen.bench.gpu_check --device cpu --steps 4 --families dpsgd_classifier --out report.md

What it runs, in this order (no new part starts after ``--budget-s``, 420 s; each subprocess has a timeout):

1. the CUDA-marked tests (``pytest -m cuda``);
2. a short training of every private family through the real pipeline (``dpgen.pipeline.run``, a
   preset on the embedded 8x8 digits, ``evaluator=none``): on the CPU in float32, then on the device in
   float32 and in bf16 (``trainer.precision=bf16``).  Per run: the steps per second over the steps
   after a warm-up (the device is synchronised at both ends of the timed span), the peak device
   memory (``torch.cuda.max_memory_allocated``), the epsilon spent, and how many module forwards ran
   in bfloat16 (a family whose model forwards are not autocast says so instead of a bf16 figure);
3. the default demo (``python train.py``, the whole run, evaluation included) on the device;
4. with two or more CUDA devices: ``torchrun --nproc-per-node 2 train.py`` (NCCL) on DP-SGD beside
   the one-process run of the same settings (epsilon of both, steps/s of both); skipped with one device.
5. DP-SGD beside Opacus on the same network, batch size, clip norm and noise multiplier (sigma = 1, Poisson
   batches, random public inputs of the data's shape): steps/s of both on the device (``opacus`` is the
   ``bench`` extra; without it the row says so).
   On CUDA also the ``dpgen bench --only dpsgd`` pair on the device (``dpgen/bench/dpsgd.py``: the mnist_dpsgd
   network at batch 1,024, each side in its own process: steps/s and peak device memory), and the
   ``torch.profiler`` table of one DP-SGD step of that network: its CUDA kernels by total device time.
6. ``trainer.compile=on`` beside ``off`` (``dpgen.utils.compiling``: the model as CUDA graphs, the loss and the
   Adam step compiled) for the families of :data:`COMPILE_FAMILIES`, on the device in float32: steps/s of both
   (the compiled run's warm-up steps compile, untimed) and the epsilon of both (the same release runs).
7. ``trainer.graph=off`` beside the device fp32 run of step 2 (``trainer.graph=auto``: on for a CUDA run,
   ``dpgen.methods.capture``: the whole step, release included, captured once and replayed) for every family:
   steps/s of both and the epsilon of both (the same releases, recorded once per replay); with ``--data mnist``,
   DP-Sinkhorn's paper schedule projected at both rates.

On CUDA every timed step runs under ``torch.cuda.set_sync_debug_mode("warn")``: the report gives the real
syncs per step (device reads and blocking copies) beside the steps/s, and the Python lines that made them;
with ``--data mnist`` it also gives each family's physical floor (an estimate, not a measurement) and the time DP-Sinkhorn's paper schedule
(3.4 M steps to eps = 10 on MNIST) would take at the measured rate, beside the authors' 8.2 h.

It writes ONE markdown report (``--out``, default docs/benchmarks-gpu.md) with the device, the versions
and every figure, and exits 1 when anything failed (the failure is in the report).  The runs are of the
embedded digits, a public benchmark: their timings are reported (a private run's timings never are).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from ..paths import ROOT

DEFAULT_OUT = ROOT / "docs" / "benchmarks-gpu.md"
COMMAND = "make gpu-check"

# family -> (what it is, the composition: preset + overrides that only make the run short)
AE_SHORT = ["model.ae_steps=100", "model.autoencoder_cache=null"]  # the PUBLIC autoencoder pre-training, untimed
AE_SHORT_MNIST = ["model.ae_steps=20", "model.autoencoder_cache=null"]  # (its quality does not change a step's time)
FAMILIES: dict[str, tuple[str, list[str]]] = {
    "dpsgd_classifier": ("DP-SGD classifier", ["experiment=digits_dpsgd"]),
    "dpswd_generator": ("DP-SWD generator", ["experiment=digits_dpswd"]),
    "dpswd_adapter": ("DP-SWD adapter", ["experiment=digits_shift_dpswd", "model.start_align=0"]),
    "dpsinkhorn": ("DP-Sinkhorn", ["experiment=digits_dpsinkhorn"]),
    "dpswflow_r": ("DPSWflow-r", ["experiment=digits_dpswflow_r", *AE_SHORT]),
    "dpswgen": ("DPSWgen", ["experiment=digits_dpswd", "model=dpswgen", "experiment_name=digits_dpswgen",
                            "dataset.public_fraction=0.5", "model.autoencoder.width=16", "model.autoencoder.pad_to=8",
                            "model.batch_size=32", *AE_SHORT]),
    "dp_dann": ("DP-DANN", ["experiment=digits_shift_dp_dann", "model.start_align=0"]),
    "class_gaussian": ("DP class-Gaussian", ["experiment=digits_moments"]),
}
# --data mnist: the same families on the MNIST presets (28x28 images at the presets' own batch sizes; the
# private data under paths.data_root in torchvision's layout, USPS beside it for the two adapters)
MNIST_FAMILIES: dict[str, list[str]] = {
    "dpsgd_classifier": ["experiment=mnist_dpsgd"],
    "dpswd_generator": ["experiment=mnist_dpswd"],
    "dpswd_adapter": ["experiment=mnist_usps_dpswd", "model.start_align=0"],
    "dpsinkhorn": ["experiment=mnist_dpsinkhorn"],
    "dpswflow_r": ["experiment=mnist_dpswflow_r", *AE_SHORT_MNIST],
    "dpswgen": ["experiment=mnist_dpswgen", *AE_SHORT_MNIST],
    "dp_dann": ["experiment=mnist_usps_dp_dann", "model.start_align=0"],
    "class_gaussian": ["experiment=mnist_moments"],
}


def composition(family: str, data: str = "digits") -> list[str]:
    """The preset and overrides of ``family``'s runs on ``data`` (digits: the embedded 8x8 digits)."""
    return FAMILIES[family][1] if data == "digits" else MNIST_FAMILIES[family]


# --data mnist: each family's physical floor per step (ms, an ESTIMATE from the bytes and FLOPs of one step on one
# H200-class GPU, not a measurement), shown beside the measured steps/s
FLOOR_MS = {"dpsgd_classifier": 2.0, "dpswd_generator": 0.15, "dpswd_adapter": 0.2, "dp_dann": 0.2, "dpsinkhorn": 0.5,
            "dpswflow_r": 0.2, "dpswgen": 0.1}
SINKHORN_PAPER_STEPS, SINKHORN_AUTHORS_H = 3.4e6, 8.2  # MNIST to eps = 10; the authors' code: 29,626 s on one GPU
OPACUS_SIGMA = 1.0
DPSGD_BATCH = 1024  # the mnist_dpsgd batch of the Opacus pair and the kernel profile (dpgen/bench/dpsgd.py)

# (device kind, trainer.precision) of every family's runs; "device" is the --device
SETTINGS = (("cpu", "32"), ("device", "32"), ("device", "bf16"))
SHORT = ["logger=local", "evaluator=none", "trainer.progress=false", "trainer.checkpoint_every=1000000"]
NCCL_PRESET = ["experiment=digits_dpsgd"]
# trainer.compile=on beside off on the device (a CUDA run compiles for tens of seconds: one family by default)
COMPILE_FAMILIES = ("dpswd_generator",)


# -- one measured run ---------------------------------------------------------------------------
@contextlib.contextmanager
def timed_steps(warmup: int, last: int, record: dict):
    """Time the private steps ``[warmup, last)`` of the next ``loop.train`` call (the pipeline's loop):
    the device is synchronised after step ``warmup - 1`` and after step ``last - 1``, nowhere else, so
    the steps in between run as they do in a real run.  With fewer steps than ``warmup`` + 1 (a one-release
    method), every step is timed.  ``record`` gets ``timed_steps`` and ``timed_s``."""
    from dpgen.methods import loop
    from dpgen.utils.misc import synchronize

    original = loop.train

    def train(method, data, ledger, ctx):
        step, marks = method.step, {}

        def timed(t):
            if "first" not in marks:  # the first step: the method is set up, its schedule is known
                end = last if method.total_steps is None else min(method.total_steps, last)
                marks["first"], marks["end"] = (warmup if end > warmup else t), end
            if t == marks["first"]:
                synchronize(ctx.device)
                marks["t0"] = time.perf_counter()
            with count_syncs(ctx.device, record) if marks["first"] <= t < marks["end"] else contextlib.nullcontext():
                out = step(t)
            if t + 1 == marks["end"]:
                synchronize(ctx.device)
                marks["t1"], marks["steps"] = time.perf_counter(), t + 1 - marks["first"]
            return out

        method.step = timed
        try:
            return original(method, data, ledger, ctx)
        finally:
            del method.step  # the class's own again
            if "t1" in marks:
                record.update(timed_steps=marks["steps"], timed_s=marks["t1"] - marks["t0"])

    loop.train = train
    try:
        yield record
    finally:
        loop.train = original


@contextlib.contextmanager
def count_syncs(device, record: dict):
    """On CUDA: the body under ``torch.cuda.set_sync_debug_mode("warn")``; each synchronising call it makes (a
    read of a device value, a blocking copy) adds one to ``record["syncs"]``.  Elsewhere: the body alone."""
    import warnings

    import torch

    if getattr(device, "type", str(device)) != "cuda":
        yield record
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield record
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    record["syncs"] = record.get("syncs", 0) + len(syncs)
    sites = record.setdefault("sync_sites", {})
    for w in syncs:  # the Python line that made the synchronising call
        site = f"{_source(w.filename)}:{w.lineno}"
        sites[site] = sites.get(site, 0) + 1


def _source(filename: str) -> str:
    """A source file as a reader finds it: relative to the checkout, else to its installed package's folder."""
    path = Path(filename)
    if path.is_relative_to(ROOT):
        return path.relative_to(ROOT).as_posix()
    parts = path.parts
    return "/".join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts else path.name


@contextlib.contextmanager
def bf16_forwards(record: dict):
    """Count module forwards whose output is bfloat16 (``record["bf16_forwards"]``)."""
    import torch

    record["bf16_forwards"] = 0

    def hook(_module, _args, out):
        if isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16:
            record["bf16_forwards"] += 1

    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    try:
        yield record
    finally:
        handle.remove()


def compose(overrides: list[str], run_dir: Path):
    from ..config import compose as compose_config

    return compose_config(overrides, data_root=os.environ.get("DPGEN_DATA_ROOT", str(ROOT / "data")), output_dir=run_dir)


def measure(family: str, device: str, precision: str, steps: int, warmup: int, run_dir: Path,
            data: str = "digits", extra: tuple[str, ...] = ()) -> dict:
    """One short training of ``family`` through ``dpgen.pipeline.run`` on ``device``: steps/s over the
    timed steps, peak device memory (MiB; None on the CPU), epsilon spent, bf16 forwards."""
    import torch

    from dpgen.pipeline import run

    cfg = compose([*composition(family, data), *extra, *SHORT, f"trainer.device={device}", f"trainer.precision={precision}",
                   f"trainer.max_steps={steps}", f"trainer.log_every={steps}"], run_dir)
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    rec: dict = {}
    t0 = time.perf_counter()
    with timed_steps(warmup, steps, rec), bf16_forwards(rec):
        res = run(cfg)
    out = {"steps": int(res["train"]["train_steps"]), "epsilon": float(res["privacy"]["epsilon"]),
           "run_s": time.perf_counter() - t0,
           "bf16_forwards": rec["bf16_forwards"],
           "peak_mib": torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None}
    if rec.get("timed_steps"):
        out.update(timed_steps=rec["timed_steps"], steps_per_s=rec["timed_steps"] / rec["timed_s"])
        if dev.type == "cuda":
            out["syncs_per_step"] = rec.get("syncs", 0) / rec["timed_steps"]
            top = sorted(rec.get("sync_sites", {}).items(), key=lambda kv: -kv[1])[:3]
            out["sync_sites"] = dict(top)  # the lines that synchronised most often in the timed steps
    return out


def opacus_beside(device: str, steps: int, warmup: int, run_dir: Path, data: str = "digits") -> dict:
    """DP-SGD (dpgen, through the pipeline) and Opacus on the same network, batch size, clip norm and noise
    multiplier ``OPACUS_SIGMA``; Opacus draws Poisson batches of random public inputs of the data's shape."""
    import torch
    from hydra.utils import instantiate

    fixed = (f"model.noise_multiplier={OPACUS_SIGMA}", "accountant.data_dependent_reports=false")
    out = {"sigma": OPACUS_SIGMA, "dpgen": _guarded(lambda: measure("dpsgd_classifier", device, "32", steps, warmup,
                                                                    run_dir / "dpgen", data, fixed))}
    try:
        from opacus import PrivacyEngine
    except ImportError:
        return {**out, "opacus": {"skipped": "opacus is not installed (pip install -e .[bench])"}}

    def opacus_rate() -> dict:
        cfg = compose([*composition("dpsgd_classifier", data), *fixed, *SHORT], run_dir / "opacus")
        m = instantiate(cfg.model)
        shape, n = ((1, 28, 28), 60000) if data == "mnist" else ((1, 8, 8), 1347)
        dev = torch.device(device)
        m.mean, m.std = m.mean.to(dev), m.std.to(dev)  # the normalisation's public constants (setup moves them)
        net = m.make_network(in_channels=shape[0], image_size=shape[1], num_classes=10).to(dev)
        g = torch.Generator().manual_seed(0)
        ds = torch.utils.data.TensorDataset(torch.rand(n, *shape, generator=g).to(dev), torch.randint(10, (n,), generator=g).to(dev))
        opt = torch.optim.SGD(net.parameters(), lr=m.lr)
        net, opt, loader = PrivacyEngine().make_private(
            module=net, optimizer=opt, data_loader=torch.utils.data.DataLoader(ds, batch_size=m.batch_size),
            noise_multiplier=OPACUS_SIGMA, max_grad_norm=m.C, poisson_sampling=True)
        done, t0 = 0, None
        while done < steps:
            for x, y in loader:
                if done == warmup:
                    synchronize(dev)
                    t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(net(m.normalize(x)), y).backward()
                opt.step()
                done += 1
                if done == steps:
                    break
        synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) / 2**20 if on_gpu(dev) else None
        return {"steps_per_s": (steps - warmup) / (time.perf_counter() - t0), "batch_size": m.batch_size, "clip_norm": m.C,
                "peak_mib": peak}

    from dpgen.utils.misc import on_gpu, synchronize

    return {**out, "opacus": _guarded(opacus_rate)}


def _guarded(fn: Callable[[], dict]) -> dict:
    """``fn()``, or ``{"error": <its one-line reason>}``: one failing run never stops the check."""
    try:
        return fn()
    except BaseException as err:  # noqa: BLE001 - reported, and the check exits 1
        if isinstance(err, KeyboardInterrupt):
            raise
        return {"error": f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"}


# -- the other parts -----------------------------------------------------------------------------
def _env() -> dict:
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def cuda_tests(timeout_s: int) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p", "no:cacheprovider", "tests"]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"command": "pytest -m cuda", "error": f"did not finish within {timeout_s} s"}
    lines = [ln.strip("= ") for ln in r.stdout.splitlines() if re.search(r"\b(passed|failed|skipped|error|deselected)\b", ln)]
    out = {"command": "pytest -m cuda", "rc": r.returncode, "summary": lines[-1] if lines else r.stdout[-300:],
           "wall_s": time.perf_counter() - t0}
    if r.returncode != 0:
        out["error"] = "; ".join(ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR")))[:600] or \
            (r.stdout + r.stderr)[-600:]
    return out


def _train(cmd: list[str], run_dir: Path, timeout_s: int) -> dict:
    """A whole ``train.py`` process: its wall time, results.json and private_timings.json (public data)."""
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {timeout_s} s"}
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        from dpgen.bench.distributed import failure_line

        return {"error": failure_line(r)}
    res = json.loads((run_dir / "results.json").read_text())
    timings = json.loads((run_dir / "private_timings.json").read_text()) if (run_dir / "private_timings.json").is_file() else {}
    steps, t = res["train"]["train_steps"], timings.get("train.train_time_s")
    return {"wall_s": wall, "epsilon": res["privacy"]["epsilon"], "steps": steps, "device": res.get("device"),
            "metrics": {k: v for k, v in res.get("metrics", {}).items()
                        if (k.startswith("acc_") or k == "fid") and isinstance(v, int | float)},
            "steps_per_s": steps / t if t else None}


def demo(device: str, work: Path, timeout_s: int) -> dict:
    run_dir = work / "demo"
    cmd = [sys.executable, "train.py", f"trainer.device={device}", "logger=local", "trainer.progress=false",
           f"hydra.run.dir={run_dir}"]
    return {"command": f"python train.py trainer.device={device}", **_train(cmd, run_dir, timeout_s)}


def nccl(work: Path, steps: int, timeout_s: int, n_devices: int) -> dict:
    """``torchrun --nproc-per-node 2`` (NCCL) beside one process, same settings; skipped below two devices."""
    if n_devices < 2:
        return {"skipped": f"{n_devices} CUDA device{'s' if n_devices != 1 else ''} visible; the 2-process NCCL run needs 2"}
    args = [*NCCL_PRESET, *SHORT, "trainer.device=cuda", f"trainer.max_steps={steps}"]
    one = _train([sys.executable, "train.py", *args, f"hydra.run.dir={work / 'nccl-1'}"], work / "nccl-1", timeout_s)
    two = _train([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train.py",
                  *args, f"hydra.run.dir={work / 'nccl-2'}"], work / "nccl-2", timeout_s)
    out = {"command": f"torchrun --nproc-per-node 2 train.py {' '.join(args)}", "one": one, "two": two}
    if "epsilon" in one and "epsilon" in two and not math.isclose(one["epsilon"], two["epsilon"], rel_tol=1e-9):
        out["error"] = f"ε differs: {one['epsilon']!r} on one process, {two['epsilon']!r} on two"
    return out


# -- the plan and the report --------------------------------------------------------------------
def plan(families: list[str], device: str, steps: int, warmup: int, data: str = "digits",
         cpu_steps: int | None = None) -> list[str]:
    """What the check runs, one line each (``--dry-run`` prints these)."""
    lines = ["CUDA-marked tests: pytest -m cuda tests"]
    for name in families:
        label, comp = FAMILIES[name][0], composition(name, data)
        for kind, precision in SETTINGS:
            dev = "cpu" if kind == "cpu" else device
            n = cpu_steps if dev == "cpu" and cpu_steps is not None else steps
            lines.append(f"{label} [{name}]: {dev} precision={precision}, {n} steps ({warmup} warm-up): "
                         f"{' '.join(comp)}")
    if device.startswith("cuda"):
        lines.append("real syncs per timed step of every run above: torch.cuda.set_sync_debug_mode('warn') counts")
    if "dpsgd_classifier" in families:
        lines.append(f"DP-SGD beside Opacus: {device}, same network / batch / clip, sigma={OPACUS_SIGMA}, {steps} steps "
                     f"({warmup} warm-up): {' '.join(composition('dpsgd_classifier', data))}")
        if device.startswith("cuda"):
            lines.append(f"DP-SGD beside Opacus at mnist_dpsgd sizes (dpgen/bench/dpsgd.py): {device}, batch "
                         f"{DPSGD_BATCH}, steps/s and peak device memory, each side in its own process")
            lines.append(f"torch.profiler table of one DP-SGD step (mnist_dpsgd network, batch {DPSGD_BATCH}): CUDA "
                         "kernels by device time")
    if device.startswith("cuda"):
        lines += [f"trainer.compile=on beside off, {FAMILIES[n][0]}: {device} precision=32, {steps} steps ({warmup} "
                  "warm-up, compiling)" for n in COMPILE_FAMILIES if n in families]
    if device.startswith("cuda"):
        lines += [f"trainer.graph=off beside on (auto), {FAMILIES[n][0]}: {device} precision=32, {steps} steps "
                  f"({warmup} warm-up)" for n in families]
    if data == "mnist":
        lines.append("each family's steps/s beside its physical floor (estimate)")
        if "dpsinkhorn" in families:
            lines.append(f"DP-Sinkhorn's paper schedule ({SINKHORN_PAPER_STEPS / 1e6:.1f} M steps) at the measured "
                         f"{device} rate, beside the authors' {SINKHORN_AUTHORS_H} h, with trainer.graph on and off")
    lines.append(f"default demo: python train.py trainer.device={device}")
    lines.append(f"2-process NCCL (two or more CUDA devices, else skipped): torchrun --nproc-per-node 2 train.py "
                 f"{' '.join(NCCL_PRESET)} trainer.device=cuda")
    listed = subprocess.run([sys.executable, "-m", "dpgen.reproduce.gpu_bench", "--dry-run"], capture_output=True,
                            text=True, timeout=120)
    lines += [f"not in this check, next on a lent GPU (make gpu-bench): {line.strip()}"
              for line in listed.stdout.splitlines()[1:]] or [f"make gpu-bench --dry-run failed: {listed.stderr[-300:]}"]
    return lines


def _num(v, fmt: str = "{:.1f}") -> str:
    return "—" if v is None else fmt.format(v)


def _rate(m: dict | None, precision: str = "32") -> str:
    if m is None:
        return "not run"
    if "error" in m:
        return "failed"
    if "skipped" in m:
        return "skipped ‡"
    if precision == "bf16" and not m.get("bf16_forwards"):
        return "no bf16 forward †"
    return _num(m.get("steps_per_s"))


def _mem(m: dict | None, precision: str = "32") -> str:
    if not m or "error" in m or "skipped" in m or (precision == "bf16" and not m.get("bf16_forwards")):
        return "—"
    return _num(m.get("peak_mib"))


def _speedup(a: dict | None, b: dict | None) -> str:
    if not a or not b or not a.get("steps_per_s") or not b.get("steps_per_s"):
        return "—"
    return f"×{b['steps_per_s'] / a['steps_per_s']:.1f}"


def _wrapped(text: str) -> str:
    """A paragraph of the page as lines of at most 110 characters."""
    return textwrap.fill(text, 110, break_long_words=False, break_on_hyphens=False)


def render(report: dict) -> str:
    """The markdown page of a measurement dict (``run_check``'s; tests hand it a fake one)."""
    meta, dev = report["meta"], report["meta"]["device"]
    out = ["# GPU check\n",
           _wrapped(f"Produced by `{COMMAND}` (`python -m dpgen.bench.gpu_check"
           f"{(' ' + meta['arguments']) if meta.get('arguments') else ''}`), {meta['date']}, in {meta['wall_s']:.0f} s. "
           f"Device: **{meta['device_name']}** ({meta['n_devices']} visible); CPU: {meta['cpu']}. "
           f"Versions: {', '.join(f'{k} {v}' for k, v in meta['versions'].items())}. Code: {meta['commit']}.") + "\n",
           "## CUDA-marked tests\n"]
    t = report.get("tests")
    if t is None:
        out.append("Not run (`--skip-tests`).\n")
    else:
        out.append(f"`{t['command']}`: {t.get('summary', '')}" + (f" — **failed**: {t['error']}" if "error" in t else "") + "\n")

    fam, data = report["families"], meta.get("data", "digits")
    what = "embedded 8×8 digits" if data == "digits" else "MNIST presets, 28×28, their own batch sizes"
    out += ["## Every private family: a short training\n",
            _wrapped(f"Each run is `dpgen.pipeline.run` of the composition shown ({what}, `evaluator=none`, "
            f"`trainer.max_steps={meta['steps']}`"
            + (f"; on the CPU {meta['cpu_steps']}" if meta.get("cpu_steps", meta["steps"]) != meta["steps"] else "")
            + f"). Steps/s: private steps {meta['warmup']}…max_steps of the run "
            f"(the first {meta['warmup']} are warm-up), the device synchronised at both ends; the DP class-Gaussian "
            "makes one release, which is the step timed. CPU: `trainer.threads=1`, the default. Peak memory: "
            "`torch.cuda.max_memory_allocated` over the whole run (setup, calibration and training), in MiB.") + "\n",
            f"| family | CPU fp32 steps/s | {dev} fp32 steps/s | {dev} bf16 steps/s | {dev} fp32 / CPU | "
            f"peak MiB fp32 | peak MiB bf16 | ε spent (CPU / fp32 / bf16) |",
            "|---|---|---|---|---|---|---|---|"]
    errors, no_bf16, skipped = [], [], False
    for name, runs in fam.items():
        label = FAMILIES[name][0] if name in FAMILIES else name
        cpu, f32, b16 = runs.get("cpu/32"), runs.get(f"{dev}/32"), runs.get(f"{dev}/bf16")
        eps = " / ".join("—" if not m or "error" in m or "skipped" in m else f"{m['epsilon']:.4f}" for m in (cpu, f32, b16))
        out.append(f"| {label} | {_rate(cpu)} | {_rate(f32)} | {_rate(b16, 'bf16')} | {_speedup(cpu, f32)} | "
                   f"{_mem(f32)} | {_mem(b16, 'bf16')} | {eps} |")
        errors += [f"{label}, {key}: {m['error']}" for key, m in runs.items() if m and "error" in m]
        skipped |= any("skipped" in m for m in runs.values() if m)
        if b16 and "error" not in b16 and "skipped" not in b16 and not b16.get("bf16_forwards"):
            no_bf16.append(label)
    out.append("")
    out += gpu_side(report)
    if no_bf16:
        out.append(f"† `trainer.precision=bf16` ran, but no module forward produced bfloat16 in: {', '.join(no_bf16)}. "
                   "These families autocast no model forward: their steps are float32 whatever the setting, so no "
                   "bf16 figure is given for them.\n")
    if skipped:
        out.append("‡ Not run: the check's time budget (`--budget-s`) was spent before this run's turn.\n")
    out.append("Compositions:\n")
    extra = " ".join(meta.get("set", []))
    out += [f"* {FAMILIES[n][0] if n in FAMILIES else n}: `{' '.join(composition(n, data)) if n in FAMILIES else ''}"
            f"{(' ' + extra) if extra else ''}`" for n in fam]
    out.append("")

    out.append("## The default demo\n")
    d = report.get("demo")
    if d is None:
        out.append("Not run (`--skip-demo`).\n")
    elif "error" in d:
        out.append(f"`{d['command']}` **failed**: {d['error']}\n")
    elif "skipped" in d:
        out.append(f"`{d['command']}`: skipped, {d['skipped']}.\n")
    else:
        mets = ", ".join(f"{k} {v:.4g}" for k, v in d["metrics"].items())
        out.append(f"`{d['command']}`: finished on {d['device']} in {d['wall_s']:.1f} s (whole process: start-up, "
                   f"data, training, evaluation); ε spent {d['epsilon']:.4f}; {mets}.\n")

    out.append("## Two processes, NCCL\n")
    n = report.get("nccl")
    if n is None or "skipped" in n:
        out.append(f"Skipped: {n['skipped'] if n else 'not run'}.\n")
    else:
        out.append(f"`{n['command']}` beside the same command in one process.\n")
        out += ["| processes | steps/s | ε spent | |", "|---|---|---|---|"]
        for k, label in (("one", "1"), ("two", "2 (NCCL)")):
            m = n[k]
            out.append(f"| {label} | {_num(m.get('steps_per_s'))} | {_num(m.get('epsilon'), '{:.6f}')} | "
                       f"{('failed: ' + m['error']) if 'error' in m else ''} |")
        out.append("")
        if "error" in n:
            out.append(f"**Failed:** {n['error']}.\n")
    if errors:
        out += ["## Failures\n", *[f"* {e}" for e in errors], ""]
    return "\n".join(out)


def _cell(m: dict) -> str:
    return f"failed: {m['error']}" if "error" in m else f"skipped: {m['skipped']}" if "skipped" in m \
        else _num(m.get("steps_per_s"))


def gpu_side(report: dict) -> list[str]:
    """The device-side rows: real syncs per step and the floor (mnist) of each family, DP-SGD beside Opacus, the
    DP-Sinkhorn paper schedule's projected time (mnist)."""
    meta, dev = report["meta"], report["meta"]["device"]
    mnist = meta.get("data", "digits") == "mnist"
    rows = []
    for name, runs in report["families"].items():
        m = runs.get(f"{dev}/32") or {}
        if "syncs_per_step" not in m and not (mnist and name in FLOOR_MS):
            continue
        floor = f"{1000 / FLOOR_MS[name]:.0f} (est.)" if mnist and name in FLOOR_MS else "—"
        rows.append(f"| {FAMILIES[name][0] if name in FAMILIES else name} | {_num(m.get('syncs_per_step'))} | "
                    f"{_rate(m)} | {floor} |")
    out = []
    if rows:
        out += [f"Real syncs per timed step on {dev} (`torch.cuda.set_sync_debug_mode(\"warn\")`: device reads and "
                "blocking copies) and the steps/s beside the physical floor (an estimate from one step's bytes and "
                "FLOPs, not a measurement; MNIST presets only):\n",
                f"| family | syncs / step | {dev} fp32 steps/s | floor steps/s |", "|---|---|---|---|", *rows, ""]
        sites = [(FAMILIES[name][0] if name in FAMILIES else name, runs[f"{dev}/32"]["sync_sites"])
                 for name, runs in report["families"].items() if (runs.get(f"{dev}/32") or {}).get("sync_sites")]
        if sites:
            out += ["Where the syncs were made (the Python lines, with their count over the timed steps):\n",
                    *(f"* {label}: " + "; ".join(f"`{k}` ×{v}" for k, v in where.items()) for label, where in sites), ""]
    sk = report["families"].get("dpsinkhorn", {}).get(f"{dev}/32") or {}
    if mnist and sk.get("steps_per_s"):
        hours = SINKHORN_PAPER_STEPS / sk["steps_per_s"] / 3600
        out.append(f"DP-Sinkhorn's paper schedule ({SINKHORN_PAPER_STEPS / 1e6:.1f} M steps to ε = 10 on MNIST) at "
                   f"{sk['steps_per_s']:.1f} steps/s: **{hours:.1f} h** projected, beside the authors' code's "
                   f"{SINKHORN_AUTHORS_H} h on one GPU.\n")
    comp = report.get("compile")
    if comp:
        out += [f"`trainer.compile=on` beside `off` on {dev}, fp32 (`dpgen.utils.compiling`: the model as CUDA graphs, "
                "the loss and the Adam step compiled; the release eager). The compiled run's warm-up steps compile; "
                "run s: the whole short run, compilation included.\n",
                "| family | off steps/s | on steps/s | on / off | ε spent (off / on) | run s (off / on) |",
                "|---|---|---|---|---|---|"]
        for name, on in comp.items():
            off = report["families"].get(name, {}).get(f"{dev}/32") or {}
            eps = " / ".join("—" if not m or "epsilon" not in m else f"{m['epsilon']:.4f}" for m in (off, on))
            secs = " / ".join(_num(m.get("run_s"), "{:.0f}") for m in (off, on))
            out.append(f"| {FAMILIES[name][0] if name in FAMILIES else name} | {_rate(off or None)} | {_rate(on)} | "
                       f"{_speedup(off, on)} | {eps} | {secs} |")
        out.append("")
    out += graph_rows(report, dev, mnist)
    op = report.get("opacus")
    if op is not None:
        out.append("## DP-SGD beside Opacus\n")
        if "skipped" in op:
            out.append(f"Skipped: {op['skipped']}.\n")
        else:
            o, d = op.get("opacus", {}), op.get("dpgen", {})
            out += [f"Same network, batch size, clip norm, σ = {op['sigma']}, Poisson batches, {dev}, fp32.\n",
                    "| implementation | steps/s | peak device memory (MiB) |", "|---|---|---|",
                    f"| dpgen DP-SGD | {_cell(d)} | {_num(d.get('peak_mib'), '{:,.0f}')} |",
                    f"| Opacus | {_cell(o)} | {_num(o.get('peak_mib'), '{:,.0f}')} |", ""]
    mn = report.get("opacus_mnist")
    if mn is not None:
        out.append(f"## DP-SGD beside Opacus at mnist_dpsgd sizes (batch {DPSGD_BATCH})\n")
        if "error" in mn or "skipped" in mn:
            out.append(f"{_cell(mn)}\n")
        else:
            out += ["Each side in its own process (`dpgen/bench/dpsgd.py`), σ = 1, C = 1, fp32.\n",
                    "| implementation | steps/s | peak device memory (MiB) |", "|---|---|---|"]
            sides = [("dpgen DP-SGD", mn.get("dpgen", {})), ("Opacus", mn.get("opacus", {}))]
            if "dpgen_ghost" in mn:  # dpgen/bench/dpsgd.py's model.per_sample=ghost side
                sides.insert(1, ("dpgen DP-SGD, `model.per_sample=ghost`", mn["dpgen_ghost"]))
            for name, m in sides:
                out.append(f"| {name} | {_cell(m)} | {_num(m.get('peak_mib'), '{:,.0f}')} |")
            out.append("")
    prof = report.get("kernel_profile")
    if prof is not None:
        out.append(f"## One DP-SGD step's CUDA kernels by time (mnist_dpsgd network, batch {DPSGD_BATCH})\n")
        out += [f"{_cell(prof)}\n"] if "table" not in prof else ["```", prof["table"].rstrip(), "```", ""]
    return out


def graph_rows(report: dict, dev: str, mnist: bool) -> list[str]:
    """The ``trainer.graph`` table: each family's device fp32 run (``auto``: one captured graph per step) beside the
    same run with ``trainer.graph=off``; with ``--data mnist``, DP-Sinkhorn's paper schedule at both rates."""
    off_runs = report.get("graph_off")
    if not off_runs:
        return []
    out = [f"`trainer.graph` on (the default on {dev}: the whole step, release included, captured once and replayed; "
           "`dpgen.methods.capture`) beside `off` (eager steps), fp32; the same releases (ε of both).\n",
           "| family | off steps/s | on steps/s | on / off | ε spent (off / on) |", "|---|---|---|---|---|"]
    for name, off in off_runs.items():
        on = report["families"].get(name, {}).get(f"{dev}/32") or {}
        eps = " / ".join("—" if not m or "epsilon" not in m else f"{m['epsilon']:.4f}" for m in (off, on))
        out.append(f"| {FAMILIES[name][0] if name in FAMILIES else name} | {_rate(off)} | {_rate(on or None)} | "
                   f"{_speedup(off, on)} | {eps} |")
    out.append("")
    sk_on = report["families"].get("dpsinkhorn", {}).get(f"{dev}/32") or {}
    sk_off = off_runs.get("dpsinkhorn") or {}
    if mnist and sk_on.get("steps_per_s") and sk_off.get("steps_per_s"):
        h_on, h_off = (SINKHORN_PAPER_STEPS / m["steps_per_s"] / 3600 for m in (sk_on, sk_off))
        out.append(f"DP-Sinkhorn's paper schedule ({SINKHORN_PAPER_STEPS / 1e6:.1f} M steps) with `trainer.graph=on`: "
                   f"**{h_on:.1f} h** projected; `off`: {h_off:.1f} h (the authors' code: {SINKHORN_AUTHORS_H} h).\n")
    return out


def failed(report: dict) -> bool:
    nccl_ = report.get("nccl") or {}
    parts = [report.get("tests"), report.get("demo"), nccl_, *nccl_.values()]
    parts += [m for runs in report["families"].values() for m in runs.values()]
    parts += [m for m in (report.get("opacus") or {}).values() if isinstance(m, dict)]
    parts += [m for m in (report.get("opacus_mnist") or {}).values() if isinstance(m, dict)]
    parts += [report.get("opacus_mnist"), report.get("kernel_profile")]
    parts += list((report.get("compile") or {}).values())
    parts += list((report.get("graph_off") or {}).values())
    return any(isinstance(p, dict) and "error" in p for p in parts)


def _versions(device: str) -> dict:
    import numpy
    import torch

    v = {"Python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__}
    if device == "cuda" and torch.cuda.is_available():
        v["CUDA"] = torch.version.cuda
        v["cuDNN"] = str(torch.backends.cudnn.version())
    return v


def run_check(args) -> dict:
    import torch

    from dpgen.paths import code_version
    from dpgen.utils.misc import device_name

    t0 = time.perf_counter()
    dev = torch.device(args.device)
    n_devices = torch.cuda.device_count() if dev.type == "cuda" else 0
    report: dict = {"meta": {"device": args.device, "device_name": device_name(dev) or "CPU", "n_devices": n_devices,
                             "cpu": f"{platform.processor() or platform.machine()}, {os.cpu_count()} threads",
                             "versions": _versions(dev.type),
                             "commit": args.code_version or code_version() or "not a git checkout",
                             "arguments": " ".join(args.argv),
                             "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                             "steps": args.steps, "warmup": args.warmup, "data": args.data,
                             "cpu_steps": args.cpu_steps, "set": list(args.set)},
                    "families": {}}
    over = {"skipped": f"the check's time budget (--budget-s {args.budget_s}) was spent"}

    def in_budget() -> bool:
        return time.perf_counter() - t0 < args.budget_s

    def timeout() -> int:  # a subprocess part ends at most a minute after the budget
        return max(30, min(args.part_timeout, int(args.budget_s + 60 - (time.perf_counter() - t0))))

    if not args.skip_tests:
        print("[gpu-check] CUDA-marked tests", flush=True)
        report["tests"] = cuda_tests(args.part_timeout)
    with tempfile.TemporaryDirectory(prefix="dpgen-gpu-check-") as tmp:
        work = Path(tmp)
        for name in args.families:
            runs = report["families"][name] = {}
            for kind, precision in SETTINGS:
                device = "cpu" if kind == "cpu" else args.device
                key = f"{device}/{precision}"
                if key in runs:  # --device cpu: the CPU fp32 run is the device's
                    continue
                if not in_budget():
                    runs[key] = dict(over)
                    continue
                print(f"[gpu-check] {FAMILIES[name][0]} on {device}, precision {precision}", flush=True)
                run_dir = work / f"{name}-{device}-{precision}"
                runs[key] = _guarded(lambda n=name, d=device, p=precision, r=run_dir: measure(
                    n, d, p, args.cpu_steps if d == "cpu" else args.steps, args.warmup, r, args.data, tuple(args.set)))
                shutil.rmtree(run_dir, ignore_errors=True)
        if dev.type == "cuda":
            report["compile"] = {}
            for name in (n for n in COMPILE_FAMILIES if n in args.families):
                print(f"[gpu-check] {FAMILIES[name][0]} with trainer.compile=on", flush=True)
                run_dir = work / f"{name}-compiled"
                report["compile"][name] = _guarded(lambda n=name, r=run_dir: measure(
                    n, args.device, "32", args.steps, args.warmup, r, args.data, (*args.set, "trainer.compile=on"))) \
                    if in_budget() else dict(over)
        if dev.type == "cuda":
            report["graph_off"] = {}
            for name in args.families:
                print(f"[gpu-check] {FAMILIES[name][0]} with trainer.graph=off", flush=True)
                run_dir = work / f"{name}-eager"
                report["graph_off"][name] = _guarded(lambda n=name, r=run_dir: measure(
                    n, args.device, "32", args.steps, args.warmup, r, args.data, (*args.set, "trainer.graph=off"))) \
                    if in_budget() else dict(over)
                shutil.rmtree(run_dir, ignore_errors=True)
        if "dpsgd_classifier" in args.families:
            print("[gpu-check] DP-SGD beside Opacus", flush=True)
            report["opacus"] = opacus_beside(args.device, args.steps, args.warmup, work / "opacus", args.data) \
                if in_budget() else dict(over)
            if dev.type == "cuda":
                from . import dpsgd as dpsgd_bench

                print("[gpu-check] DP-SGD beside Opacus at mnist_dpsgd sizes, kernel profile", flush=True)
                report["opacus_mnist"] = _guarded(lambda: dpsgd_bench.beside(args.device, DPSGD_BATCH)) \
                    if in_budget() else dict(over)
                report["kernel_profile"] = _guarded(lambda: {"table": dpsgd_bench.kernel_table(
                    args.device, DPSGD_BATCH)}) if in_budget() else dict(over)
        if not args.skip_demo:
            print("[gpu-check] default demo", flush=True)
            report["demo"] = demo(args.device, work, timeout()) if in_budget() else \
                {"command": f"python train.py trainer.device={args.device}", **over}
        if dev.type == "cuda":
            print("[gpu-check] 2-process NCCL", flush=True)
            report["nccl"] = nccl(work, args.steps, timeout(), n_devices) if in_budget() else dict(over)
    report["meta"]["wall_s"] = time.perf_counter() - t0
    return report


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m dpgen.bench.gpu_check", description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="list what would run and exit (no torch work)")
    ap.add_argument("--device", default="cuda", help="the device under test (default cuda; cpu exercises the path)")
    ap.add_argument("--steps", type=int, default=40, help="private steps per family run (default 40)")
    ap.add_argument("--cpu-steps", type=int, default=None, help="private steps of the CPU runs (default: --steps; "
                    "fewer keep a check on the MNIST presets short, where a CPU step takes seconds)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed first steps of each run (default 5)")
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated subset of: " + ", ".join(FAMILIES))
    ap.add_argument("--data", choices=("digits", "mnist"), default="digits",
                    help="the families' data: the embedded 8x8 digits (default), or the MNIST presets (28x28 at the "
                         "presets' batch sizes; MNIST and USPS under $DPGEN_DATA_ROOT in torchvision's layout)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a Hydra override added to every family's composition (repeatable), e.g. model.scaling=0.5")
    ap.add_argument("--skip-tests", action="store_true", help="do not run the CUDA-marked tests")
    ap.add_argument("--skip-demo", action="store_true", help="do not run the default demo")
    ap.add_argument("--budget-s", type=int, default=420, help="start no new part after this many seconds (default "
                    "420: the check ends within 8 minutes on one H100); what is left is reported as skipped")
    ap.add_argument("--part-timeout", type=int, default=240, help="seconds allowed to the tests, the demo and each NCCL run")
    ap.add_argument("--out", type=Path, default=None, help="the markdown report (default docs/benchmarks-gpu.md; "
                    "with --data mnist docs/benchmarks-gpu-mnist.md)")
    ap.add_argument("--json", type=Path, default=None, help="also write the raw measurements as JSON")
    ap.add_argument("--code-version", default=None, help="the code's version to report instead of git's answer (a working "
                    "tree copied to the GPU machine may carry stale or no git metadata)")
    return ap


def _non_default(args) -> list[str]:
    """The options that changed what ran (not where the report went), as they would be typed."""
    defaults, out = vars(parser().parse_args([])), []
    for key, value in vars(args).items():
        if key in ("out", "json", "dry_run", "code_version") or value == defaults.get(key, value):
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [x for v in value for x in (flag, v)] if isinstance(value, list) \
            else [flag, str(value)]
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.argv = _non_default(args)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        print(f"error: --families {','.join(unknown)} unknown; choose from {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    args.cpu_steps = args.steps if args.cpu_steps is None else args.cpu_steps
    if args.out is None:
        args.out = DEFAULT_OUT if args.data == "digits" else DEFAULT_OUT.with_name("benchmarks-gpu-mnist.md")
    if args.warmup >= min(args.steps, args.cpu_steps):
        print(f"error: --warmup {args.warmup} must be below --steps {args.steps} and --cpu-steps {args.cpu_steps}",
              file=sys.stderr)
        return 2
    if args.dry_run:
        print(f"{COMMAND} would run, then write {args.out}:")
        print("\n".join(f"  {line}" for line in plan(args.families, args.device, args.steps, args.warmup, args.data,
                                                   args.cpu_steps)))
        return 0
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: --device {args.device} but torch sees no CUDA device (torch {torch.__version__}, built with "
              f"CUDA {torch.version.cuda}); run it on a GPU machine, or --dry-run / --device cpu here", file=sys.stderr)
        return 2
    report = run_check(args)
    text = render(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    print(text)
    print(f"[gpu-check] wrote {args.out} in {report['meta']['wall_s']:.0f} s", flush=True)
    return 1 if failed(report) else 0


if __name__ == "__main__":
    raise SystemExit(main())
