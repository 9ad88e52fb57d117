"""Signal per released coordinate of the DPSWflow rows (codes / r), measured on the PUBLIC half of MNIST only.

``python scripts/dpswflow_signal_noise.py [--root DATA]``: for the PCA-64 (public 0.9-quantile radius) and
DCT-100 (centre 0, worst-case radius 28) representations of docs/utility.md, the per-coordinate
within-class std and the spread of the class means of the rows, to set beside the released noise std.
No private record is read.
"""

from __future__ import annotations

import argparse
import os

import torch

from dpgen.data.datasets import mnist
from dpgen.data.representations import build_representation

SETTINGS = {"pca64 q0.9": dict(kind="pca", n_components=64, radius_quantile=0.9),
            "dct100 c0 r28": dict(kind="dct", n_components=100, center=0.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=os.environ.get("DPGEN_DATA_ROOT", "data"))
    args = ap.parse_args()
    data = mnist(args.root, public_fraction=0.5)
    pub = data.public  # the public half only
    for name, kw in SETTINGS.items():
        kw = dict(kw)
        rep = build_representation(kw.pop("kind"), data.image_shape, data.value_range, public_x=pub.x, **kw)
        z = rep.encode(pub.x).float() / rep.radius
        within = torch.stack([z[pub.y == c].std(0) for c in range(10)]).mean(0)
        spread = torch.stack([z[pub.y == c].mean(0) for c in range(10)]).std(0)
        print(f"{name}: radius {rep.radius:.3f}, row norm median {float(z.norm(dim=1).median()):.3f}, "
              f"within-class std per coordinate max {within.max():.3f} median {within.median():.3f}, "
              f"class-mean spread max {spread.max():.3f} median {spread.median():.3f}")


if __name__ == "__main__":
    main()
