"""WDP E1 / Figure 1: budgets of the Laplace and Gaussian mechanisms (scales 1, 2, 3, 5) under RDP
(order alpha) and WDP (order mu), orders 1..10 (WDP paper, Fig. 1; Table 1 of WDP paper).

    dpgen reproduce wdp-fig1            # -> docs/figures/wdp_fig1.png, prints the grid at integer orders
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpgen.privacy.wdp import gaussian_rdp, gaussian_wdp, laplace_rdp, laplace_wdp  # noqa: E402

from ..paths import ROOT

SCALES = (1.0, 2.0, 3.0, 5.0)


def grid(orders: np.ndarray) -> dict[str, dict[float, np.ndarray]]:
    return {
        "Laplace, RDP": {b: laplace_rdp(orders, b) for b in SCALES},
        "Laplace, WDP": {b: laplace_wdp(orders, b) for b in SCALES},
        "Gaussian, RDP": {s: gaussian_rdp(orders, s) for s in SCALES},
        "Gaussian, WDP": {s: gaussian_wdp(orders, s) for s in SCALES},
    }


def main(out: Path = ROOT / "docs" / "figures" / "wdp_fig1.png") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    orders = np.linspace(1, 10, 100)  # the notebook's grid
    g = grid(orders)
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.0))
    for ax, (title, curves) in zip(axes, g.items(), strict=True):
        for scale, y in curves.items():
            ax.plot(orders, y, label=f"{'b' if 'Laplace' in title else 'σ'} = {scale:g}")
        ax.set_title(title, fontsize=10)
        ax.set_xlim(1, 10)
        ax.set_ylim(0, 2)
        ax.set_xlabel("order α" if "RDP" in title else "order μ")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("ε")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    print(f"wrote {out} ({out.stat().st_size // 1024} KB)")
    ints = np.arange(1, 11, dtype=float)
    gi = grid(ints)
    print("| mechanism | scale | " + " | ".join(f"{int(o)}" for o in ints) + " |")
    print("|---|---|" + "---|" * len(ints))
    for title, curves in gi.items():
        for scale, y in curves.items():
            print(f"| {title} | {scale:g} | " + " | ".join(f"{v:.4f}" for v in y) + " |")


if __name__ == "__main__":
    main()
