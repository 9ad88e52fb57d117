"""Dataset builders (Hydra targets).  Each returns a :class:`DataSplits`.

Images are scaled to [0, 1].  ``root`` is the data root (``paths.data_root``); with
``download=true`` torchvision fetches missing files (needs internet), otherwise a missing file
raises :class:`DatasetNotFoundError` listing the exact expected paths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from .base import DataSplits, make_splits, require_files
from .integrity import read_mnist_like, reading

_MNIST_FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def digits(root: str | None = None, public_fraction: float = 0.0, seed: int = 0,
           test_fraction: float = 0.25, validation_size: int | None = None, **_: object) -> DataSplits:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images; no download).

    Deterministic stratified train/test split (``random_state=0``); pixel values /16 -> [0, 1].
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    ds = load_digits()
    x = ds.images.astype(np.float32) / 16.0
    y = ds.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_fraction, random_state=0, stratify=y)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return make_splits("digits", t(x_tr)[:, None], t(y_tr), t(x_te)[:, None], t(y_te), public_fraction, seed, 10,
                   validation_size=validation_size)


def _torchvision_mnist_like(cls_name: str, folder: str, name: str, root: str, download: bool,
                            public_fraction: float, seed: int, validation_size: int | None = None) -> DataSplits:
    root = str(root)
    if not download:
        require_files(name, root, [Path(root) / folder / "raw" / f for f in _MNIST_FILES])
    tr, te = read_mnist_like(cls_name, folder, name, root, download)  # a damaged file: named, with the fix
    f = lambda d: d.data.float().div(255.0)[:, None]  # noqa: E731
    return make_splits(name, f(tr), tr.targets.long(), f(te), te.targets.long(), public_fraction, seed, 10,
                   validation_size=validation_size)


def mnist(root: str, download: bool = False, public_fraction: float = 0.0, seed: int = 0,
          validation_size: int | None = None, **_: object) -> DataSplits:
    """MNIST 28x28 (torchvision layout ``<root>/MNIST/raw/``)."""
    return _torchvision_mnist_like("MNIST", "MNIST", "mnist", root, download, public_fraction, seed, validation_size)


def fashion_mnist(root: str, download: bool = False, public_fraction: float = 0.0, seed: int = 0,
                  validation_size: int | None = None, **_: object) -> DataSplits:
    """Fashion-MNIST 28x28 (torchvision layout ``<root>/FashionMNIST/raw/``)."""
    return _torchvision_mnist_like("FashionMNIST", "FashionMNIST", "fashion_mnist", root, download,
                                   public_fraction, seed, validation_size)


def usps(root: str, download: bool = False, public_fraction: float = 0.0, seed: int = 0,
         image_size: int = 16, **_: object) -> DataSplits:
    """USPS 16x16 digits.

    Uses torchvision's LIBSVM form (``<root>/usps.bz2`` and ``<root>/usps.t.bz2``, values in
    [-1, 1] rescaled to [0, 1]) when both files are present (or ``download=true``), otherwise the
    HDF5 form ``<root>/USPS/usps.h5`` (groups ``train``/``test`` with ``data`` N x 256 in [0, 1]
    and ``target``).  The two forms are never mixed (their preprocessing differs).
    ``image_size=28`` resizes bilinearly for MNIST<->USPS experiments.
    """
    rootp = Path(root)
    bz = [rootp / "usps.bz2", rootp / "usps.t.bz2"]
    h5 = rootp / "USPS" / "usps.h5"
    if download or all(p.exists() for p in bz):
        import torchvision

        with reading(bz, "usps"):
            tr = torchvision.datasets.USPS(root=str(root), train=True, download=download)
        with reading(bz[1:], "usps"):
            te = torchvision.datasets.USPS(root=str(root), train=False, download=download)
        f = lambda d: torch.from_numpy(np.asarray(d.data)).float().div(255.0)[:, None]  # noqa: E731
        x_tr, y_tr, x_te, y_te = f(tr), torch.as_tensor(tr.targets), f(te), torch.as_tensor(te.targets)
    elif h5.exists():
        import h5py

        with reading([h5], "usps"), h5py.File(h5, "r") as fh:
            g = lambda s, k: torch.from_numpy(np.asarray(fh[s][k][:]))  # noqa: E731
            x_tr = g("train", "data").float().reshape(-1, 1, 16, 16)
            y_tr = g("train", "target").long()
            x_te = g("test", "data").float().reshape(-1, 1, 16, 16)
            y_te = g("test", "target").long()
    else:
        require_files("usps", root, bz + [h5])  # raises, listing both accepted forms
        raise AssertionError  # unreachable
    if image_size != 16:
        rs = lambda x: torch.nn.functional.interpolate(x, size=(image_size, image_size), mode="bilinear",  # noqa: E731
                                                       align_corners=False).clamp(0, 1)
        x_tr, x_te = rs(x_tr), rs(x_te)
    return make_splits("usps", x_tr, y_tr.long(), x_te, y_te.long(), public_fraction, seed, 10)


def toy_gaussians(n_train: int = 2000, n_test: int = 1000, dim: int = 5, shift: float = 1.0,
                  num_classes: int = 2, public_fraction: float = 0.0, seed: int = 0, **_: object) -> DataSplits:
    """Fig. 2 toy: class c ~ N(c * shift * 1, I_dim); stored as (n, 1, 1, dim) "images".

    Values are not in [0, 1] (``value_range`` records the empirical range).
    """
    g = torch.Generator().manual_seed(10_000 + seed)

    def draw(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(num_classes, (n,), generator=g)
        x = torch.randn(n, dim, generator=g) + shift * y[:, None].float()
        return x[:, None, None, :], y

    x_tr, y_tr = draw(n_train)
    x_te, y_te = draw(n_test)
    ds = make_splits("toy_gaussians", x_tr, y_tr, x_te, y_te, public_fraction, seed, num_classes)
    ds.value_range = (float(x_te.min()), float(x_te.max()))
    return ds
