"""Fréchet distance of synthetic vs real images with torchmetrics' ``FrechetInceptionDistance``.

Two feature extractors (``evaluator.fid.extractor``):

* ``inception``: the standard FID network (torch-fidelity's port of the TF Inception-v3 graph,
  2048-d pool features).  Its weights are fetched from GitHub on first use and cached by torch
  hub (``~/.cache/torch/hub/checkpoints``), or read from ``evaluator.fid.inception_weights``.
  Grayscale images are repeated to 3 channels; images are passed as uint8 at native resolution
  (torch-fidelity resizes to 299 px internally), as TTUR's ``fid.py`` does.
* ``domain``: the penultimate layer (128-d) of a small CNN classifier (:class:`~dpgen.eval.cnn.SmallCNN`)
  trained on the same dataset, so FID runs offline.  Numbers are NOT comparable with Inception FID.

Privacy of the ``domain`` extractor (a deliberate deviation from "trained on the real training
split"): in every dpgen preset the training split IS the private data, and a cached classifier
trained on it would be an artefact derived from private records that lives outside the privacy
accounting (and is reused across runs).  The extractor is therefore trained only on data that is
never private:

* the dataset's PUBLIC split when it has one with at least ``min_public`` images; the FID
  reference set is then the whole test split;
* otherwise a fixed half of the TEST split (a seeded permutation independent of the run's seed),
  and the FID reference set is the OTHER half, so the extractor never saw the reference images.

The trained extractor is cached per dataset under ``<cache_dir>/fid_domain/`` (``cache_dir``:
``evaluator.fid.cache_dir``, else ``$DPGEN_CACHE_DIR``, else ``~/.cache/dpgen``) and keyed by a
hash of its training data and settings; it is never written into a run's checkpoints.

Covariances are accumulated in float64 by torchmetrics; the domain extractor returns float64
features so the final distance stays float64 as well.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from ..data import DataSplits, TensorSplit
from ..utils import atomic_save
from .cnn import SmallCNN, accuracy, fit_cnn

EXTRACTORS = ("inception", "domain")


class InceptionUnavailableError(RuntimeError):
    """The Inception-v3 FID weights could not be loaded (no internet, no local weights file)."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("DPGEN_CACHE_DIR", Path.home() / ".cache" / "dpgen")).expanduser()


class DomainFeatures(nn.Module):
    """Wraps a trained :class:`SmallCNN` for torchmetrics: ``forward(x: (n, C, H, W) in [0, 1])`` ->
    ``(n, num_features)`` float64 penultimate features; ``num_features`` set for torchmetrics."""

    def __init__(self, cnn: SmallCNN) -> None:
        super().__init__()
        self.cnn = cnn.eval()
        self.num_features = cnn.num_features

    def train(self, mode: bool = True) -> DomainFeatures:  # never leaves eval mode (dropout off)
        return super().train(False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cnn.features(x.float()).double()


class InceptionFeatures(nn.Module):
    """Inception-v3 (torch-fidelity weights) pool features; input ``(n, C, H, W)`` in [0, 1]."""

    def __init__(self, weights_path: str | None = None) -> None:
        super().__init__()
        from torchmetrics.image.fid import NoTrainInceptionV3

        try:
            self.net = NoTrainInceptionV3(name="inception-v3-compat", features_list=["2048"],
                                          feature_extractor_weights_path=weights_path)
        except ModuleNotFoundError as e:
            raise InceptionUnavailableError(f"{e}. Fix: pip install torch-fidelity") from e
        except Exception as e:  # URLError / OSError / HTTPError: offline, or a bad weights path
            where = f"the weights file {weights_path!r}" if weights_path else (
                "https://github.com/toshas/torch-fidelity/releases (weights-inception-2015-12-05-6726825d.pth)")
            raise InceptionUnavailableError(
                f"could not load the Inception-v3 FID weights from {where}: {type(e).__name__}: {e}. Fix: run once "
                "on a machine with internet (torch hub caches them in ~/.cache/torch/hub/checkpoints), or download "
                "that file and set evaluator.fid.inception_weights=/path/to/weights-inception-2015-12-05-6726825d.pth, "
                "or use the offline extractor evaluator.fid.extractor=domain (or allow evaluator.fid.fallback=domain)"
            ) from e
        self.num_features = 2048

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        return self.net((x.clamp(0, 1) * 255).round().to(torch.uint8)).double()


@dataclass
class DomainPlan:
    """Which non-private data trains the domain extractor and which is the FID reference."""

    trained_on: str  # "public split (n=...)" | "test split, half A (n=...)"
    reference: str
    train: TensorSplit
    ref: TensorSplit

    def describe(self) -> dict:
        return {"fid_extractor_trained_on": self.trained_on, "fid_reference": self.reference}


def plan_domain_split(data: DataSplits, min_public: int = 1000, split_seed: int = 0) -> DomainPlan:
    """Never private: public split if it has >= ``min_public`` images, else a fixed half of the test split."""
    if data.public is not None and len(data.public) >= min_public:
        return DomainPlan(f"public split (n={len(data.public)})", f"test split (n={len(data.test)})",
                          data.public, data.test)
    n = len(data.test)
    if n < 20:
        raise ValueError(f"dataset {data.name!r}: the test split has {n} images, too few to train a domain FID "
                         "extractor on one half and use the other as reference; set dataset.public_fraction or "
                         "evaluator.fid.enabled=false")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed))
    a, b = perm[: n // 2], perm[n // 2:]
    return DomainPlan(f"test split, fixed half A (n={len(a)}, split seed {split_seed})",
                      f"test split, the other half B (n={len(b)})",
                      TensorSplit(data.test.x[a], data.test.y[a]), TensorSplit(data.test.x[b], data.test.y[b]))


def _fingerprint(split: TensorSplit, settings: dict) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(settings, sort_keys=True).encode())
    h.update(split.x.float().contiguous().numpy().tobytes())
    h.update(split.y.long().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


@dataclass
class DomainSettings:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    num_features: int = 128
    seed: int = 0
    min_steps: int = 1000  # at least this many Adam steps (epochs raised for small training sets)


def domain_extractor(data: DataSplits, cache_dir: str | Path | None = None, settings: DomainSettings | None = None,
                     min_public: int = 1000, device: torch.device | str = "cpu", log=print
                     ) -> tuple[DomainFeatures, DomainPlan, dict]:
    """Load (or train once and cache) the domain extractor of ``data``; returns (extractor, plan, info)."""
    settings = settings or DomainSettings()
    plan = plan_domain_split(data, min_public)
    key = _fingerprint(plan.train, {**asdict(settings), "dataset": data.name, "shape": list(data.image_shape),
                                    "classes": data.num_classes, "trained_on": plan.trained_on})
    path = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    path = path / "fid_domain" / f"{data.name}-{key}.pt"
    c, h, _ = data.image_shape
    cnn = SmallCNN(c, h, data.num_classes, settings.num_features)
    info = {"fid_extractor_cache": str(path)}
    if path.exists():
        ck = torch.load(path, map_location="cpu", weights_only=True)
        cnn.load_state_dict(ck["state_dict"])
        info["fid_extractor_accuracy"] = float(ck["heldout_accuracy"])
        log(f"[eval] domain FID extractor loaded from cache {path}")
    else:
        log(f"[eval] training the domain FID extractor on {plan.trained_on} (cached at {path})")
        cnn = fit_cnn(plan.train.x, plan.train.y, data.num_classes, epochs=settings.epochs,
                      batch_size=settings.batch_size, lr=settings.lr, num_features=settings.num_features,
                      seed=settings.seed, patience=10**9, device=device, min_steps=settings.min_steps).cpu()
        acc = accuracy(cnn, plan.ref.x, plan.ref.y)  # held-out accuracy: a sanity check of the features
        atomic_save({"state_dict": cnn.state_dict(), "heldout_accuracy": acc, "trained_on": plan.trained_on,
                     "settings": asdict(settings), "dataset": data.name}, path)
        info["fid_extractor_accuracy"] = acc
    return DomainFeatures(cnn.to(device)), plan, info


@torch.no_grad()
def frechet_distance(real: torch.Tensor, fake: torch.Tensor, extractor: nn.Module, batch_size: int = 500,
                     device: torch.device | str = "cpu") -> float:
    """FID between image sets ``real, fake: (n, C, H, W)`` in [0, 1] in ``extractor``'s feature space
    (torchmetrics ``FrechetInceptionDistance``; float64 means and covariances)."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    if real.shape[0] < 2 or fake.shape[0] < 2:
        raise ValueError("FID needs at least 2 real and 2 generated images (evaluator.fid.n_fid)")
    metric = FrechetInceptionDistance(feature=extractor, normalize=True, reset_real_features=True).to(device)
    # states are float64 already (torchmetrics allocates them with .double()); set_dtype would also
    # cast the extractor's weights, so it is not called
    for i in range(0, real.shape[0], batch_size):
        metric.update(real[i:i + batch_size].to(device).float().clamp(0, 1), real=True)
    for i in range(0, fake.shape[0], batch_size):
        metric.update(fake[i:i + batch_size].to(device).float().clamp(0, 1), real=False)
    return float(metric.compute())
