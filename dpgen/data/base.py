"""Data splits shared by every method: public / private / test.

Images are float tensors ``(n, C, H, W)`` in ``[0, 1]`` with integer labels ``(n,)``.
The private split exposes no indexing or iteration: the only way to read private records is
:class:`dpgen.privacy.sampler.PrivateSampler`, which draws batches the way the accountant
assumes.  Public and test splits are ordinary tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import ConfigError, UserError


class DatasetNotFoundError(UserError, FileNotFoundError):
    """A dataset's files are missing; the one-line message lists the expected paths and the fix."""

    def __init__(self, name: str, root: str | Path, missing: list[Path], download_supported: bool = True) -> None:
        fix = (
            "fix: point paths.data_root (or the DPGEN_DATA_ROOT environment variable) at a folder that "
            "holds these files"
        )
        if download_supported:
            fix += ", or let torchvision fetch them with dataset.download=true (needs internet)"
        super().__init__(
            f"dataset '{name}' not found under data root '{root}': expected {', '.join(str(p) for p in missing)}; "
            f"{fix}"
        )


def require_files(name: str, root: str | Path, paths: list[Path], download_supported: bool = True) -> None:
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise DatasetNotFoundError(name, root, missing, download_supported)


@dataclass
class TensorSplit:
    """An in-memory split: ``x: (n, C, H, W)`` float in [0, 1], ``y: (n,)`` long."""

    x: torch.Tensor
    y: torch.Tensor

    def __post_init__(self) -> None:
        if self.x.shape[0] != self.y.shape[0]:
            raise ValueError("x and y must have the same number of rows")

    def __len__(self) -> int:
        return int(self.x.shape[0])


class PrivateSplit:
    """The private training records.  Readable only through a ``PrivateSampler``.

    ``__len__`` (the public count N used by the accountant) is the only public accessor.
    """

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.__x, self.__y = x, y  # name-mangled: not part of any public surface
        self.outside_reads: list[str] = []  # the purpose of every read_outside_guarantee (the run's card names them)

    def __len__(self) -> int:
        return int(self.__x.shape[0])

    @property
    def feature_shape(self) -> tuple[int, ...]:
        """Shape of one record (public metadata, not data)."""
        return tuple(self.__x.shape[1:])

    def _gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.__x[idx], self.__y[idx]

    def _labels(self) -> torch.Tensor:
        """Every record's label (for a class-partitioned draw; the sampler's only other read)."""
        return self.__y

    def _on(self, device: torch.device) -> PrivateSplit:
        """The same records on ``device`` (moved once, by the sampler that reads them; itself when already there)."""
        x, y = self.__x.to(device), self.__y.to(device)
        return self if x is self.__x and y is self.__y else PrivateSplit(x, y)

    def read_outside_guarantee(self, purpose: str, n: int | None = None, seed: int = 0) -> TensorSplit:
        """A copy of the records (all, or a fixed subset of ``n`` drawn with ``seed``) for an EVALUATION that
        reads private data outside the privacy guarantee: DPImageBench's FID against the sensitive training
        images, or the empirical audit's canaries (``dpgen audit``, which writes only its numbers).

        Never called by a method or a release: only by an evaluator whose every result says, in its label,
        that it reads sensitive data and is not covered, or by the audit (``purpose`` names the reading; it is
        kept in ``outside_reads``, and the run's privacy card names it after the evaluation).  Nothing it
        returns may reach a release, a checkpoint or a card."""
        if not purpose:
            raise ValueError("read_outside_guarantee needs its purpose")
        if purpose not in self.outside_reads:
            self.outside_reads.append(purpose)
        idx = torch.arange(len(self))
        if n is not None and n < len(self):
            idx = torch.randperm(len(self), generator=torch.Generator().manual_seed(seed))[:n]
        x, y = self._gather(idx)
        return TensorSplit(x.clone(), y.clone())

    def __repr__(self) -> str:  # never print records
        return f"PrivateSplit(n={len(self)}, shape={self.feature_shape})"

    def __getstate__(self):  # private data must never be pickled into a checkpoint
        raise TypeError("PrivateSplit cannot be pickled: private data never leaves the process")


@dataclass
class DataSplits:
    """What a dataset builder returns."""

    name: str
    private: PrivateSplit
    test: TensorSplit
    public: TensorSplit | None
    num_classes: int
    image_shape: tuple[int, int, int]
    value_range: tuple[float, float] = (0.0, 1.0)
    # sensitive images held out of the training split before any private step (``dataset.validation_size``):
    # never seen by the private method; read only by an evaluator's model selection, which the privacy
    # guarantee does not cover (DPImageBench's protocol, :mod:`dpgen.eval.dpimagebench`)
    validation: TensorSplit | None = None
    # your own data: the PUBLIC size its evaluation is sized to (a declared ``dataset.declared_size``, else one
    # computed from the test split's size) and where it comes from; never ``len(private)``, which is private
    # under add/remove.  None: a built-in dataset, evaluated at its preset's (published) sizes
    eval_size: int | None = None
    eval_size_from: str | None = None

    @property
    def dim(self) -> int:
        c, h, w = self.image_shape
        return c * h * w


VALIDATION_SEED = 0  # DPImageBench cuts its validation split with seed 0, whatever the run's seed


def split_validation(x: torch.Tensor, y: torch.Tensor, validation_size: int | None
                     ) -> tuple[torch.Tensor, torch.Tensor, TensorSplit | None]:
    """Cut ``validation_size`` sensitive images off the training split: ``(x_train, y_train, validation)``.

    The cut is DPImageBench's (Gong et al., CCS 2025, ``data/dataset_loader.py``): ``torch.manual_seed(0)``
    then ``random_split(train, [n - v, v])``, i.e. one ``randperm(n)`` of a generator seeded 0 whose first
    ``n - v`` indices train and last ``v`` validate; the same images whatever the run's seed.  ``None`` or 0:
    no cut.  The validation images never reach the private split, so the private method never sees them.
    """
    if not validation_size:
        return x, y, None
    n, v = int(x.shape[0]), int(validation_size)
    if not 0 < v < n:
        raise ConfigError(f"dataset.validation_size={v}: must be between 1 and {n - 1} (the training split has {n} "
                          "images; a public fact of the dataset), or null for no validation split")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(VALIDATION_SEED))
    train, val = perm[:n - v], perm[n - v:]
    return x[train], y[train], TensorSplit(x[val], y[val])


def split_public_private(x: torch.Tensor, y: torch.Tensor, public_fraction: float, seed: int,
                         public_max: int | None = None) -> tuple[TensorSplit | None, PrivateSplit]:
    """Deterministic (seeded) split of the training set into public and private parts."""
    if not 0.0 <= public_fraction < 1.0:
        raise ValueError(f"dataset.public_fraction must be in [0, 1), got {public_fraction}")
    n = x.shape[0]
    n_pub = int(round(public_fraction * n))
    if public_max is not None:
        n_pub = min(n_pub, public_max)
    if n_pub == 0:
        return None, PrivateSplit(x, y)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    pub, priv = perm[:n_pub], perm[n_pub:]
    return TensorSplit(x[pub], y[pub]), PrivateSplit(x[priv], y[priv])


def make_splits(name, x_tr, y_tr, x_te, y_te, public_fraction, seed, num_classes, public_max=None,
                validation_size=None, eval_size: tuple[int, str] | None = None) -> DataSplits:
    """A loader's train and test tensors as :class:`DataSplits`: the sensitive validation images leave the
    training part first (``validation_size``), then it is split into public and private
    (``public_fraction``, seeded, at most ``public_max`` public records).  ``eval_size``: ``(size, where it
    comes from)``, the public size the evaluation is sized to (own data only)."""
    x_tr, y_tr, validation = split_validation(x_tr, y_tr, validation_size)
    public, private = split_public_private(x_tr, y_tr, public_fraction, seed, public_max)
    return DataSplits(name=name, private=private, test=TensorSplit(x_te, y_te), public=public,
                      num_classes=num_classes, image_shape=tuple(x_tr.shape[1:]), validation=validation,
                      eval_size=None if eval_size is None else int(eval_size[0]),
                      eval_size_from=None if eval_size is None else eval_size[1])
