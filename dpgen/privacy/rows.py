"""Public, data-independent row maps that make a sensitivity bound TRUE (not assumed).

Every private record reaches a Gaussian release as a *row* produced by one of these maps.  They
use public constants only (value range, a public radius, a label weight), act on each record on
its own (a fixed per-record function), and end with a clip, so the bound they state holds for any
input, including a record outside the expected range or a non-finite one (non-finite entries are
set to 0 before the clip: a data-independent choice inside the ball).

=====================  =======================================  ==========================
map                    rows                                     bound it enforces
=====================  =======================================  ==========================
``clip_rows(r, c)``    ``r * min(1, c / ||r||)``                ``||row|| <= c``
``RowMap``             DP-SWD pixel (or feature) rows           ``||row|| <= 1/2``
``unit_normalise``     latents on the unit sphere               ``||row|| = 1`` (0 stays 0)
``scale_and_clip``     ``clip_c(f / (2R))`` (DA features)       ``||row|| <= c`` (1/2)
``fixed_size``         exactly B rows (subset / zero padding)   one changed row per neighbour
=====================  =======================================  ==========================

Rows of norm <= 1/2 differ by at most 1 (``row_diameter = 1``, Lemma 2's assumption); unit latents
by at most 2 (``row_diameter = 2``, DPSWflow's factor 2).  Pure torch, no Hydra.

Several processes (``torchrun``): ``fixed_size`` and ``class_blocks`` act on the private batch of the
whole run, so they first gather every rank's rows (in rank order: the single-process batch order,
``utils.dist``); the cut or the padding is then the single-process one, computed identically on
every rank (torch's global RNG is rank 0's), and the release that follows noises each row once.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..utils import dist
from .errors import PrivacySettingError


def clip_rows(r: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``(n, D) -> (n, D)``: each row scaled to norm <= ``max_norm`` (rows already inside are unchanged).

    Non-finite entries are replaced by 0 first, so the bound holds for every input.
    """
    r = torch.nan_to_num(r, nan=0.0, posinf=0.0, neginf=0.0)
    norms = r.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return r * (max_norm / norms).clamp(max=1.0)


def unit_normalise(z: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """``(n, d) -> (n, d)``: rows scaled to norm 1 (``F.normalize``; a zero row stays 0).  ``||row|| <= 1``."""
    return F.normalize(z, dim=1, eps=eps)


def scale_and_clip(f: torch.Tensor, radius: float, max_norm: float = 0.5) -> torch.Tensor:
    """``(n, d) -> (n, d)``: ``clip_{max_norm}(f / (2 R))`` with a PUBLIC radius R (DA feature rows, Alg. 2 l. 10-11).

    Rows with ``||f|| <= R`` are scaled, not clipped; any row ends with norm <= ``max_norm`` (1/2:
    two rows differ by <= 1).  R must never be a statistic of the private batch (the released DA
    code's batch maximum is not covered by the analysis, DP-SWD paper, unit-norm assumption).
    """
    if not radius > 0:
        raise ValueError(f"the public feature radius must be > 0, got {radius}")
    return clip_rows(f / (2.0 * radius), max_norm)


def fixed_size(rows: torch.Tensor, size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``(b, D) -> (size, D)``: a uniform random subset if ``b > size``, zero rows appended if ``b < size``.

    Releasing exactly ``size`` rows hides the Poisson batch size; adding or removing one record then
    changes at most one released row (it swaps with a padding row or a random kept row: the
    ``partners`` of ``privacy.dpswd``).  The zero row is the public centre (norm 0 <= any row bound).
    Several processes: ``rows`` is this rank's part; the result is the whole batch's (module docstring).
    """
    return _fixed_size(dist.all_gather_rows(rows), size, generator)


def _fixed_size(rows: torch.Tensor, size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    n = rows.shape[0]
    if n > size:
        return rows[torch.randperm(n, generator=generator)[:size].to(rows.device)]
    if n < size:
        return torch.cat([rows, rows.new_zeros(size - n, rows.shape[1])], dim=0)
    return rows


class RowMap:
    """Public, data-independent map from (image, label) to a DP-SWD row of norm <= 1/2.

    ``r(x, y) = clip_{1/2}( [ (x - center) / (2 * radius) || label_weight * onehot(y) ] )``, rescaled
    by ``1/sqrt(1 + label_weight^2)`` with labels so an in-range image plus its label stays inside.
    ``radius`` defaults to the largest possible ``||x - center||`` for images in ``value_range``,
    so in-range images are never clipped; a smaller public radius clips (and keeps the bound).
    ``x: (n, C, H, W)`` (or ``(n, d)`` features), ``y: (n,)`` -> ``(n, out_dim)``.
    """

    def __init__(self, dim: int, n_classes: int, value_range: tuple[float, float], center: float | None,
                 radius: float | None, label_mode: str, label_weight: float) -> None:
        if label_mode not in ("concat", "none"):
            raise PrivacySettingError("label_mode", f"the label mode must be 'concat' or 'none', got {label_mode!r}")
        lo, hi = value_range
        self.center = (lo + hi) / 2.0 if center is None else float(center)
        worst = max(abs(lo - self.center), abs(hi - self.center)) * math.sqrt(dim)
        self.radius = worst if radius is None else float(radius)
        if self.radius <= 0:
            raise PrivacySettingError("radius", f"the row radius must be > 0, got {radius}")
        self.label_mode, self.n_classes = label_mode, n_classes
        self.label_weight = float(label_weight)
        self.out_dim = dim + (n_classes if label_mode == "concat" else 0)

    def __call__(self, x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        """``x: (n, C, H, W)``, ``y: (n,)`` -> rows ``(n, D)`` with norm <= 1/2."""
        r = (x.flatten(1) - self.center) / (2.0 * self.radius)
        if self.label_mode == "concat":
            # the label part is scaled so that an in-range image plus label stays within norm 1/2
            # one-hot by comparison (F.one_hot reads the labels' minimum on the host: a device sync)
            lab = (y[:, None] == torch.arange(self.n_classes, device=y.device)).to(r.dtype) * (0.5 * self.label_weight)
            r = torch.cat([r, lab], dim=1) / math.sqrt(1.0 + self.label_weight**2)
        return clip_rows(r, 0.5)


def class_blocks(rows: torch.Tensor, labels: torch.Tensor, n_classes: int, block_size: int,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """``(C * m, D)``: the rows of each class cut or zero-padded to ``m`` (:func:`fixed_size`), stacked by label.

    Class-partitioned releases: under add/remove of one record (x, y) only block y changes,
    in one row (a padding zero becomes x, or x takes the place of a random kept row of class y).
    Several processes: ``rows, labels`` are this rank's part; the blocks are the whole batch's.
    """
    rows, labels = dist.all_gather_rows(rows), dist.all_gather_rows(labels)
    # the class indices are found where the labels live (the sampler's host tensors: no device sync),
    # then gathered on the rows' device (the same rows, in the same order, as a boolean mask)
    index = [(labels == c).nonzero().flatten().to(rows.device) for c in range(n_classes)]
    return torch.cat([_fixed_size(rows[i], block_size, generator) for i in index])
