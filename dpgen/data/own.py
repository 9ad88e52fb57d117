"""Your own data (Hydra targets): an image folder or arrays, checked against DECLARED public facts.

``configs/dataset/image_folder.yaml`` -> :func:`image_folder` (torchvision ImageFolder layout:
``<path>/<class>/<image>``); ``configs/dataset/arrays.yaml`` -> :func:`arrays` (a ``.npz`` holding ``x`` and
``y``, or a folder holding ``x.npy`` and ``y.npy``).

The user declares the public facts: image size, channels, the range of the stored pixel values and the
classes.  Every record is checked against them before training; a record that does not fit is a
:class:`~dpgen.errors.ConfigError` naming the file (and the record's index for arrays) -- never a bound
derived from the private data, which would leak it.  Pixels are then mapped linearly from the declared
range to [0, 1] (a fixed per-record transform, like the built-in datasets' ``/255``).

Splits, as the built-in datasets do: the training records (``path``) are PRIVATE; ``public_fraction``
of them may be split off as public data (then not protected); the test records (``test_path``, or a
``test_fraction`` of ``path`` held out with a fixed seed) are PUBLIC: the evaluator scores synthetic data
on them and reports the scores without noise, so they are not covered by the privacy guarantee.

The evaluation is sized to the data (:func:`evaluation_size`) from PUBLIC numbers only: a declared
``declared_size``, else the test split's size.  The number of private training records is private under
the add/remove relation, so it never sizes anything the run publishes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from ..errors import ConfigError
from .base import DataSplits, make_splits

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm", ".ppm")
_GREY_MODES = {"L", "I", "I;16", "F", "1"}
_TEST_SEED = 0  # the test hold-out is fixed (public) whatever the run's seed, as the digits builder does


# ------------------------------------------------------------------------------- declared facts
def declared_shape(image_size, channels) -> tuple[int, int, int]:
    """``(C, H, W)`` from ``dataset.image_size`` (one int, or ``[H, W]``) and ``dataset.channels`` (1 or 3)."""
    size = [image_size] if isinstance(image_size, int) else list(image_size)
    if len(size) == 1:
        size = size * 2
    if len(size) != 2 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ConfigError(f"dataset.image_size must be a positive int or [H, W], got {image_size}; e.g. "
                          "dataset.image_size=28")
    if channels not in (1, 3):
        raise ConfigError(f"dataset.channels must be 1 (grey) or 3 (RGB), got {channels}")
    return int(channels), int(size[0]), int(size[1])


def declared_range(pixel_range) -> tuple[float, float]:
    """``(lo, hi)`` from ``dataset.pixel_range``, the declared range of the STORED values (e.g. [0, 255])."""
    try:
        lo, hi = (float(v) for v in pixel_range)
    except (TypeError, ValueError):
        raise ConfigError(f"dataset.pixel_range must be [low, high], got {pixel_range}; e.g. "
                          "dataset.pixel_range=[0,255]") from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ConfigError(f"dataset.pixel_range must be [low, high] with low < high, got {pixel_range}")
    return lo, hi


def declared_classes(classes) -> list[str]:
    """Class names from ``dataset.classes``: a list of names, or their number K (names "0" ... "K-1")."""
    if isinstance(classes, int) and not isinstance(classes, bool):
        names = [str(c) for c in range(classes)]
    elif isinstance(classes, Sequence) and not isinstance(classes, str):
        names = [str(c) for c in classes]
    else:
        names = []
    if len(names) < 2 or len(set(names)) != len(names):
        raise ConfigError(f"dataset.classes must be the number of classes (>= 2) or a list of distinct names, got "
                          f"{classes}; e.g. dataset.classes=10 or dataset.classes=[cat,dog]")
    return names


def check_test_choice(test_path, test_fraction) -> float:
    """Exactly one source of (public) test data: a ``test_path`` or a ``test_fraction`` of ``path``."""
    frac = 0.0 if test_fraction is None else float(test_fraction)
    if test_path is not None and frac > 0:
        raise ConfigError("set either dataset.test_path or dataset.test_fraction, not both")
    if test_path is None and not 0.0 < frac < 1.0:
        raise ConfigError("no test data: set dataset.test_path=<your test images> (treated as PUBLIC), or "
                          "dataset.test_fraction=0.2 to hold out part of dataset.path as PUBLIC test data "
                          "(those images are then not protected)")
    return frac


def evaluation_size(declared_size, n_test: int, test_fraction: float) -> tuple[int, str]:
    """The PUBLIC size the evaluation of your own data is sized to, and where it comes from.

    Never the number of private training records (private under add/remove): ``dataset.declared_size``, a size
    you state and publish, if set; else, with ``dataset.test_fraction`` f, the test split's size scaled by
    (1 - f) / f (the held-out test split already tells the number of images to within about 1 / f, the card says
    so: this adds nothing to it); else the size of the test split itself (``dataset.test_path``)."""
    if declared_size is not None:
        if isinstance(declared_size, bool) or not isinstance(declared_size, int) or declared_size < 1:
            raise ConfigError(f"dataset.declared_size must be a positive whole number (a size you may publish) or "
                              f"null, got {declared_size}")
        return int(declared_size), f"dataset.declared_size={declared_size}"
    if test_fraction > 0:
        return (max(1, int(round(n_test * (1 - test_fraction) / test_fraction))),
                f"the test split's {n_test} images held out as dataset.test_fraction={test_fraction:g}")
    return int(n_test), f"the test split's {n_test} images"


def must_exist(paths: list[Path], setting: str) -> None:
    """A missing file or folder of the user's own data is a one-line error naming it (no data root involved)."""
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise ConfigError(f"{setting}: {', '.join(missing)} does not exist; check the path (relative paths start "
                          "from the folder you run in)")


def to_unit(x: np.ndarray, lo: float, hi: float) -> torch.Tensor:
    """Map stored values from the declared ``[lo, hi]`` to float32 [0, 1]."""
    return torch.from_numpy(((np.asarray(x, dtype=np.float64) - lo) / (hi - lo)).astype(np.float32))


# ---------------------------------------------------------------------------------- image folder
def _class_folders(root: Path, names: list[str], setting: str) -> list[Path]:
    """The declared class folders of ``root`` (each must exist; any other sub-folder is an error)."""
    if not root.is_dir():
        raise ConfigError(f"{setting}: {root} is not a folder; give a folder with one sub-folder per class "
                          f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})")
    extra = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in names)
    if extra:
        raise ConfigError(f"{setting}: {root} has class folder(s) {extra[:5]} that are not declared in "
                          f"dataset.classes={names}; declare every class (dataset.classes=[...]) or move them out")
    missing = [n for n in names if not (root / n).is_dir()]
    if missing:
        raise ConfigError(f"{setting}: {root} has no folder for the declared class(es) {missing[:5]}; create "
                          "them, or declare only the classes you have (dataset.classes=[...])")
    return [root / n for n in names]


def _image_files(folder: Path, setting: str) -> list[Path]:
    """The image files of one class folder (hidden files such as .DS_Store are skipped); any other file is
    an error: silently skipping it could drop records the user meant to protect or to train on."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not any(part.startswith(".")
                                                                        for part in p.relative_to(folder).parts))
    other = [p for p in files if p.suffix.lower() not in IMAGE_SUFFIXES]
    if other:
        raise ConfigError(f"{setting}: {other[0]} is not an image file (dpgen reads {', '.join(IMAGE_SUFFIXES)}); "
                          "move it out of the class folders")
    if not files:
        raise ConfigError(f"{setting}: the class folder {folder} holds no images; a declared class without images "
                          "cannot be trained or tested (it would be sampled as noise); add its images, or leave the "
                          "class out of dataset.classes")
    return files


def read_image(path: Path, shape: tuple[int, int, int], pixel_range: tuple[float, float], resize: bool) -> np.ndarray:
    """One image as ``(C, H, W)`` stored values, checked against the declared shape and range."""
    from PIL import Image, UnidentifiedImageError

    c, h, w = shape
    try:
        with Image.open(path) as im:
            im.load()
    except (OSError, UnidentifiedImageError) as e:
        raise ConfigError(f"{path}: cannot be read as an image ({e}); remove or replace the file") from None
    if im.mode == "P":  # palette indices are not pixel values
        im = im.convert("L" if c == 1 else "RGB")
    if im.mode == "1":
        im = im.convert("L")
    if im.mode in ("LA", "PA", "RGBA", "RGBa", "La"):
        raise ConfigError(f"{path}: has an alpha channel ({im.mode}); save it as "
                          f"{'greyscale' if c == 1 else 'RGB'} without transparency")
    stored = 1 if im.mode in _GREY_MODES else 3 if im.mode == "RGB" else None
    if stored != c:
        raise ConfigError(f"{path}: image mode {im.mode} ({stored or '?'} channel(s)) but dataset.channels={c}; "
                          f"convert the image or declare dataset.channels={stored or 'its channel count'}")
    if im.size != (w, h):
        if not resize:
            raise ConfigError(f"{path}: is {im.size[1]}x{im.size[0]} but the declared dataset.image_size is {h}x{w}; "
                              "resize your images, declare their size, or set dataset.resize=true")
        im = (im.convert("F") if im.mode.startswith("I") else im).resize((w, h), Image.BILINEAR)
    a = np.asarray(im, dtype=np.float64)
    a = a[None] if a.ndim == 2 else np.transpose(a, (2, 0, 1))
    lo, hi = pixel_range
    if not np.isfinite(a).all():
        raise ConfigError(f"{path}: holds a NaN or an infinite pixel value; fix or remove the image")
    if a.min() < lo or a.max() > hi:
        raise ConfigError(f"{path}: has pixel values outside the declared dataset.pixel_range=[{lo:g}, {hi:g}]; "
                          "fix the image or declare the range your format stores (8-bit images: [0, 255])")
    return a


def read_image_folder(root: Path, names: list[str], shape: tuple[int, int, int], pixel_range: tuple[float, float],
                      resize: bool, setting: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image of the declared class folders: ``x (n, C, H, W)`` in [0, 1], ``y (n,)``."""
    files, labels = [], []
    for k, folder in enumerate(_class_folders(root, names, setting)):
        found = _image_files(folder, setting)
        files += found
        labels += [k] * len(found)
    x = torch.empty((len(files), *shape), dtype=torch.float32)
    for i, f in enumerate(files):
        x[i] = to_unit(read_image(f, shape, pixel_range, resize), *pixel_range)
    return x, torch.tensor(labels, dtype=torch.long)


def image_folder(path: str, image_size, channels: int, classes, pixel_range=(0, 255), test_path: str | None = None,
                 test_fraction: float | None = None, resize: bool = False, public_fraction: float = 0.0,
                 seed: int = 0, declared_size: int | None = None, **_: object) -> DataSplits:
    """Images in class folders (``<path>/<class>/*.png``), checked against the declared facts (module docstring).

    ``resize=true`` resizes every image to the declared size (bilinear; a fixed per-record transform) instead
    of refusing one of another size.
    """
    shape, rng, names = declared_shape(image_size, channels), declared_range(pixel_range), declared_classes(classes)
    frac = check_test_choice(test_path, test_fraction)
    evaluation_size(declared_size, 1, frac)  # a bad declared_size fails before any image is read
    must_exist([Path(path)], "dataset.path")
    if test_path is not None:
        must_exist([Path(test_path)], "dataset.test_path")
    x, y = read_image_folder(Path(path), names, shape, rng, resize, "dataset.path")
    if test_path is not None:
        x_te, y_te = read_image_folder(Path(test_path), names, shape, rng, resize, "dataset.test_path")
    else:
        (x, y), (x_te, y_te) = hold_out(x, y, frac)
    return make_splits("image_folder", x, y, x_te, y_te, public_fraction, seed, len(names),
                       eval_size=evaluation_size(declared_size, len(y_te), frac))


# ----------------------------------------------------------------------------------------- arrays
def load_arrays(path: Path, setting: str) -> tuple[np.ndarray, np.ndarray, str]:
    """``(x, y, where)`` from a ``.npz`` (keys ``x``, ``y``) or a folder with ``x.npy`` and ``y.npy``."""
    if path.is_dir():
        fx, fy = path / "x.npy", path / "y.npy"
        must_exist([fx, fy], setting)
        try:
            return np.load(fx, allow_pickle=False), np.load(fy, allow_pickle=False), str(fx)
        except ValueError as e:
            raise ConfigError(f"{setting}: {path}: cannot load x.npy / y.npy ({e})") from None
    must_exist([path], setting)
    if path.suffix != ".npz":
        raise ConfigError(f"{setting}: {path} is not a .npz; give a .npz holding arrays x and y, or a folder "
                          "holding x.npy and y.npy")
    try:
        with np.load(path, allow_pickle=False) as f:
            arrs = {k: f[k] for k in ("x", "y") if k in f.files}
            keys = list(f.files)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{setting}: {path}: cannot load ({e})") from None
    if len(arrs) != 2:
        raise ConfigError(f"{setting}: {path} holds arrays {keys}, not x and y; save it with "
                          "numpy.savez(path, x=images, y=labels)")
    return arrs["x"], arrs["y"], str(path)


def check_arrays(x: np.ndarray, y: np.ndarray, where: str, shape: tuple[int, int, int],
                 pixel_range: tuple[float, float], n_classes: int) -> np.ndarray:
    """``x`` as ``(n, C, H, W)`` (from ``(n, C, H, W)``, ``(n, H, W, C)`` or, grey, ``(n, H, W)``), checked."""
    c, h, w = shape
    if x.dtype.kind not in "uif" or y.dtype.kind not in "ui":
        raise ConfigError(f"{where}: x must hold numbers and y integers, got x {x.dtype}, y {y.dtype}")
    if x.ndim < 1 or y.shape != (x.shape[0],):
        raise ConfigError(f"{where}: y must have one label per image: x {x.shape}, y {y.shape}")
    rec = tuple(x.shape[1:])
    if rec == (c, h, w):
        pass
    elif rec == (h, w, c):
        x = np.moveaxis(x, -1, 1)
    elif c == 1 and rec == (h, w):
        x = x[:, None]
    else:
        raise ConfigError(f"{where}: records have shape {rec}, but the declared dataset.image_size and "
                          f"dataset.channels give {(c, h, w)} (or {(h, w, c)}{f' or {(h, w)}' if c == 1 else ''}); "
                          "reshape the array or declare its shape")
    lo, hi = pixel_range
    flat = x.reshape(x.shape[0], -1)
    bad = ~(np.isfinite(flat).all(1) & (flat.min(1, initial=lo) >= lo) & (flat.max(1, initial=hi) <= hi))
    if bad.any():
        first = int(np.argmax(bad))
        if not np.isfinite(flat[first]).all():
            raise ConfigError(f"{where}: record {first} holds a NaN or an infinite value; fix or remove the record "
                              "(dpgen maps nothing: a non-finite pixel has no place in the declared range)")
        raise ConfigError(f"{where}: record {first} has values outside the declared dataset.pixel_range=[{lo:g}, "
                          f"{hi:g}]; fix the data or declare the range it is stored in")
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ConfigError(f"{where}: labels must be in 0..{n_classes - 1} (dataset.classes declares {n_classes}); "
                          f"record {int(np.argmax((y < 0) | (y >= n_classes)))} is not")
    return x


def check_every_class(y: torch.Tensor, names: list[str], where: str) -> None:
    """Every declared class has at least one record (else it would be trained on nothing and sampled as noise)."""
    present = set(torch.unique(y).tolist())
    missing = [n for k, n in enumerate(names) if k not in present]
    if missing:
        raise ConfigError(f"{where}: no record has the declared class(es) {missing[:5]}; a declared class without "
                          "records cannot be trained or tested (it would be sampled as noise); add its records, or "
                          "leave the class out of dataset.classes")


def arrays(path: str, image_size, channels: int, classes, pixel_range, test_path: str | None = None,
           test_fraction: float | None = None, public_fraction: float = 0.0, seed: int = 0,
           declared_size: int | None = None, **_: object) -> DataSplits:
    """Images as arrays (``x``: (n, C, H, W), (n, H, W, C) or grey (n, H, W); ``y``: (n,) ints), checked against
    the declared facts (module docstring)."""
    shape, rng, names = declared_shape(image_size, channels), declared_range(pixel_range), declared_classes(classes)
    frac = check_test_choice(test_path, test_fraction)
    evaluation_size(declared_size, 1, frac)  # a bad declared_size fails before any array is read

    def read(p: str, setting: str) -> tuple[torch.Tensor, torch.Tensor]:
        x, y, where = load_arrays(Path(p), setting)
        x = check_arrays(x, y, where, shape, rng, len(names))
        y = torch.from_numpy(y.astype(np.int64))
        check_every_class(y, names, where)
        return to_unit(x, *rng), y

    x, y = read(path, "dataset.path")
    if test_path is not None:
        x_te, y_te = read(test_path, "dataset.test_path")
    else:
        (x, y), (x_te, y_te) = hold_out(x, y, frac)
    return make_splits("arrays", x, y, x_te, y_te, public_fraction, seed, len(names),
                       eval_size=evaluation_size(declared_size, len(y_te), frac))


# ----------------------------------------------------------------------------------------- splits
def hold_out(x: torch.Tensor, y: torch.Tensor, fraction: float):
    """A fixed-seed ``fraction`` of the records as PUBLIC test data: ``((x, y) kept, (x, y) test)``."""
    n_test = int(round(fraction * x.shape[0]))
    if not 0 < n_test < x.shape[0]:  # the record count is private: not in the message
        raise ConfigError(f"dataset.test_fraction={fraction} leaves no test or no training records; "
                          "give dataset.test_path instead")
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(_TEST_SEED))
    te, tr = perm[:n_test], perm[n_test:]
    return (x[tr], y[tr]), (x[te], y[te])
