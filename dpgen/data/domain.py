"""Domain-adaptation data (Hydra targets): a labelled public *source* and a private *target*.

A :class:`Domain` is one domain's train and test split.  :func:`domain_pair` turns a (source,
target) pair into the :class:`DomainSplits` the pipeline expects:

* ``public``  = source train split, labelled (public data, as in the DP-SWD setting, DP-SWD paper, Alg. 2);
* ``private`` = target train split, **unlabelled** (labels replaced by -1 before the split is built:
  the target labels never enter training), readable only through a ``PrivateSampler``; the
  accountant's N is its size;
* ``test``    = target test split (labelled; only the evaluator reads it);
* ``source_test`` = source test split (diagnostic source accuracy).

Domains:

* ``mnist_domain`` — MNIST 28x28 (torchvision layout ``<root>/MNIST/raw``); ``train_size`` keeps a
  fixed seeded subset of the training images (U->M uses 10,000 private target images, the N of
  Table 4, and evaluates on the separate MNIST test set).
* ``usps_domain`` — USPS from ``<root>/USPS/usps.h5`` (7291 train / 2007 test, 16x16 in [0, 1]),
  brought to 28x28 (the spec's 28x28 CoGAN USPS pickle is not available here).  ``layout``:
  ``"mnist_box"`` puts the digit in MNIST's geometry — USPS digits fill their 16x16 frame, MNIST
  digits are size-normalised to a 20x20 box centred in 28x28 — by a bilinear resize to 20x20 and a
  4-pixel zero border; ``"resize"`` stretches 16x16 to the full 28x28 frame (digits then look 1.4x
  larger than MNIST's).  The layout is public preprocessing; it decides most of the M->U / U->M gap
  (docs/reproduction/dp-swd.md).
* ``sklearn_digits_domain`` — the embedded ``digits_shift`` pair: scikit-learn's 1797 8x8 digits,
  resized to 28x28, split in two disjoint stratified halves (seed 0).  ``half=0`` is the source as
  is; ``half=1`` is the target, *domain-shifted*: rotated by ``rotation`` degrees and its strokes
  thickened by a ``thicken`` x ``thicken`` grey-level dilation (max filter), at 28x28.
* ``feature_domain`` — pre-extracted ResNet-50 features (Office-31, VisDA); users bring the
  files.  Expected location ``<root>/<benchmark>/<domain>.npz`` or ``.csv`` (see
  :func:`read_feature_file` for the format).  ``feature_pair`` builds a pair from domain *names*
  (``dataset.source=amazon dataset.target=webcam``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .base import DatasetNotFoundError, DataSplits, PrivateSplit, TensorSplit, require_files
from .integrity import read_mnist_like, reading

UNLABELLED = -1
FEATURE_SUFFIXES = (".npz", ".csv")


@dataclass
class Domain:
    """One domain: ``train``/``test`` splits, ``x: (n, *input_shape)`` float, ``y: (n,)`` long."""

    name: str
    train: TensorSplit
    test: TensorSplit
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.x.shape[1:])


@dataclass
class DomainSplits(DataSplits):
    """:class:`DataSplits` for domain adaptation: ``public`` = labelled source train, ``private`` =
    unlabelled target train, ``test`` = target test; plus the source test split and names."""

    source_test: TensorSplit | None = None
    source_name: str = ""
    target_name: str = ""
    input_shape: tuple[int, ...] = field(default_factory=tuple)
    # True when ``test`` IS the private target train split (``test_fraction=0``, transductive protocol):
    # the evaluator then labels acc_target as computed on private records, outside the guarantee
    transductive_eval: bool = False


def domain_pair(source: Domain, target: Domain, name: str | None = None) -> DomainSplits:
    """Source (public, labelled) + target (private, unlabelled) -> :class:`DomainSplits`."""
    if source.input_shape != target.input_shape:
        raise ValueError(f"source '{source.name}' inputs have shape {source.input_shape} but target '{target.name}' has "
                         f"{target.input_shape}; resize both domains to the same shape (e.g. image_size=28)")
    if source.num_classes != target.num_classes:
        raise ValueError(f"source '{source.name}' has {source.num_classes} classes, target '{target.name}' "
                         f"{target.num_classes}; domain adaptation here needs the same label set")
    shape = source.input_shape
    image_shape = shape if len(shape) == 3 else (1, 1, int(np.prod(shape)))
    unlabelled = torch.full((len(target.train),), UNLABELLED, dtype=torch.long)
    return DomainSplits(name=name or f"{source.name}->{target.name}", private=PrivateSplit(target.train.x, unlabelled),
                        test=target.test, public=source.train, num_classes=source.num_classes,
                        image_shape=image_shape, value_range=(float(source.train.x.min()), float(source.train.x.max())),
                        source_test=source.test, source_name=source.name, target_name=target.name, input_shape=shape)


def _resize(x: torch.Tensor, size: int) -> torch.Tensor:
    if x.shape[-1] == size:
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False).clamp(0.0, 1.0)


def _subset(x: torch.Tensor, y: torch.Tensor, size: int | None, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if size is None or size >= len(y):
        return x, y
    if size <= 0:
        raise ValueError(f"dataset.*.train_size must be positive, got {size}")
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:size]
    return x[idx], y[idx]


# ------------------------------------------------------------------------------ digit domains
_MNIST_FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def mnist_domain(root: str, image_size: int = 28, train_size: int | None = None, split_seed: int = 0,
                 download: bool = False) -> Domain:
    """MNIST (``<root>/MNIST/raw/``), ``(n, 1, image_size, image_size)`` in [0, 1]."""
    if not download:
        require_files("mnist", root, [Path(root) / "MNIST" / "raw" / f for f in _MNIST_FILES])
    tr, te = read_mnist_like("MNIST", "MNIST", "mnist", root, download)  # a damaged file: named, with the fix
    f = lambda d: _resize(d.data.float().div(255.0)[:, None], image_size)  # noqa: E731
    x_tr, y_tr = _subset(f(tr), tr.targets.long(), train_size, split_seed)
    return Domain("mnist", TensorSplit(x_tr, y_tr), TensorSplit(f(te), te.targets.long()), 10)


USPS_LAYOUTS = ("resize", "mnist_box")


def mnist_box(x: torch.Tensor, size: int = 28) -> torch.Tensor:
    """MNIST's digit geometry for frame-filling digits: bilinear resize to the 20/28 box, zero border.

    MNIST digits are size-normalised to a 20x20 box inside a 28x28 image (LeCun et al.); USPS digits
    fill their whole 16x16 frame.  ``x: (n, C, h, w)`` in [0, 1] -> ``(n, C, size, size)``, the digit
    in the central ``round(20 * size / 28)`` pixels.
    """
    box = round(20 * size / 28)
    lo = (size - box) // 2
    inner = F.interpolate(x, size=(box, box), mode="bilinear", align_corners=False).clamp(0.0, 1.0)
    return F.pad(inner, (lo, size - box - lo, lo, size - box - lo))


def usps_domain(root: str, image_size: int = 28, train_size: int | None = None, split_seed: int = 0,
                layout: str = "resize") -> Domain:
    """USPS from ``<root>/USPS/usps.h5`` (groups ``train``/``test``: ``data`` n x 256 in [0, 1], ``target``).

    ``layout="resize"``: 16x16 stretched to ``image_size``; ``"mnist_box"``: :func:`mnist_box`.
    """
    import h5py

    if layout not in USPS_LAYOUTS:
        raise ValueError(f"dataset.*.layout={layout!r} is unknown; choose one of {USPS_LAYOUTS} "
                         "(mnist_box = MNIST's 20x20 digit box in a 28x28 frame)")
    h5 = Path(root) / "USPS" / "usps.h5"
    require_files("usps", root, [h5], download_supported=False)
    place = (lambda x: mnist_box(x, image_size)) if layout == "mnist_box" else (lambda x: _resize(x, image_size))
    with reading([h5], "usps"), h5py.File(h5, "r") as fh:
        def read(split: str) -> tuple[torch.Tensor, torch.Tensor]:
            x = torch.from_numpy(np.asarray(fh[split]["data"][:], dtype=np.float32)).reshape(-1, 1, 16, 16)
            return place(x), torch.from_numpy(np.asarray(fh[split]["target"][:])).long()

        x_tr, y_tr = read("train")
        x_te, y_te = read("test")
    x_tr, y_tr = _subset(x_tr, y_tr, train_size, split_seed)
    return Domain("usps", TensorSplit(x_tr, y_tr), TensorSplit(x_te, y_te), 10)


def shift_digits(x: torch.Tensor, rotation: float, thicken: int) -> torch.Tensor:
    """The documented domain shift of ``digits_shift``: rotate by ``rotation`` degrees (bilinear,
    about the centre) then dilate strokes with a ``thicken`` x ``thicken`` max filter.  ``x: (n,1,H,W)``."""
    from torchvision.transforms.functional import InterpolationMode, rotate

    out = rotate(x, float(rotation), interpolation=InterpolationMode.BILINEAR) if rotation else x
    if thicken > 1:
        out = F.max_pool2d(F.pad(out, ((thicken - 1) // 2, thicken // 2, (thicken - 1) // 2, thicken // 2)),
                           thicken, stride=1)
    return out.clamp(0.0, 1.0)


def sklearn_digits_domain(half: int = 0, image_size: int = 28, rotation: float = 0.0, thicken: int = 1,
                          test_fraction: float = 0.25) -> Domain:
    """One half of scikit-learn's 8x8 digits (bundled, no download) as a 28x28 domain.

    The 1797 images are split in two disjoint stratified halves (``random_state=0``), so source and
    target never share an image; each half is split again into train/test (``test_fraction``).
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if half not in (0, 1):
        raise ValueError(f"dataset.*.half must be 0 or 1, got {half}")
    ds = load_digits()
    x = torch.from_numpy(ds.images.astype(np.float32) / 16.0)[:, None]
    y = torch.from_numpy(ds.target.astype(np.int64))
    idx = np.arange(len(y))
    halves = train_test_split(idx, test_size=0.5, random_state=0, stratify=y.numpy())
    mine = halves[half]
    tr, te = train_test_split(mine, test_size=test_fraction, random_state=0, stratify=y.numpy()[mine])
    xs = shift_digits(_resize(x, image_size), rotation, thicken)
    name = "digits" if (rotation == 0 and thicken <= 1) else "digits_shifted"
    t = lambda i: torch.from_numpy(np.sort(i))  # noqa: E731
    return Domain(name, TensorSplit(xs[t(tr)], y[t(tr)]), TensorSplit(xs[t(te)], y[t(te)]), 10)


# ------------------------------------------------------------------ pre-extracted features
def read_feature_file(path: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Read one domain's ResNet-50 features: ``(x: (n, D) float32, y: (n,) long)``.

    * ``.npz``: arrays ``features`` (n, D) float and ``labels`` (n,) int (class indices 0..C-1);
    * ``.csv``: no header, one sample per row, D comma-separated feature values followed by the
      integer class label in the last column (the layout of the ResNet-50 feature files on the
      ``jindongwang/transferlearning`` data page).
    """
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path) as z:
            missing = [k for k in ("features", "labels") if k not in z]
            if missing:
                raise ValueError(f"{path}: missing array(s) {missing}; an .npz feature file needs 'features' (n, D) "
                                 "and 'labels' (n,)")
            x, y = np.asarray(z["features"], dtype=np.float32), np.asarray(z["labels"])
    elif path.suffix == ".csv":
        arr = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
        if arr.shape[1] < 2:
            raise ValueError(f"{path}: a .csv feature file needs D feature columns followed by a label column")
        x, y = arr[:, :-1].astype(np.float32), arr[:, -1]
    else:
        raise ValueError(f"{path}: unsupported feature file type; use .npz or .csv")
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"{path}: features must be (n, D) and labels (n,), got {x.shape} and {y.shape}")
    if not np.allclose(y, np.round(y)) or (y < 0).any():
        raise ValueError(f"{path}: labels must be non-negative integers")
    return torch.from_numpy(x), torch.from_numpy(np.round(y).astype(np.int64))


def feature_file(root: str | Path, benchmark: str, domain: str) -> Path:
    """``<root>/<benchmark>/<domain>.npz`` (preferred) or ``.csv``; raises listing both if neither exists."""
    base = Path(root) / benchmark
    cands = [base / f"{domain}{s}" for s in FEATURE_SUFFIXES]
    for c in cands:
        if c.exists():
            return c
    raise DatasetNotFoundError(f"{benchmark}/{domain}", root, cands, download_supported=False)


def feature_domain(root: str, benchmark: str, domain: str, num_classes: int, test_fraction: float = 0.2,
                   split_seed: int = 0, allow_transductive_eval: bool = False) -> Domain:
    """One domain of pre-extracted features, split train/test (stratified when possible, seeded).

    ``test_fraction=0`` uses every sample for both (the transductive protocol of the paper); the
    target accuracy is then measured on the private records themselves, an un-noised release that
    the guarantee does not cover: refused unless ``allow_transductive_eval=True``.
    """
    if test_fraction == 0 and not allow_transductive_eval:
        raise ValueError(f"dataset.test_fraction=0 evaluates {benchmark}/{domain} on the private training records "
                         "(transductive protocol): the accuracy is then not covered by epsilon. Use "
                         "dataset.test_fraction=0.2, or accept it with dataset.allow_transductive_eval=true (the "
                         "number is labelled in results.json)")
    x, y = read_feature_file(feature_file(root, benchmark, domain))
    if int(y.max()) >= num_classes:
        raise ValueError(f"{benchmark}/{domain}: label {int(y.max())} >= dataset.num_classes={num_classes}")
    if test_fraction == 0:
        warnings.warn(f"dataset test_fraction=0: the target accuracy of {benchmark}/{domain} is measured on the "
                      "private training records (transductive protocol); it is not covered by the DP guarantee",
                      stacklevel=2)
        return Domain(domain, TensorSplit(x, y), TensorSplit(x, y), num_classes)
    if not 0 < test_fraction < 1:
        raise ValueError(f"dataset.test_fraction must be in [0, 1), got {test_fraction}")
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(y))
    counts = np.bincount(y.numpy())
    strat = y.numpy() if counts[counts > 0].min() >= 2 and len(y) * test_fraction >= (counts > 0).sum() else None
    tr, te = train_test_split(idx, test_size=test_fraction, random_state=split_seed, stratify=strat)
    tr, te = torch.from_numpy(np.sort(tr)), torch.from_numpy(np.sort(te))
    return Domain(domain, TensorSplit(x[tr], y[tr]), TensorSplit(x[te], y[te]), num_classes)


def feature_pair(root: str, benchmark: str, source: str, target: str, num_classes: int, test_fraction: float = 0.2,
                 split_seed: int = 0, allow_transductive_eval: bool = False) -> DomainSplits:
    """Source/target pair of feature domains by name (e.g. office31: amazon, dslr, webcam;
    visda: train (synthetic) -> validation (real))."""
    if source == target:
        raise ValueError(f"dataset.source and dataset.target are both '{source}'; choose two different domains")
    s = feature_domain(root, benchmark, source, num_classes, test_fraction, split_seed, allow_transductive_eval)
    t = feature_domain(root, benchmark, target, num_classes, test_fraction, split_seed, allow_transductive_eval)
    pair = domain_pair(s, t, name=f"{benchmark}:{source}->{target}")
    pair.transductive_eval = test_fraction == 0
    return pair
