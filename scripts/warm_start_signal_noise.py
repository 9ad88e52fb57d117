"""What one DP-SWD step can tell a warm-started generator: the step's gradient with its noise against the same
step without noise, measured on the PUBLIC half of MNIST only (a stand-in for the private set).

``python scripts/warm_start_signal_noise.py WARMUP_RUN [LATER_RUN ...] [--root DATA] [--draws 30]``

``WARMUP_RUN``: the folder of a warm-started ``mnist_dpswd_partition`` run stopped after its warm-up
(``trainer.max_steps=0``); its released generator is the starting point, its ``results.json`` gives the OT
phase's calibrated noise std (the sigma that phase would add).  For ``--draws`` steps of the method's own
class-partitioned release (m = B / C rows of each class, k = D orthonormal directions, rows ``(x - c) / 2r``,
noise on both sides as in ``DPSWDGenerator.step``) it prints

* the rows' per-direction signal (within-class std, spread of the class means) beside the noise std;
* the cosine between each noisy step's gradient and the mean noise-free gradient (1: the step points where
  the data says; around 0: a random direction), and ``|E g| / std g`` per parameter over the noisy draws
  (pure noise gives about ``0.8 / sqrt(draws)``), the quantity Adam's step follows;
* for the warm-up and every ``LATER_RUN`` (the same run folder continued by OT steps: a copy of the warm-up's
  folder resumed): how far the released parameters moved from the warm-up's, relative to their norm, and
  how far the samples' class means lie from the public half's (pixels, L2), beside their within-class std.

No private record is read: the batches come from the public half of the training split.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from dpgen.data.datasets import mnist
from dpgen.export.release import load_release, rebuild
from dpgen.ot.sliced import (
    gaussian_projection_release,
    orthogonal_directions,
    sliced_wasserstein_blocks,
)


def flat_parameters(run: Path) -> torch.Tensor:
    return torch.cat([v.flatten().float() for v in load_release(run).state["generator"].values()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("warmup_run", type=Path)
    ap.add_argument("later_runs", type=Path, nargs="*")
    ap.add_argument("--root", default=os.environ.get("DPGEN_DATA_ROOT", "data"))
    ap.add_argument("--draws", type=int, default=30)
    args = ap.parse_args()
    torch.manual_seed(0)
    results = json.loads((args.warmup_run / "results.json").read_text())
    sigma = float(results["train"]["noise_std"])
    method = rebuild(load_release(args.warmup_run))
    cfg = load_release(args.warmup_run).config["model"]
    pub = mnist(args.root, public_fraction=0.5).public  # the public half only
    x, y = pub.x.flatten(1).float(), pub.y
    c, d = int(y.max()) + 1, x.shape[1]
    m = -(-int(cfg["batch_size"]) // c)
    center, radius = 0.5, 0.5 * d ** 0.5  # the preset's public normalisation (value range [0, 1])
    idx_of = [torch.nonzero(y == k).flatten() for k in range(c)]

    def rows(img: torch.Tensor) -> torch.Tensor:
        return (img.flatten(1) - center) / (2.0 * radius)

    def blocks() -> torch.Tensor:
        return rows(torch.cat([x[i[torch.randperm(len(i))[:m]]] for i in idx_of]))

    p = (blocks() @ orthogonal_directions(d, d)).reshape(c, m, d)
    print(f"rows per direction: within-class std {p.std(1).mean():.4f}, class-mean spread {p.mean(1).std(0).mean():.4f}; "
          f"noise std of the OT phase {sigma:.4f}")
    gen = method.G.train()
    y_g = torch.arange(c).repeat_interleave(m)

    def grad(s: float) -> torch.Tensor:
        u = orthogonal_directions(d, d)
        p_t = gaussian_projection_release(blocks(), u, s)
        p_s = gaussian_projection_release(rows(gen(torch.randn(c * m, gen.d_code), y_g)), u, s)
        gen.zero_grad(set_to_none=True)
        sliced_wasserstein_blocks(p_s, p_t, c, 2.0).backward()
        return torch.cat([q.grad.flatten() for q in gen.parameters()])

    clean = torch.stack([grad(0.0) for _ in range(args.draws)])
    noisy = torch.stack([grad(sigma) for _ in range(args.draws)])
    mean_clean = clean.mean(0, keepdim=True)
    cos_n = torch.nn.functional.cosine_similarity(noisy, mean_clean, dim=1)
    cos_c = torch.nn.functional.cosine_similarity(clean, mean_clean, dim=1)
    snr = noisy.mean(0).abs() / noisy.std(0).clamp_min(1e-30)
    print(f"cos(step gradient, mean noise-free gradient): noisy {cos_n.mean():.3f} ± {cos_n.std():.3f}, "
          f"noise-free {cos_c.mean():.3f} ± {cos_c.std():.3f}  ({args.draws} draws each)")
    print(f"per-parameter |E g| / std g over the noisy draws: median {snr.median():.3f} "
          f"(pure noise: about {0.8 / args.draws ** 0.5:.3f})")
    p0 = flat_parameters(args.warmup_run)
    real_means = torch.stack([x[y == k].mean(0) for k in range(c)])
    for run in [args.warmup_run, *args.later_runs]:
        labels = torch.arange(c).repeat_interleave(1000)
        xs = load_release(run).sample(len(labels), labels, seed=1)[0].flatten(1)
        err = torch.stack([(xs[labels == k].mean(0) - real_means[k]).norm() for k in range(c)])
        std = torch.stack([xs[labels == k].std(0).mean() for k in range(c)]).mean()
        print(f"{run.name}: ||theta - theta_warm-up|| / ||theta_warm-up|| = {(flat_parameters(run) - p0).norm() / p0.norm():.3f}; "
              f"|class mean - public class mean| (pixels, L2) {err.mean():.2f}; within-class pixel std {std:.3f}")


if __name__ == "__main__":
    main()
