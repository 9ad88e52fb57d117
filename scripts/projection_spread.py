"""Per-projection signal spread of MNIST rows under dpgen's and the released codes' row maps.

The DP-SWD / DPSWflow releases add Gaussian noise to every projection ``<r_i, theta>`` of a row
``r_i`` on a unit direction ``theta``.  What the noise competes with is the spread of those
projections over the data: for a fixed direction,

    s(theta) = std_i <r_i, theta>,

averaged here over ``--directions`` uniform random unit directions (seeded, public).  Printed:

* dpgen's public row map (``dpgen.privacy.rows.RowMap``): ``r = (x - 0.5) / (2 R)``, R = 14 = the
  worst-case ``||x - 0.5||`` of a 784-pixel image in [0, 1] (norm <= 1/2, ``label_mode=none``/partition)
  and the same with the scaled one-hot appended (``label_mode=concat``, D = 794);
* the bound the old doc quoted, ``0.5 / sqrt(794)`` (a row of norm 1/2 projected on a uniform
  direction has RMS ``0.5 / sqrt(D)``; MNIST rows are far inside the ball);
* the released DP-SWD domain-adaptation code's scaling (``ClassSWD``: rows divided by twice the
  largest row norm of the private batch, a data-dependent statistic), applied to MNIST pixel rows
  in batches of ``--batch`` (128, the released batch size), for raw [0, 1] pixels and for the
  loader's ``(x - 0.5) / 0.5`` pixels;
* DPSWflow's unit-norm latents: ``E_theta <z, theta>^2 = 1/d`` for any unit z, so the spread is at
  most ``1/sqrt(d)`` (0.354 for the released d = 8, 0.236 for dpgen's d = 8 + 10 label
  coordinates); the noise std per projection of the released setting (sigma = 0.67, N_theta = 70,
  delta = 1e-5: ``dpgen.privacy.dpswflow.paper_flow_noise_std``) beside it.

Usage (about 20 s on one core)::

    DPGEN_DATA_ROOT=data python scripts/projection_spread.py
"""

from __future__ import annotations

import argparse
import math
import os

import torch

from dpgen.privacy.dpswflow import paper_flow_noise_std
from dpgen.privacy.rows import RowMap


def mnist_train(root: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``(60000, 784)`` pixels in [0, 1] and ``(60000,)`` labels of the MNIST training set."""
    import torchvision

    ds = torchvision.datasets.MNIST(root=root, train=True, download=False)
    return ds.data.reshape(len(ds.data), -1).double() / 255.0, ds.targets.clone()


def directions(dim: int, k: int, seed: int) -> torch.Tensor:
    """``(dim, k)`` uniform random unit directions (columns)."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.randn(dim, k, generator=g, dtype=torch.float64)
    return theta / theta.norm(dim=0, keepdim=True)


def spread(rows: torch.Tensor, theta: torch.Tensor) -> float:
    """Mean over directions of the std over rows of ``<r_i, theta>``: ``rows (n, D)``, ``theta (D, k)``."""
    return float((rows @ theta).std(dim=0).mean())


def batch_max_scaled(x: torch.Tensor, batch: int, seed: int) -> torch.Tensor:
    """Rows divided by ``2 * max ||x_j||`` over their (random, public-seeded) batch of ``batch`` rows."""
    g = torch.Generator().manual_seed(seed)
    x = x[torch.randperm(len(x), generator=g)]
    out = []
    for start in range(0, len(x) - batch + 1, batch):  # drop_last, as the released loaders
        b = x[start:start + batch]
        out.append(b / (2.0 * b.norm(dim=1).max()))
    return torch.cat(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.environ.get("DPGEN_DATA_ROOT", "data"))
    ap.add_argument("--directions", type=int, default=200)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    x, y = mnist_train(args.root)
    img = x.reshape(-1, 1, 28, 28)
    none = RowMap(784, 10, (0.0, 1.0), None, None, "none", 1.0)
    concat = RowMap(784, 10, (0.0, 1.0), None, None, "concat", 1.0)
    r_none, r_concat = none(img, y), concat(img, y)
    th784, th794 = directions(784, args.directions, args.seed), directions(794, args.directions, args.seed)

    rows = [
        ("dpgen RowMap, label_mode=none/partition (D=784): (x-0.5)/28", spread(r_none, th784),
         f"row norms: median {float(r_none.norm(dim=1).median()):.3f} (bound 0.5)"),
        ("dpgen RowMap, label_mode=concat (D=794), whole row", spread(r_concat, th794),
         f"row norms: median {float(r_concat.norm(dim=1).median()):.3f}; the label block adds spread"),
        ("dpgen RowMap, label_mode=concat (D=794), image block only", spread(r_concat[:, :784], th794[:784]),
         "(x-0.5)/28/sqrt(2): the preset of the old Table 2 run"),
        ("released DA scaling with the dataset-wide max norm instead of the batch max",
         spread(x / (2.0 * x.norm(dim=1).max()), th784), "for comparison"),
        ("raw [0, 1] pixel rows, no normalisation (the Table 2 hypothesis; no norm bound)", spread(x, th784),
         f"row norms: median {float(x.norm(dim=1).median()):.2f}, max {float(x.norm(dim=1).max()):.2f}"),
        ("old doc's figure 0.5/sqrt(794) (RMS of a norm-1/2 row)", 0.5 / math.sqrt(794), "an upper bound, not MNIST"),
        (f"released DA scaling x/(2 max_batch ||x||), raw [0,1] pixels, B={args.batch}",
         spread(batch_max_scaled(x, args.batch, args.seed), th784), "data-dependent scale (not DP as analysed)"),
        (f"released DA scaling, loader pixels (x-0.5)/0.5, B={args.batch}",
         spread(batch_max_scaled((x - 0.5) / 0.5, args.batch, args.seed), th784), ""),
    ]
    print(f"MNIST train, n = {len(x)}, {args.directions} random unit directions (seed {args.seed})")
    print("| row map | per-projection spread (mean over directions of std over rows) | note |")
    print("|---|---|---|")
    for name, value, note in rows:
        print(f"| {name} | {value:.4f} | {note} |")
    released = rows[6][1]
    for i in (0, 2):
        print(f"\n{rows[i][0]} / released DA (raw pixels): {rows[i][1] / released:.2f}", end="")
    print()

    noise = paper_flow_noise_std(0.67, 8, 70, 1e-5)
    print("\nDPSWflow (unit-norm latent rows): spread <= 1/sqrt(d)")
    for d, label in ((8, "released code, d = 8, no labels"), (18, "dpgen, d = 8 + 10 label coordinates")):
        print(f"  {label}: 1/sqrt({d}) = {1 / math.sqrt(d):.3f}; released noise std per projection "
              f"(sigma 0.67, N_theta 70, delta 1e-5) = {noise:.2f}; ratio {1 / math.sqrt(d) / noise:.3f}")
    z = torch.randn(20000, 8, generator=torch.Generator().manual_seed(args.seed), dtype=torch.float64)
    z = z / z.norm(dim=1, keepdim=True)
    print(f"  check on 20,000 uniform unit vectors in R^8: spread {spread(z, directions(8, args.directions, 1)):.3f}")


if __name__ == "__main__":
    main()
