"""The FID floor of a latent-space generator: FID of its autoencoder's reconstructions of real images.

DPSWflow-r / DPSWflow / DPSWgen generate in the latent space of a frozen public autoencoder, so a run is
not expected to beat the FID of ``decode(encode(x))`` for real images ``x`` (a practical floor, not a
theorem: every sample is a decoder output, the best latents are the real ones): this script measures it for finished
runs, with the same extractor and reference set as the run's own FID (read from the run's config), so a
reader can tell the autoencoder's share of an FID from the flow's.  Public data only: the test split
(reconstructed and as reference) and the run's released, public-trained autoencoder.

    python scripts/ae_fid_floor.py outputs/flow/mnist_dpswflow_r_inf [more run folders]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dpgen.eval.fid import DomainSettings, domain_extractor, frechet_distance


def floor(run_dir: Path, n: int | None = None) -> dict:
    # the saved config may point at ${hydra:...} (run folder paths): outside Hydra they name the run folder
    OmegaConf.register_new_resolver("hydra", lambda *_: str(run_dir), replace=True)
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    release = run_dir / "release.pt"
    if not release.is_file():
        raise SystemExit(f"{run_dir}: no release.pt (not a finished DPSWflow-family run)")
    data = instantiate(cfg.dataset)
    method = instantiate(cfg.model, _convert_="all")
    method.restore(data, release)
    ae = method.space.ae
    if ae is None:
        raise SystemExit(f"{run_dir}: the run has no autoencoder (model.representation): no reconstruction floor")
    fid_cfg = OmegaConf.to_container(cfg.evaluator.fid, resolve=True)
    extractor, plan, _ = domain_extractor(data, fid_cfg.get("cache_dir"), DomainSettings(**fid_cfg.get("domain", {})),
                                          int(fid_cfg.get("min_public", 1000)), torch.device("cpu"))
    x = data.test.x[: n or len(data.test)]
    with torch.no_grad():
        recon = torch.cat([ae(x[i:i + 500]) for i in range(0, len(x), 500)]).clamp(0, 1)
    value = frechet_distance(plan.ref.x, recon, extractor, batch_size=500, device=torch.device("cpu"))
    run_fid = json.loads((run_dir / "results.json").read_text()).get("metrics", {}).get("fid")
    return {"run": str(run_dir), "ae_recon_fid": value, "run_fid": run_fid, "n_reconstructed": len(x),
            "reference": plan.describe().get("fid_reference")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--n", type=int, default=None, help="reconstruct the first n test images (default: all)")
    args = ap.parse_args(argv)
    print("| run | domain FID of AE reconstructions (floor) | run's domain FID |\n|---|---|---|")
    for r in args.runs:
        f = floor(r, args.n)
        print(f"| {r.name} | {f['ae_recon_fid']:.1f} | {f['run_fid']:.1f} |" if f["run_fid"] is not None
              else f"| {r.name} | {f['ae_recon_fid']:.1f} | — |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
