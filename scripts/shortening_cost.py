"""What each shortening of the DPImageBench protocol costs, measured on one cell.

The CPU cells of docs/benchmark.md run a shortened protocol (2 epochs, 2,400 synthetic images, batch 64,
ResNet-20 + WRN-16-1, FID on 300 vs 300).  This script runs that cell (the class-Gaussian on MNIST at eps = 10,
whose release is one noisy step, so the run's time is the evaluator's) once as the baseline and once per
variant that undoes ONE shortening, and prints one table: the change in both selections' accuracy (mean ±
population std over the classifiers), in the FID and its real-vs-real floor, and the evaluation time.
Every run holds the release fixed (``trainer.deterministic=true``: its noise is drawn from the seed, so the
variants evaluate the same release; a measurement, never a release to publish).  Two kinds of variation are
measured beside the shortenings: the same command with the release's noise from OS entropy, as any run
draws it (``rerun``), and another seed (``seed1``: the release's noise, the classifiers' initial weights,
their batches).  A change smaller than these is not a cost of the shortening.  Runs are sequential and
resumable: a variant whose run folder holds ``results.json`` is read, not run again.

    python scripts/shortening_cost.py --data-root <data root> --out <folder> [--variants epochs10 fid1000 ...]
    python scripts/shortening_cost.py --rates     # what stays out of reach: the full-size nets' images/s

``--rates`` times (in CPU seconds) what a CPU cannot afford at full size, per image on one CPU thread: a training
step (forward, backward, Adam) of each benchmark classifier at its full size on 28 px grey images, and the
Inception-v3 FID features of 28 px images; no data is read (random inputs: a rate, not a result).

The time is the run's CPU time (user + system seconds of its process, one torch thread: robust to other
load on the machine, where wall time is not), written to ``cpu_seconds.json`` in its folder.  The class-Gaussian's
release costs about a second of it; start-up and data loading about 10 s; the rest is the evaluator.  Each run
reads the sensitive validation images and the FID reference as the benchmark does (outside the privacy
guarantee); nothing here is released.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from dpgen.paths import CONFIGS, ROOT

CPU_FILE = "cpu_seconds.json"  # the run's CPU time, written beside its results

#: The shortened protocol of the CPU cells (docs/benchmark.md), on the class-Gaussian cell, MNIST, eps = 10.
BASE = ["experiment=mnist_moments", "evaluator=dpimagebench", "dataset.validation_size=5000", "accountant.epsilon=10",
        "evaluator.epochs=2", "evaluator.n_synthetic=2400", "evaluator.batch_size=64",
        "evaluator.classifiers=[resnet,wrn]", "evaluator.sizes.resnet.depth=20", "evaluator.sizes.wrn.depth=16",
        "evaluator.sizes.wrn.widen_factor=1", "evaluator.fid.n_generated=300", "evaluator.fid.n_reference=300",
        "logger=local", "trainer.progress=false",
        "trainer.deterministic=true"]  # one release for every variant (its noise drawn from the seed: a measurement only)

#: The classifier settings leave the synthetic images and the FID reference as they are, so their runs skip the
#: FID (``NO_FID``): the baseline's FID holds for them, and their time compares with ``rerun_nofid``'s.
NO_FID = ["evaluator.fid.enabled=false"]

#: name -> (shortening, "baseline -> variant", the overrides that undo it, appended to BASE); in running order
VARIANTS: dict[str, tuple[str, str, list[str]]] = {
    "rerun": ("none: the same command, its release's noise from OS entropy (as any run draws it)", "—",
              ["trainer.deterministic=false"]),
    "rerun_nofid": ("none: the same, once more (FID off)", "—", ["trainer.deterministic=false", *NO_FID]),
    "base_nofid": ("none: the baseline's classifiers alone (FID off)", "—", NO_FID),
    "epochs10": ("epochs", "2 → 10", ["evaluator.epochs=10", *NO_FID]),
    "batch256": ("batch size", "64 → 256", ["evaluator.batch_size=256", *NO_FID]),
    "resnet56": ("ResNet depth", "ResNet-20 → ResNet-56", ["evaluator.sizes.resnet.depth=56", *NO_FID]),
    "synthetic12000": ("synthetic images", "2,400 → 12,000 (2,200 → 11,000 train)",
                       ["evaluator.n_synthetic=12000", *NO_FID]),
    "wrn16_2": ("WRN width", "WRN-16-1 → WRN-16-2", ["evaluator.sizes.wrn.widen_factor=2", *NO_FID]),
    "fid1000": ("FID sizes", "300 / 300 → 1,000 / 1,000",
                ["evaluator.fid.n_generated=1000", "evaluator.fid.n_reference=1000"]),
    "seed1": ("none: another seed (the release's noise, the classifiers' weights and batches)", "seed 0 → 1",
              ["seed=1"]),
    "seed2": ("none: another seed", "seed 0 → 2", ["seed=2"]),
}


def run(name: str, overrides: list[str], out: Path, data_root: str) -> dict:
    """One run of the cell (skipped when its folder already holds results); its metrics and CPU seconds."""
    folder = out / name
    if not (folder / "results.json").is_file():
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, str(ROOT / "train.py"), *BASE, *overrides, f"paths.data_root={data_root}",
               f"hydra.run.dir={folder}"]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        with open(out / f"{name}.log", "w") as log:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        (folder / CPU_FILE).write_text(json.dumps({"cpu_s": cpu, "what": "user + system CPU seconds of the run"}))
    metrics = json.loads((folder / "results.json").read_text())["metrics"]
    cpu_file = folder / CPU_FILE
    return {"metrics": metrics, "cpu_s": json.loads(cpu_file.read_text())["cpu_s"] if cpu_file.is_file() else None}


def _time(r: dict) -> str:
    return "—" if r["cpu_s"] is None else f"{r['cpu_s'] / 60:.1f} min"


def _acc(m: dict, sel: str) -> str:
    return f"{100 * m[f'acc_dpimagebench_{sel}_mean']:.1f} ± {100 * m[f'acc_dpimagebench_{sel}_std']:.1f}"


def _fid(m: dict, b: dict) -> str:
    if "fid" not in m:
        return "— (FID off)"
    return (f"{m['fid'] - b['fid']:+.1f} / {m['fid_real_vs_real'] - b['fid_real_vs_real']:+.1f} "
            f"({m['fid']:.1f} / {m['fid_real_vs_real']:.1f})")


def table(base: dict, rows: list[tuple[str, dict]]) -> str:
    """One row per run: the change against the baseline (the variant's own value in brackets)."""
    b = base["metrics"]
    lines = ["| shortening | baseline → variant | Δ accuracy, sensitive-validation / synthetic selection (%) | "
             "Δ FID / Δ floor | CPU time |",
             "|---|---|---|---|---|",
             f"| none (the baseline) | — | {_acc(b, 'val')} / {_acc(b, 'syn')} | FID {b['fid']:.1f}, "
             f"floor {b['fid_real_vs_real']:.1f} | {_time(base)} |"]
    for name, r in rows:
        m, (what, change, _) = r["metrics"], VARIANTS[name]
        dv = 100 * (m["acc_dpimagebench_val_mean"] - b["acc_dpimagebench_val_mean"])
        ds = 100 * (m["acc_dpimagebench_syn_mean"] - b["acc_dpimagebench_syn_mean"])
        lines.append(f"| {what} | {change} | {dv:+.1f} / {ds:+.1f} ({_acc(m, 'val')} / {_acc(m, 'syn')}) | "
                     f"{_fid(m, b)} | {_time(r)} |")
    spread = [base] + [r for n, r in rows if n.startswith(("seed", "rerun"))]
    if len(spread) > 1:
        vals = [100 * s["metrics"]["acc_dpimagebench_val_mean"] for s in spread]
        fids = [s["metrics"]["fid"] for s in spread if "fid" in s["metrics"]]
        lines.append(f"\nRun-to-run ({len(spread)} runs: the baseline, its reruns and other seeds): mean accuracy "
                     f"{min(vals):.1f} to {max(vals):.1f} % (sd {statistics.stdev(vals):.2f})"
                     + (f"; FID {min(fids):.1f} to {max(fids):.1f} (sd {statistics.stdev(fids):.1f}, {len(fids)} runs)"
                        if len(fids) > 1 else ""))
    return "\n".join(lines)


def rates(batch: int = 16, steps: int = 2, fid_images: int = 32) -> str:
    """Images per second of one training step of each full-size benchmark classifier and of the FID's
    Inception features (after one warm-up batch each)."""
    import time

    import torch
    from omegaconf import OmegaConf

    from dpgen.eval.benchmark_nets import build_classifier, describe
    from dpgen.eval.fid import InceptionFeatures

    torch.set_num_threads(1)
    sizes = OmegaConf.to_container(OmegaConf.load(CONFIGS / "evaluator" / "dpimagebench.yaml").sizes)
    gen = torch.Generator().manual_seed(0)
    lines = []
    for name, size in sizes.items():
        torch.manual_seed(0)
        model = build_classifier(name, 1, 28, 10, size)
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        x, y = torch.rand(batch, 1, 28, 28, generator=gen) * 2 - 1, torch.randint(10, (batch,), generator=gen)
        for i in range(steps + 1):
            if i == 1:
                t0 = time.process_time()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        rate = steps * batch / (time.process_time() - t0)
        lines.append(f"{describe(name, size)}: {rate:.2f} training images/s; one epoch of 55,000 images "
                     f"{55000 / rate / 3600:.1f} h, 50 epochs {50 * 55000 / rate / 3600 / 24:.1f} days")
    extractor = InceptionFeatures(None).eval()
    x = torch.rand(fid_images + 8, 1, 28, 28, generator=gen)
    with torch.no_grad():
        extractor(x[:8])
        t0 = time.process_time()
        extractor(x[8:])
    rate = fid_images / (time.process_time() - t0)
    lines.append(f"Inception-v3 FID features: {rate:.2f} images/s; the full FID (60,000 vs 55,000) "
                 f"{115000 / rate / 3600:.1f} h")
    return "\n".join(f"{line} ({torch.get_num_threads()} torch thread(s))" for line in lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", action="store_true", help="only time the full-size nets per image (no data)")
    ap.add_argument("--data-root", help="the data root (torchvision layout)")
    ap.add_argument("--out", type=Path, help="a folder for the run folders and logs")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS),
                    help="which to run after the baseline (default: all, in this order)")
    args = ap.parse_args()
    if args.rates:
        print(rates())
        return
    if args.data_root is None or args.out is None:
        ap.error("--data-root and --out are required (or --rates)")
    args.out.mkdir(parents=True, exist_ok=True)
    base = run("base", [], args.out, args.data_root)
    rows = [(name, run(name, VARIANTS[name][2], args.out, args.data_root)) for name in args.variants]
    print(table(base, rows))


if __name__ == "__main__":
    main()
