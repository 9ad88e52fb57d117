"""Fake datasets written in the exact on-disk layouts dpgen's loaders read, at test time.

One writer per layout; :func:`make` writes every one of them under a root folder, which a test then
passes as ``paths.data_root`` (or ``DPGEN_DATA_ROOT``).  The images are smooth class-dependent
patterns (a learnable signal, and JPEGs of about 1 KB); sizes are the smallest with which every
preset can split its data and evaluate (a domain-FID extractor needs at least 20 test images).

    ==========  =====================================================================  ====================
    layout      files (relative to the data root)                                      loader
    ==========  =====================================================================  ====================
    celeba      celeba/img_align_celeba/NNNNNN.jpg (178x218 RGB),                      dpgen.data.vision.celeba
                celeba/list_eval_partition.txt, celeba/list_attr_celeba.txt            (image_size 64 or 32)
    cifar10     cifar-10-batches-py/data_batch_1..5, test_batch (python pickles)       dpgen.data.vision.cifar10
    svhn        svhn/train_32x32.mat, svhn/test_32x32.mat (X: 32x32x3xN, y: Nx1)       dpgen.data.vision.svhn
    office31    office31/{amazon,dslr,webcam}.npz (features (n, 2048), labels (n,))    dpgen.data.domain.feature_pair
    visda       visda/{train,validation}.npz                                           dpgen.data.domain.feature_pair
    usps        usps.bz2, usps.t.bz2 (LIBSVM lines "label idx:value ...", torchvision)  dpgen.data.datasets.usps
    own images  <folder>/<class>/NNN.png (:func:`png_folder`, written where a test asks)    dpgen.data.own.image_folder
    ==========  =====================================================================  ====================

MNIST, Fashion-MNIST and the USPS HDF5 file are real files (``$DPGEN_DATA_ROOT``): :func:`link_real`
links them into a fake root so that one root serves every preset.
"""

from __future__ import annotations

import bz2
import pickle
from pathlib import Path

import numpy as np

CELEBA_ATTRS = (
    "5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose "
    "Black_Hair Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee "
    "Gray_Hair Heavy_Makeup High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard "
    "Oval_Face Pale_Skin Pointy_Nose Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair "
    "Wavy_Hair Wearing_Earrings Wearing_Hat Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young"
).split()
CELEBA_SIZE = (178, 218)  # (W, H) of img_align_celeba
FEATURE_DIM = 2048  # ResNet-50 pooled features
BENCHMARKS = {"office31": (("amazon", "dslr", "webcam"), 31), "visda": (("train", "validation"), 12)}

# default sizes: every preset splits (public fractions up to 0.5, test splits >= 20 for the domain FID)
SIZES = {"celeba": (60, 24), "cifar10": (50, 24), "svhn": (48, 24), "office31": 62, "visda": 48, "usps": (40, 24)}


def pattern(label: int, num_classes: int, h: int, w: int, channels: int, rng: np.random.Generator) -> np.ndarray:
    """A smooth ``(h, w, channels)`` uint8 image whose stripe frequency and tint depend on ``label``."""
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    phase = rng.uniform(0, 2 * np.pi)
    freq = 1.5 + 3.0 * label / max(num_classes - 1, 1)
    base = 0.5 + 0.4 * np.sin(2 * np.pi * freq * (xx + 0.5 * yy) + phase)
    tint = 0.6 + 0.4 * np.cos(np.arange(channels) + label)
    img = base[..., None] * tint[None, None, :] + rng.normal(0, 0.01, size=(h, w, channels))
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


def _labels(n: int, num_classes: int) -> np.ndarray:
    return np.arange(n) % num_classes


# ---------------------------------------------------------------------------------------- CelebA
def celeba(root: str | Path, n_train: int = SIZES["celeba"][0], n_test: int = SIZES["celeba"][1],
           n_valid: int = 2, seed: int = 0) -> Path:
    """``<root>/celeba``: JPEGs in file order train, valid, test; the partition file (0 / 1 / 2) and the
    40-attribute file (``Male`` alternates, ``Smiling`` every third image)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    base = Path(root) / "celeba"
    (base / "img_align_celeba").mkdir(parents=True, exist_ok=True)
    parts = [0] * n_train + [1] * n_valid + [2] * n_test
    names = [f"{i + 1:06d}.jpg" for i in range(len(parts))]
    male = _labels(len(parts), 2)
    w, h = CELEBA_SIZE
    for name, y in zip(names, male, strict=True):
        Image.fromarray(pattern(int(y), 2, h, w, 3, rng)).save(base / "img_align_celeba" / name, quality=60)
    (base / "list_eval_partition.txt").write_text("".join(f"{f} {p}\n" for f, p in zip(names, parts, strict=True)))
    rows = [f"{len(names)}\n", " ".join(CELEBA_ATTRS) + " \n"]  # the real header ends with a space
    for i, (f, y) in enumerate(zip(names, male, strict=True)):
        vals = [-1] * len(CELEBA_ATTRS)
        vals[CELEBA_ATTRS.index("Male")] = 1 if y else -1
        vals[CELEBA_ATTRS.index("Smiling")] = 1 if i % 3 == 0 else -1
        rows.append(f + " " + " ".join(f"{v:2d}" for v in vals) + "\n")  # "-1  1 -1 ..." as the real file
    (base / "list_attr_celeba.txt").write_text("".join(rows))
    return base


# -------------------------------------------------------------------------------------- CIFAR-10
def _cifar_batch(path: Path, n: int, offset: int, rng: np.random.Generator) -> None:
    y = _labels(n + offset, 10)[offset:]
    x = np.stack([pattern(int(c), 10, 32, 32, 3, rng).transpose(2, 0, 1).reshape(-1) for c in y])  # R, G, B planes
    d = {b"batch_label": b"fake batch", b"labels": [int(c) for c in y], b"data": x,
         b"filenames": [f"fake_{offset + k}.png".encode() for k in range(n)]}
    with open(path, "wb") as fh:
        pickle.dump(d, fh, protocol=2)  # CIFAR's batches are Python 2 pickles: bytes keys


def cifar10(root: str | Path, n_train: int = SIZES["cifar10"][0], n_test: int = SIZES["cifar10"][1],
            seed: int = 0) -> Path:
    """``<root>/cifar-10-batches-py``: five training batches of ``n_train // 5`` images and ``test_batch``."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "cifar-10-batches-py"
    base.mkdir(parents=True, exist_ok=True)
    per = n_train // 5
    for i in range(5):
        _cifar_batch(base / f"data_batch_{i + 1}", per, i * per, rng)
    _cifar_batch(base / "test_batch", n_test, 0, rng)
    return base


# ------------------------------------------------------------------------------------------ SVHN
def _svhn_mat(path: Path, n: int, rng: np.random.Generator) -> None:
    import scipy.io as sio

    digits = _labels(n, 10)
    x = np.stack([pattern(int(c), 10, 32, 32, 3, rng) for c in digits], axis=-1)  # (H, W, C, N)
    y = np.where(digits == 0, 10, digits).astype(np.uint8).reshape(-1, 1)  # digit 0 is stored as 10
    sio.savemat(path, {"X": x, "y": y})


def svhn(root: str | Path, n_train: int = SIZES["svhn"][0], n_test: int = SIZES["svhn"][1], seed: int = 0) -> Path:
    """``<root>/svhn/{train,test}_32x32.mat`` (the ``extra`` split is not read by dpgen)."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "svhn"
    base.mkdir(parents=True, exist_ok=True)
    _svhn_mat(base / "train_32x32.mat", n_train, rng)
    _svhn_mat(base / "test_32x32.mat", n_test, rng)
    return base


# ------------------------------------------------------------------------ Office-31 / VisDA features
def features(root: str | Path, benchmark: str, n: int | None = None, dim: int = FEATURE_DIM, seed: int = 0) -> Path:
    """``<root>/<benchmark>/<domain>.npz`` for every domain of ``benchmark`` (office31 | visda): ``features``
    (n, dim) float32, non-negative like pooled ReLU features, class-dependent mean; ``labels`` (n,)."""
    domains, num_classes = BENCHMARKS[benchmark]
    n = SIZES[benchmark] if n is None else n
    rng = np.random.default_rng(seed)
    base = Path(root) / benchmark
    base.mkdir(parents=True, exist_ok=True)
    centres = rng.gamma(1.0, 0.5, size=(num_classes, dim)).astype(np.float32)
    for shift, domain in enumerate(domains):
        y = _labels(n, num_classes)
        x = centres[y] + 0.1 * shift + rng.gamma(1.0, 0.2, size=(n, dim)).astype(np.float32)
        np.savez(base / f"{domain}.npz", features=x.astype(np.float32), labels=y.astype(np.int64))
    return base


# ------------------------------------------------------------------------------------------ USPS
def _usps_file(path: Path, n: int, rng: np.random.Generator) -> None:
    lines = []
    for d in _labels(n, 10):
        img = pattern(int(d), 10, 16, 16, 1, rng).reshape(-1) / 127.5 - 1.0  # LIBSVM USPS values in [-1, 1]
        lines.append(f"{d + 1} " + " ".join(f"{j + 1}:{v:.6f}" for j, v in enumerate(img)) + "\n")  # label = digit + 1
    with bz2.open(path, "wt") as fh:
        fh.write("".join(lines))


def usps(root: str | Path, n_train: int = SIZES["usps"][0], n_test: int = SIZES["usps"][1], seed: int = 0) -> Path:
    """``<root>/usps.bz2`` and ``<root>/usps.t.bz2`` in torchvision's LIBSVM form."""
    rng = np.random.default_rng(seed)
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    _usps_file(base / "usps.bz2", n_train, rng)
    _usps_file(base / "usps.t.bz2", n_test, rng)
    return base


LAYOUTS = {"celeba": celeba, "cifar10": cifar10, "svhn": svhn, "office31": lambda root: features(root, "office31"),
           "visda": lambda root: features(root, "visda"), "usps": usps}


def make(root: str | Path, layouts: tuple[str, ...] = tuple(LAYOUTS)) -> Path:
    """Write every fake layout (or the named ones) under ``root``; returns ``root``."""
    root = Path(root)
    for name in layouts:
        LAYOUTS[name](root)
    return root


def png_folder(root: Path, n_per_class: int = 4, size: int = 8, mode: str = "L", classes=("0", "1", "2"),
               seed: int = 0) -> Path:
    """``root/<class>/<i>.png``: random 8-bit images, brighter for higher classes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n_per_class):
            shape = (size, size) if mode == "L" else (size, size, len(mode))
            a = rng.integers(0, 128, shape) + 60 * k
            Image.fromarray(a.astype(np.uint8), mode).save(root / name / f"{i:03d}.png")
    return root


REAL = ("MNIST", "FashionMNIST", "USPS")  # real files, linked from the shared data root


def link_real(root: str | Path, real_root: str | Path) -> list[str]:
    """Symlink the real MNIST-family folders of ``real_root`` into ``root``; returns the names linked."""
    linked = []
    for name in REAL:
        src = Path(real_root) / name
        if src.is_dir() and not (Path(root) / name).exists():
            (Path(root) / name).symlink_to(src.resolve(), target_is_directory=True)
            linked.append(name)
    return linked


if __name__ == "__main__":  # python -m tests.helpers.fakedata OUT [LAYOUT ...]: fake layouts under OUT, to try a preset by hand
    import sys

    out = make(sys.argv[1] if len(sys.argv) > 1 else "fake-data", tuple(sys.argv[2:]) or tuple(LAYOUTS))
    print(f"fake datasets ({', '.join(sys.argv[2:]) or 'all'}) written under {out}")
