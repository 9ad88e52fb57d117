"""WDP E4 / Figure 3: effect of beta and delta on eps = W - log(delta)/beta (Corollary 1) with W = 10.

(a) beta = 1..50, one curve per delta in {1e-10, 1e-8, 1e-5, 1e-3};
(b) delta from 1e-10 to 1e-5 (log axis), one curve per beta in {1, 2, 5, 10}.

    dpgen reproduce wdp-fig3            # -> docs/figures/wdp_fig3.png
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpgen.privacy.wdp import wdp_epsilon  # noqa: E402

from ..paths import ROOT

W = 10.0


def main(out: Path = ROOT / "docs" / "figures" / "wdp_fig3.png") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    betas = np.arange(1, 51)
    for delta in (1e-10, 1e-8, 1e-5, 1e-3):
        a.plot(betas, [wdp_epsilon(W, delta, float(bb)) for bb in betas], label=f"δ = {delta:g}")
    a.set_xlabel("β")
    a.set_ylabel("ε")
    a.set_ylim(0, 35)
    a.legend(fontsize=7)
    a.set_title("(a) ε vs β (W = 10)", fontsize=10)
    deltas = np.arange(1e-10, 1e-5, 1e-8)  # the notebook's grid
    for beta in (1.0, 2.0, 5.0, 10.0):
        b.plot(deltas, [wdp_epsilon(W, float(d), beta) for d in deltas], label=f"β = {beta:g}")
    b.set_xscale("log")
    b.set_xlabel("δ")
    b.set_ylim(0, 45)
    b.legend(fontsize=7)
    b.set_title("(b) ε vs δ (W = 10)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    print(f"wrote {out} ({out.stat().st_size // 1024} KB)")
    for delta in (1e-10, 1e-5):
        print(f"delta={delta:g}: " + ", ".join(f"beta={bb}: {wdp_epsilon(W, delta, float(bb)):.2f}"
                                               for bb in (1, 2, 5, 10, 50)))


if __name__ == "__main__":
    main()
