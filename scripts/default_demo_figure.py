"""The README's picture: the default preset (digits_moments) at ε = 1, 10 and ∞, one row per class.

    python scripts/default_demo_figure.py [--out docs/img/default_demo_eps.png] [--seed 0]

Trains the default three times (a few seconds each) into a temporary folder and draws each run's
``samples.png`` with its LogReg accuracy on the real test split.  Synthetic images only.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image as mpimg  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

from dpgen.api import train  # noqa: E402

SETTINGS = (("ε = 1", ["accountant.epsilon=1"]), ("ε = 10", ["accountant.epsilon=10"]),
            ("ε = ∞ (non-private)", ["model.private=false", "accountant.epsilon=null"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("docs/img/default_demo_eps.png"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    fig, axes = plt.subplots(1, len(SETTINGS), figsize=(4.2 * len(SETTINGS), 4.6))
    with tempfile.TemporaryDirectory() as tmp:
        for ax, (title, overrides) in zip(axes, SETTINGS, strict=True):
            run = train(["experiment=digits_moments", "logger=local", "trainer.progress=false",
                         f"seed={args.seed}", *overrides], run_dir=Path(tmp) / title.split()[2])
            acc = run.results["metrics"]["acc_logreg"]
            ax.imshow(mpimg.imread(run.run_dir / "samples.png"))
            ax.set_title(f"{title}\nthis run: LogReg on real test {100 * acc:.1f} %", fontsize=10)
            ax.axis("off")
    fig.suptitle("make train (digits_moments: DP class-Gaussian, δ = 1e-4) — synthetic digits, one row per class",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=80)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
