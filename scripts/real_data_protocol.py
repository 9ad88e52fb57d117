"""The "real data" row of a downstream protocol: its LogReg / MLP trained on the REAL training images.

DP-Sinkhorn's Table 1 opens with a "real data" row (MNIST LogReg 92.2 / MLP 97.5, F-MNIST 84.5 / 88.2,
DP-Sinkhorn paper, Table 1 protocol): the same classifiers trained on the real training set instead of synthetic
samples.  Running both of dpgen's protocols (``evaluator.protocol``: ``sklearn``, ``torch``) on real data
checks that the ``torch`` protocol is the paper's (it should land on the paper's real-data numbers) and
shows what each protocol gives a perfect generator, so a synthetic-data score can be read against it::

    python scripts/real_data_protocol.py --dataset mnist --dataset fashion_mnist

This is a reference measurement of the evaluation protocol, not a release: it reads the training images
directly (torchvision layout under ``$DPGEN_DATA_ROOT``) and reports only test accuracies; no run of
dpgen's DP pipeline reads it.  The real training images are not thresholded (the torch protocol
thresholds *generated* pixels only; ``--threshold`` applies it to the real images as well).
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from dpgen.eval.downstream import downstream_accuracy

PAPER_REAL = {"mnist": (92.2, 97.5), "fashion_mnist": (84.5, 88.2)}  # DP-Sinkhorn Table 1, real data: LogReg / MLP


def load_real(name: str, root: str, train: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n, 1, 28, 28)`` in [0, 1] and labels, read with torchvision (no download)."""
    from torchvision import datasets

    cls = {"mnist": datasets.MNIST, "fashion_mnist": datasets.FashionMNIST}[name]
    ds = cls(root, train=train, download=False)
    return ds.data.unsqueeze(1).float() / 255.0, ds.targets.long()


def measure(name: str, root: str, seed: int = 0, threshold: bool = False) -> list[dict]:
    x, y = load_real(name, root, train=True)
    xt, yt = load_real(name, root, train=False)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))  # the validation tail is random
    x, y = x[perm], y[perm]
    rows = []
    for protocol in ("sklearn", "torch"):
        t0 = time.time()
        acc = downstream_accuracy(x, y, xt, yt, ("logreg", "mlp"), seed=seed, num_classes=10, protocol=protocol,
                                  torch_clf={"threshold": threshold})
        rows.append({"dataset": name, "protocol": protocol, "logreg": 100 * acc["acc_logreg"],
                     "mlp": 100 * acc["acc_mlp"], "seconds": time.time() - t0})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", action="append", choices=sorted(PAPER_REAL), help="repeatable (default: mnist)")
    ap.add_argument("--root", default=os.environ.get("DPGEN_DATA_ROOT", "./data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threshold", action="store_true", help="threshold the real training images as generated ones")
    args = ap.parse_args(argv)
    print("| dataset | protocol | LogReg % | MLP % | paper real data (LogReg / MLP) | seconds |\n|---|---|---|---|---|---|")
    for name in args.dataset or ["mnist"]:
        for r in measure(name, args.root, args.seed, args.threshold):
            paper = PAPER_REAL[name]
            print(f"| {name} | {r['protocol']} | {r['logreg']:.1f} | {r['mlp']:.1f} | {paper[0]} / {paper[1]} "
                  f"| {r['seconds']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
