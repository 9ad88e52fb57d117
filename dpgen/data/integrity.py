"""Damaged dataset files: find the file, name it, say how to fix it (``DataFileError``, one line).

The published files' MD5 checksums (hashlib) decide whether a file is damaged:

* MNIST / Fashion-MNIST: torchvision keeps the MD5 of the ``.gz`` archives (``MNIST.resources``);
  ``KNOWN_FILES`` holds the size and MD5 of the uncompressed ``*-ubyte`` files dpgen reads, i.e. of
  those archives' contents (checked when they were written down);
* USPS: torchvision's ``USPS.split_list`` MD5s of ``usps.bz2`` / ``usps.t.bz2``;
* CIFAR-10 batches, SVHN ``.mat`` files, CelebA's list files: torchvision's ``CIFAR10.train_list`` /
  ``test_list``, ``SVHN.split_list``, ``CelebA.file_list``.

Hashing all of MNIST costs ~0.5 s, so it is not done on every run:

1. when reading fails (torchvision's ``shape '[60000, 28, 28]' is invalid``, a bare ``AssertionError``
   on a bad header, a bz2 ``EOFError``...), the files are hashed and the damaged one is named;
2. a file of the published size that reads fine (a garbled copy reads fine) is hashed ONCE and
   remembered by path, size and modification time in ``<cache>/verified_data_files.json`` (cache:
   ``$DPGEN_CACHE_DIR``, else ``~/.cache/dpgen``); later runs only compare those three.

Files of another size (e.g. small test fixtures in the same layout) are compared only when reading
them fails.  Files without a published checksum (HDF5 USPS, CelebA's images) are named when reading
them fails.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataFileError, UserError

# (folder below the data root, file) -> (size in bytes, MD5) of the published file
KNOWN_FILES: dict[tuple[str, str], tuple[int, str]] = {
    ("MNIST/raw", "train-images-idx3-ubyte"): (47_040_016, "6bbc9ace898e44ae57da46a324031adb"),
    ("MNIST/raw", "train-labels-idx1-ubyte"): (60_008, "a25bea736e30d166cdddb491f175f624"),
    ("MNIST/raw", "t10k-images-idx3-ubyte"): (7_840_016, "2646ac647ad5339dbf082846283269ea"),
    ("MNIST/raw", "t10k-labels-idx1-ubyte"): (10_008, "27ae3e4e09519cfbb04c329615203637"),
    ("FashionMNIST/raw", "train-images-idx3-ubyte"): (47_040_016, "f4a8712d7a061bf5bd6d2ca38dc4d50a"),
    ("FashionMNIST/raw", "train-labels-idx1-ubyte"): (60_008, "9018921c3c673c538a1fc5bad174d6f9"),
    ("FashionMNIST/raw", "t10k-images-idx3-ubyte"): (7_840_016, "8181f5470baa50b63fa0f6fddb340f0a"),
    ("FashionMNIST/raw", "t10k-labels-idx1-ubyte"): (10_008, "15d484375f8d13e6eb1aabb0c3f46965"),
}
MARKER = "verified_data_files.json"
READ_ERRORS = (RuntimeError, AssertionError, ValueError, OSError, EOFError, IndexError, KeyError, TypeError,
               pickle.UnpicklingError)


def published_md5(path: Path) -> str | None:
    """The published MD5 of ``path`` (by its last two folders and name, or torchvision's tables), or None."""
    path = Path(path)
    known = KNOWN_FILES.get((f"{path.parent.parent.name}/{path.parent.name}", path.name))
    if known is not None:
        return known[1]
    return _torchvision_md5s().get(path.name)


def published_size(path: Path) -> int | None:
    known = KNOWN_FILES.get((f"{Path(path).parent.parent.name}/{Path(path).parent.name}", Path(path).name))
    return None if known is None else known[0]


def _torchvision_md5s() -> dict[str, str]:
    """File name -> MD5 from torchvision's dataset classes (archives it would download)."""
    from torchvision import datasets

    out = {name: md5 for cls in (datasets.MNIST, datasets.FashionMNIST) for name, md5 in cls.resources}
    out.update({name: md5 for _, name, md5 in datasets.USPS.split_list.values()})
    out.update({name: md5 for name, md5 in datasets.CIFAR10.train_list + datasets.CIFAR10.test_list})
    out.update({name: md5 for _, name, md5 in datasets.SVHN.split_list.values()})
    out.update({name: md5 for _, md5, name in datasets.CelebA.file_list if not name.endswith(".zip")})
    return out


def md5_of(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def damaged_message(path: Path, detail: str, dataset: str) -> str:
    fix = ("fix: delete it and fetch a fresh copy (dataset.download=true downloads it again; without internet "
           "copy it from a machine that has it)") if published_md5(path) else \
        "fix: replace it with a complete copy of the dataset file"
    return f"dataset '{dataset}': the file {path} is damaged ({detail}); {fix}"


def check_damaged(files: list[Path], dataset: str) -> None:
    """Raise :class:`DataFileError` naming the first of ``files`` whose MD5 is not the published one."""
    for path in files:
        want = published_md5(path)
        if want is None or not Path(path).is_file():
            continue
        got = md5_of(path)
        if got != want:
            size = Path(path).stat().st_size
            expected = published_size(path)
            what = f"{size} bytes, the published file has {expected}" if expected and expected != size else \
                f"MD5 {got}, the published file has {want}"
            raise DataFileError(damaged_message(path, f"truncated or corrupted: {what}", dataset))


@contextlib.contextmanager
def reading(files: list[Path], dataset: str) -> Iterator[None]:
    """Read ``files`` inside this block: a read failure names the damaged file (by checksum when one is
    published, else the file itself when there is only one); then a once-per-file checksum of files of
    the published size."""
    try:
        yield
    except UserError:
        raise
    except READ_ERRORS as err:
        check_damaged(files, dataset)
        unknown = [p for p in files if published_md5(p) is None]
        if len(files) == 1 and unknown:
            raise DataFileError(damaged_message(files[0], f"cannot be read: {type(err).__name__}: {err}",
                                                dataset)) from None
        raise
    verify_once([p for p in files if published_size(p) is not None and Path(p).stat().st_size == published_size(p)],
                dataset)


def _cache_dir() -> Path:
    return Path(os.environ.get("DPGEN_CACHE_DIR", Path.home() / ".cache" / "dpgen")).expanduser()


def verify_once(files: list[Path], dataset: str) -> None:
    """Hash each of ``files`` unless this path, size and mtime were verified before; raise on a mismatch."""
    if not files:
        return
    marker = _cache_dir() / MARKER
    try:
        seen = json.loads(marker.read_text())
    except (OSError, ValueError):
        seen = {}
    changed = False
    for path in files:
        st = Path(path).stat()
        key, stamp = str(Path(path).resolve()), [st.st_size, st.st_mtime_ns]
        if seen.get(key) == stamp:
            continue
        check_damaged([path], dataset)
        seen[key], changed = stamp, True
    if changed:
        with contextlib.suppress(OSError):  # a read-only cache only costs the hash next time
            marker.parent.mkdir(parents=True, exist_ok=True)
            tmp = marker.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(seen))
            os.replace(tmp, marker)


def read_mnist_like(cls_name: str, folder: str, dataset: str, root: str, download: bool):
    """torchvision's ``MNIST`` / ``FashionMNIST`` (train, test) from ``<root>/<folder>/raw``, a damaged
    file named by :func:`reading`."""
    import torchvision

    files = [Path(root) / folder / "raw" / f for f in
             ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")]
    cls = getattr(torchvision.datasets, cls_name)
    with reading(files, dataset):
        return cls(root=str(root), train=True, download=download), cls(root=str(root), train=False, download=download)
