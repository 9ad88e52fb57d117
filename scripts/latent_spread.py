"""How spread out a latent generator's samples are, against the public data's own latents.

For a finished DPSWgen run (or any run whose method restores from ``release.pt`` and exposes ``G`` and an
autoencoder): draws ``n`` generated latents and encodes ``n`` real PUBLIC images, then prints, for both,
the mean per-coordinate standard deviation, the mean distance to their own mean and the mean norm.  A
generator that collapsed to one mode has a spread near 0 while the public latents' is not.  Public data
and released weights only.

    python scripts/latent_spread.py outputs/flow/mnist_dpswgen_inf outputs/flow/mnist_dpswgen_paper10
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf


def spread(z: torch.Tensor) -> dict:
    """``z: (n, d)`` -> mean per-coordinate std, mean distance to the mean, mean norm."""
    return {"coord_std": float(z.std(0).mean()), "dist_to_mean": float((z - z.mean(0)).norm(dim=1).mean()),
            "norm": float(z.norm(dim=1).mean())}


def measure(run_dir: Path, n: int = 10000, seed: int = 0) -> tuple[dict, dict]:
    OmegaConf.register_new_resolver("hydra", lambda *_: str(run_dir), replace=True)
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    data = instantiate(cfg.dataset)
    method = instantiate(cfg.model, _convert_="all")
    method.restore(data, run_dir / "release.pt")
    if getattr(method, "G", None) is None or method.space.ae is None:
        raise SystemExit(f"{run_dir}: not a latent generator with an autoencoder (DPSWgen)")
    torch.manual_seed(seed)
    with torch.no_grad():
        y = torch.arange(n) % method.space.n_classes
        z_gen = method.generate_latents(y)
        x_pub = data.public.x[:n]
        z_pub = torch.cat([method.space.ae.encode(x_pub[i:i + 500]) for i in range(0, len(x_pub), 500)])
    return spread(z_gen), spread(z_pub)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--n", type=int, default=10000)
    args = ap.parse_args(argv)
    print("| run | generated: coord. std / dist. to mean / norm | public latents: coord. std / dist. to mean / norm |")
    print("|---|---|---|")
    for r in args.runs:
        g, p = measure(r, args.n)
        print(f"| {r.name} | {g['coord_std']:.3f} / {g['dist_to_mean']:.3f} / {g['norm']:.3f} | "
              f"{p['coord_std']:.3f} / {p['dist_to_mean']:.3f} / {p['norm']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
