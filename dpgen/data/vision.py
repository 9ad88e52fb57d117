"""Natural-image dataset builders (Hydra targets): CelebA, CIFAR-10, SVHN.

Each reads torchvision's on-disk layout with its own parser (torchvision's dataset classes
are used only to *fetch* files when ``download=true``; their md5 checks would reject small
test fixtures).  Images are float32 ``(n, 3, H, W)`` in [0, 1]; labels long ``(n,)``.
A missing file raises :class:`DatasetNotFoundError` listing the exact expected paths before
anything is read; a file that cannot be read (truncated, garbled) is named in one error line, by its
published MD5 where torchvision keeps one (``data.integrity``).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from .base import DataSplits, make_splits, require_files
from .integrity import reading

_CELEBA_TRAIN, _CELEBA_VALID, _CELEBA_TEST = 0, 1, 2


# --------------------------------------------------------------------------------------- CelebA
def _celeba_paths(root: str | Path) -> tuple[Path, Path, Path]:
    base = Path(root) / "celeba"
    return base / "img_align_celeba", base / "list_eval_partition.txt", base / "list_attr_celeba.txt"


def _read_celeba_partition(path: Path) -> dict[str, int]:
    """``list_eval_partition.txt``: lines ``000001.jpg 0`` (0=train, 1=valid, 2=test)."""
    out: dict[str, int] = {}
    with open(path) as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 2:
                out[parts[0]] = int(parts[1])
    return out


def _read_celeba_attr(path: Path, label: str) -> dict[str, int]:
    """``list_attr_celeba.txt``: count, 40 attribute names, then ``000001.jpg -1 1 ...``.

    Returns ``{filename: 0/1}`` for attribute ``label`` (-1 -> 0, 1 -> 1).
    """
    with open(path) as fh:
        fh.readline()  # image count
        names = fh.readline().split()
        if label not in names:
            raise ConfigError(f"dataset.label={label!r} is not a CelebA attribute of {path.name}; choose one of "
                              f"{', '.join(names)}")
        col = names.index(label)
        out: dict[str, int] = {}
        for line in fh:
            parts = line.split()
            if len(parts) < len(names) + 1:
                continue
            out[parts[0]] = 1 if int(parts[1 + col]) > 0 else 0
    return out


def _load_celeba_images(img_dir: Path, files: list[str], image_size: int) -> torch.Tensor:
    """PIL -> RGB -> Resize(image_size) -> CenterCrop(image_size) -> ToTensor (DSW / DP-SWD)."""
    from PIL import Image
    from rich.progress import track
    from torchvision import transforms

    tf = transforms.Compose([transforms.Resize(image_size), transforms.CenterCrop(image_size),
                             transforms.ToTensor()])
    x = torch.empty((len(files), 3, image_size, image_size), dtype=torch.float32)  # no 2x peak
    for i, f in enumerate(track(files, description="CelebA images", total=len(files), transient=True)):
        with reading([img_dir / f], "celeba"), Image.open(img_dir / f) as im:
            x[i] = tf(im.convert("RGB"))
    return x


def celeba(root: str, download: bool = False, image_size: int = 64, public_fraction: float = 0.0,
           seed: int = 0, max_train: int | None = None, max_test: int | None = None,
           label: str = "Male", **_: object) -> DataSplits:
    """CelebA aligned faces (torchvision layout ``<root>/celeba/``), binary label ``label``.

    Train = partition 0, test = partition 2 (``list_eval_partition.txt``); the validation
    partition is unused.  Label = attribute ``label`` (default ``Male``) mapped -1 -> 0, 1 -> 1.
    ``max_train`` / ``max_test`` keep only the first N images of each split (in file order).
    """
    if image_size <= 0:
        raise ValueError(f"dataset.image_size must be positive, got {image_size}")
    img_dir, part_file, attr_file = _celeba_paths(root)
    if download:
        import torchvision

        torchvision.datasets.CelebA(str(root), split="all", target_type="attr", download=True)
    require_files("celeba", root, [img_dir, part_file, attr_file])

    with reading([part_file], "celeba"):
        partition = _read_celeba_partition(part_file)
    with reading([attr_file], "celeba"):
        attrs = _read_celeba_attr(attr_file, label)
    train = [f for f, p in partition.items() if p == _CELEBA_TRAIN]
    test = [f for f, p in partition.items() if p == _CELEBA_TEST]
    if max_train is not None:
        train = train[: int(max_train)]
    if max_test is not None:
        test = test[: int(max_test)]
    missing_attr = [f for f in train + test if f not in attrs]
    if missing_attr:
        raise ValueError(f"{attr_file} has no row for {len(missing_attr)} image(s), e.g. {missing_attr[:3]}")
    # every image that will be read must exist before any reading starts (list the first few)
    missing_img = [img_dir / f for f in train + test if not (img_dir / f).exists()]
    require_files("celeba", root, missing_img[:10])

    y_tr = torch.tensor([attrs[f] for f in train], dtype=torch.long)
    y_te = torch.tensor([attrs[f] for f in test], dtype=torch.long)
    x = _load_celeba_images(img_dir, train + test, image_size)  # one progress bar for both splits
    x_tr, x_te = x[: len(train)], x[len(train):]
    return make_splits("celeba", x_tr, y_tr, x_te, y_te, public_fraction, seed, 2)


# ------------------------------------------------------------------------------------- CIFAR-10
_CIFAR10_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
_CIFAR10_TEST = ["test_batch"]


def _cifar_key(d: dict, key: str):
    """Batches pickled under Python 2 load with ``bytes`` keys; accept ``str`` keys too."""
    return d[key.encode()] if key.encode() in d else d[key]


def _read_cifar_batches(paths: list[Path]) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for p in paths:
        with reading([p], "cifar10"), open(p, "rb") as fh:
            d = pickle.load(fh, encoding="bytes")
            xs.append(np.asarray(_cifar_key(d, "data"), dtype=np.uint8).reshape(-1, 3, 32, 32))
            ys.append(np.asarray(_cifar_key(d, "labels"), dtype=np.int64).reshape(-1))
    x = torch.from_numpy(np.concatenate(xs)).float().div(255.0)
    y = torch.from_numpy(np.concatenate(ys)).long()
    return x, y


def cifar10(root: str, download: bool = False, public_fraction: float = 0.0, seed: int = 0,
            **_: object) -> DataSplits:
    """CIFAR-10 3x32x32, 10 classes (python pickle batches in ``<root>/cifar-10-batches-py/``)."""
    base = Path(root) / "cifar-10-batches-py"
    if download:
        import torchvision

        torchvision.datasets.CIFAR10(str(root), train=True, download=True)
    train = [base / f for f in _CIFAR10_TRAIN]
    test = [base / f for f in _CIFAR10_TEST]
    require_files("cifar10", root, train + test)
    x_tr, y_tr = _read_cifar_batches(train)
    x_te, y_te = _read_cifar_batches(test)
    return make_splits("cifar10", x_tr, y_tr, x_te, y_te, public_fraction, seed, 10)


# ----------------------------------------------------------------------------------------- SVHN
def _read_svhn_mat(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``X``: 32x32x3xN uint8 (H, W, C, N); ``y``: Nx1 with 10 meaning digit 0."""
    import scipy.io as sio

    m = sio.loadmat(str(path))
    x = np.ascontiguousarray(np.transpose(np.asarray(m["X"], dtype=np.uint8), (3, 2, 0, 1)))
    y = np.asarray(m["y"], dtype=np.int64).reshape(-1)
    y = np.where(y == 10, 0, y)
    return torch.from_numpy(x).float().div(255.0), torch.from_numpy(y).long()


def svhn(root: str, download: bool = False, public_fraction: float = 0.0, seed: int = 0,
         **_: object) -> DataSplits:
    """SVHN cropped digits 3x32x32, 10 classes (``<root>/svhn/{train,test}_32x32.mat``).

    The ``extra`` split is not used.  Label 10 (digit 0) is mapped to 0, as torchvision does.
    """
    base = Path(root) / "svhn"
    if download:
        import torchvision

        for split in ("train", "test"):
            torchvision.datasets.SVHN(root=str(base), split=split, download=True)
    train, test = base / "train_32x32.mat", base / "test_32x32.mat"
    require_files("svhn", root, [train, test])
    with reading([train], "svhn"):
        x_tr, y_tr = _read_svhn_mat(train)
    with reading([test], "svhn"):
        x_te, y_te = _read_svhn_mat(test)
    return make_splits("svhn", x_tr, y_tr, x_te, y_te, public_fraction, seed, 10)
