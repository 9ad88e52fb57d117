"""Evaluate a saved digits DA model (``<run>/da_model.pt``) on USPS in both layouts and both splits.

    dpgen reproduce da-layout /path/to/run/da_model.pt [--mnist]

Prints the accuracy (%) on USPS test / train with ``layout=resize`` (16x16 stretched to 28x28) and
``layout=mnist_box`` (MNIST's 20x20 digit box), and with ``--mnist`` on the MNIST test set and on
the U->M private target (the preset's 10,000 seeded MNIST training images).  The USPS *train* split
and that MNIST subset are the sets the M->U / U->M adaptation used: the released DP-SWD code reports
its accuracy on the adaptation set (docs/reproduction/dp-swd.md).  Reads ``$DPGEN_DATA_ROOT`` (default ``data``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

from dpgen.data.domain import USPS_LAYOUTS, mnist_domain, usps_domain  # noqa: E402
from dpgen.models.da import DigitsFeatureExtractor, MLPClassifier  # noqa: E402


@torch.no_grad()
def accuracy(g: torch.nn.Module, h: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
    """Top-1 accuracy (%) of ``h(g(x))``, ``x: (n, 1, 28, 28)``, ``y: (n,)``."""
    pred = torch.cat([h(g(x[i:i + batch])).argmax(1) for i in range(0, len(x), batch)])
    return 100.0 * float((pred == y).float().mean())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, help="da_model.pt of a digits DA run")
    ap.add_argument("--mnist", action="store_true", help="also MNIST test and the U->M private target subset")
    args = ap.parse_args(argv)
    root = os.environ.get("DPGEN_DATA_ROOT", "data")
    ck = torch.load(args.model, map_location="cpu", weights_only=False)
    g, h = DigitsFeatureExtractor(), MLPClassifier(320, 10)
    g.load_state_dict(ck["g"])
    h.load_state_dict(ck["h"])
    g.eval()
    h.eval()
    for layout in USPS_LAYOUTS:
        d = usps_domain(root, image_size=28, layout=layout)
        print(f"usps layout={layout:9s}  test ({len(d.test)}): {accuracy(g, h, d.test.x, d.test.y):.2f}   "
              f"train ({len(d.train)}): {accuracy(g, h, d.train.x, d.train.y):.2f}")
    if args.mnist:
        m = mnist_domain(root, train_size=10000, split_seed=0)  # configs/dataset/usps_mnist.yaml
        print(f"mnist test ({len(m.test)}): {accuracy(g, h, m.test.x, m.test.y):.2f}   U->M private target "
              f"({len(m.train)} train images): {accuracy(g, h, m.train.x, m.train.y):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
