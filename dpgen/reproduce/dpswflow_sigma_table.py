"""DPSWflow sigma <-> epsilon pairs (DPSWflow paper, privacy analysis, App. C.5 of the paper).

For every published (sigma, epsilon) pair: epsilon of the released code's moments accountant (with
its accumulation bug), of the correct moments accountant, of dpgen's RDP accountant (autodp,
Poisson subsampled Gaussian), and the sigma the correct accountant needs for the paper's epsilon.
Then the one-shot Gaussian mechanism of DPSWflow: the paper's classic sigma, its exact epsilon, and
what dpgen's calibrations give (with the paper's CLT bound and with dpgen's rigorous Chernoff bound).

Interpretation (DPSWflow paper, accounting of DPSWflow-r / DPSWgen): sigma is a noise MULTIPLIER; q = 250 / N_priv; T = int(epochs * N / 250)
steps; moments accountant over integer orders 1..32 (DPSWgen 1..30); conversion at delta (no split).

    dpgen reproduce dpswflow-sigma            # prints the markdown
"""

from __future__ import annotations

from dpgen.privacy import RDPAccountant, Release  # noqa: E402
from dpgen.privacy.accountants import analytic_gaussian_epsilon  # noqa: E402
from dpgen.privacy.calibration import calibrate  # noqa: E402
from dpgen.privacy.dpswflow import (  # noqa: E402
    moments_accountant_epsilon,
    one_shot_noise,
    paper_flow_noise_std,
    paper_one_shot_sigma,
)

# (case, sigma, paper eps, N_priv, epochs, delta, max order, d, N_theta)
CASES = [
    ("MNIST/F-MNIST DPSWflow-r, 35 ep", 0.67, 10, 30000, 35, 1e-5, 32, 8, 70),
    ("MNIST/F-MNIST DPSWflow-r, 20 ep", 0.80, 5, 30000, 20, 1e-5, 32, 8, 70),
    ("DPSWgen MNIST, 35 ep", 0.67, 10, 28500, 35, 1e-5, 30, 8, 70),
    ("DPSWgen MNIST, 20 ep", 0.80, 5, 28500, 20, 1e-5, 30, 8, 70),
    ("CelebA DPSWflow-r, 30 ep", 0.58, 10, 81385, 30, 1e-6, 32, 48, 300),
    ("CelebA DPSWflow-r, 30 ep", 0.72, 5, 81385, 30, 1e-6, 32, 48, 300),
]
ONE_SHOT = [("MNIST/F-MNIST", 8, 31, 1e-5), ("CelebA", 48, 250, 1e-6)]


def subsampled_rows() -> list[dict]:
    out = []
    for case, sigma, eps, n, ep, delta, order, d, k in CASES:
        steps, q = int(ep * n / 250), 250 / n
        bug = moments_accountant_epsilon(sigma, q, steps, delta, order, accumulate_bug=True)
        ok = moments_accountant_epsilon(sigma, q, steps, delta, order)
        rdp = RDPAccountant("poisson").epsilon_of([Release(sigma, q, steps)], delta)
        need = calibrate(eps, delta, accountant=lambda s, q=q, steps=steps, delta=delta, order=order:
                         moments_accountant_epsilon(s, q, steps, delta, order), rel_tol=1e-5)
        out.append({"case": case, "sigma": sigma, "eps": eps, "steps": steps, "q": q, "bug": bug, "ma": ok,
                    "rdp": rdp, "sigma_needed": need, "noise_std": paper_flow_noise_std(sigma, d, k, delta)})
    return out


def one_shot_rows() -> list[dict]:
    out = []
    for name, d, k, delta in ONE_SHOT:
        for eps in (10, 5):
            paper = paper_one_shot_sigma(eps, delta, d, k)
            classic = one_shot_noise(eps, delta, d=d, k=k, bound="clt", calibration="classic")
            row = {"case": name, "d": d, "k": k, "delta": delta, "eps": eps, "paper_sigma": paper,
                   "paper_exact_eps": analytic_gaussian_epsilon(classic.noise_multiplier, classic.delta_conversion)}
            for cal in ("analytic", "rdp"):
                for bound in ("clt", "chernoff"):
                    row[f"{cal}_{bound}"] = one_shot_noise(eps, delta, d=d, k=k, bound=bound,
                                                               calibration=cal).noise_std
            out.append(row)
    return out


def markdown() -> str:
    lines = ["**Subsampled mechanisms (DPSWflow-r, DPSWgen)** — σ is the noise multiplier; q = 250/N, "
             "T = int(epochs·N/250).", "",
             "| case | σ | T | paper ε | MA as coded (bug) | MA correct | dpgen RDP (autodp, Poisson) | "
             "residual (correct vs paper) | σ for paper ε (correct MA) | noise std added (σ·2√w_CLT) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in subsampled_rows():
        lines.append(f"| {r['case']} | {r['sigma']} | {r['steps']} | {r['eps']} | {r['bug']:.2f} | {r['ma']:.2f} | "
                     f"{r['rdp']:.2f} | {100 * (r['ma'] / r['eps'] - 1):+.1f} % | {r['sigma_needed']:.3f} | "
                     f"{r['noise_std']:.2f} |")
    lines += ["", "**One-shot Gaussian mechanism (DPSWflow, Algorithm 2)** — noise *std* added once to every "
              "projection; δ split in half (sensitivity bound / conversion) as in the code.", "",
              "| case | ε | paper σ (classic c·S/ε, CLT) | exact ε of the paper's σ | analytic, CLT | analytic, "
              "Chernoff | RDP, CLT | RDP, Chernoff (dpgen default) |", "|---|---|---|---|---|---|---|---|"]
    for r in one_shot_rows():
        lines.append(f"| {r['case']} (d={r['d']}, N_θ={r['k']}, δ={r['delta']:g}) | {r['eps']} | "
                     f"{r['paper_sigma']:.3f} | {r['paper_exact_eps']:.2f} | {r['analytic_clt']:.3f} | "
                     f"{r['analytic_chernoff']:.3f} | {r['rdp_clt']:.3f} | {r['rdp_chernoff']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
