"""The Inception FID real images get at a DPImageBench cell's FID sizes: what a perfect generator would score.

A shortened cell measures its FID on few images (e.g. 300 synthetic vs 300 sensitive training images), where the
estimator's small-sample bias dominates.  This script puts real images in the synthetic images' place: ``n``
real TEST images against the cell's reference (the same fixed subset of ``n`` sensitive training images the
evaluator reads, ``evaluator.fid.n_reference=n``), and beside it the real-vs-real floor of two halves of that
reference, both with the standard Inception features of :mod:`dpgen.eval.fid`.  It reads the sensitive
training split of a public benchmark dataset, as the benchmark's FID does; nothing is released.

    python scripts/inception_fid_floor.py --root <data root> --dataset mnist --n 300
"""

from __future__ import annotations

import argparse

import torch

from dpgen.data.datasets import fashion_mnist, mnist
from dpgen.eval.fid import InceptionFeatures, fid_with_floor


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the data root (torchvision layout)")
    ap.add_argument("--dataset", choices=("mnist", "fashion_mnist"), default="mnist")
    ap.add_argument("--n", type=int, default=300, help="the cell's FID sizes (generated and reference)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = {"mnist": mnist, "fashion_mnist": fashion_mnist}[args.dataset](args.root, validation_size=5000, seed=0)
    ref = data.private.read_outside_guarantee("the FID of real images at a DPImageBench cell's sizes", args.n)
    real = data.test.x[torch.randperm(len(data.test), generator=torch.Generator().manual_seed(1))[:args.n]]
    out = fid_with_floor(ref.x, real, InceptionFeatures(None), batch_size=50)
    print(f"{args.dataset}: FID of {args.n} real test images vs {len(ref)} sensitive training images "
          f"{out['fid']:.1f}; real-vs-real floor {out['fid_real_vs_real']:.1f} at {out['fid_real_vs_real_sizes']}")


if __name__ == "__main__":
    main()
