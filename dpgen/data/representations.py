"""Public, record-wise representations of images for the moment and projection releases.

A representation is a fixed linear map ``enc(x) = (x_flat - c) V`` with ``V: (D, K)`` orthonormal
columns, ``decode(z) = z V^T + c``, and the L2 radius ``r`` every encoded row is clipped to.  The
release mechanisms see only the clipped codes, so the sensitivity of everything they release is
stated in terms of ``r`` (a PUBLIC constant) alone.  Nothing here ever reads private records:

* ``dct``: the 2-D orthonormal DCT-II of each channel, the ``K`` lowest frequencies in zig-zag
  order (ordered by ``u + v``, then ``u``).  Fixed: no data at all.  Centre ``c`` is a constant
  pixel value chosen a priori (``center``).
* ``pca``: the top ``K`` principal directions of the PUBLIC split, centred at the public mean.
* ``identity``: the flattened pixels (``K = D``), centre a constant.

Radius: ``radius: null`` gives the worst case ``max(|lo - c|, |hi - c|) sqrt(D)`` for images in
the value range ``[lo, hi]`` (never clips; V has orthonormal columns, so ``||enc(x)|| <= ||x - c||``);
``radius_quantile: q`` takes the q-quantile of the PUBLIC codes' norms (needs a public split).

Prior spectrum (public, used to complete a covariance in directions the noisy release cannot resolve,
:mod:`dpgen.privacy.moments`): a fixed variance shape ``p: (K,)`` over the code coordinates.

* ``dct``: natural images have power ``~ 1/f^2``, so coefficient ``(u, v)`` gets ``p = 1 / (1 + u^2 + v^2)``;
* ``pca``: the PUBLIC split's principal variances (``s_k^2 / (n_pub - 1)``);
* ``identity``: isotropic (``p = 1``).

Shapes: images ``(n, C, H, W)``; codes ``(n, K)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

REPRESENTATIONS = ("dct", "pca", "identity")


def zigzag_order(h: int, w: int) -> list[tuple[int, int]]:
    """Frequencies ``(u, v)`` of an ``h x w`` DCT, lowest first (by ``u + v``, then ``u``)."""
    return sorted(((u, v) for u in range(h) for v in range(w)), key=lambda t: (t[0] + t[1], t[0]))


def dct_matrix(n: int) -> np.ndarray:
    """Orthonormal DCT-II matrix ``A: (n, n)``, ``A[k, i] = a_k cos(pi (2i + 1) k / (2n))``."""
    i = np.arange(n)
    a = np.cos(np.pi * (2 * i[None, :] + 1) * i[:, None] / (2 * n)) * math.sqrt(2.0 / n)
    a[0] /= math.sqrt(2.0)
    return a


def dct_basis(image_shape: tuple[int, int, int], n_coeffs: int) -> np.ndarray:
    """``V: (C*H*W, K)``: orthonormal 2-D DCT basis images of the ``K`` lowest frequencies per channel.

    Column ``(ch, u, v)`` is the flattened image ``A_H[u]^T A_W[v]`` in channel ``ch``; columns are
    ordered frequency-major (every channel of frequency 1, then of frequency 2, ...).
    """
    c, h, w = image_shape
    if not 1 <= n_coeffs <= c * h * w:
        raise ValueError(f"model.representation.n_components must be in [1, {c * h * w}] for images {image_shape}, "
                         f"got {n_coeffs}")
    ah, aw = dct_matrix(h), dct_matrix(w)
    cols = []
    for u, v in zigzag_order(h, w):
        img = np.outer(ah[u], aw[v])
        for ch in range(c):
            full = np.zeros((c, h, w))
            full[ch] = img
            cols.append(full.reshape(-1))
            if len(cols) == n_coeffs:
                return np.stack(cols, axis=1)
    return np.stack(cols, axis=1)


def dct_prior_spectrum(image_shape: tuple[int, int, int], n_coeffs: int) -> np.ndarray:
    """``p: (K,)``, ``p = 1 / (1 + u^2 + v^2)`` for the columns of :func:`dct_basis` (same order: 1/f^2 power)."""
    c, h, w = image_shape
    freqs = [(u, v) for u, v in zigzag_order(h, w) for _ in range(c)][:n_coeffs]
    return np.array([1.0 / (1.0 + u * u + v * v) for u, v in freqs])


@dataclass
class Representation:
    """``enc(x) = clip_r((x_flat - center) V)``, ``decode(z) = clamp(z V^T + center, lo, hi)``."""

    kind: str
    basis: torch.Tensor  # (D, K), orthonormal columns
    center: torch.Tensor  # (D,)
    radius: float
    image_shape: tuple[int, int, int]
    value_range: tuple[float, float]
    prior: torch.Tensor | None = None  # (K,) public prior variance shape of the codes (None: isotropic)

    def __post_init__(self) -> None:
        if not (self.radius > 0 and math.isfinite(self.radius)):
            raise ValueError(f"model.representation.radius must be a positive number, got {self.radius}")

    @property
    def dim(self) -> int:
        return int(self.basis.shape[1])

    def prior_spectrum(self) -> torch.Tensor:
        """``(K,)`` public prior variance shape of the codes (module docstring); isotropic when none is known."""
        return torch.ones(self.dim, dtype=torch.float64) if self.prior is None else self.prior

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, C, H, W) -> (n, K)``, each row clipped to L2 norm <= ``radius``."""
        z = (x.flatten(1).to(self.basis.dtype) - self.center) @ self.basis
        return clip_norm(z, self.radius)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """``(n, K) -> (n, C, H, W)`` clamped to the value range."""
        x = z.to(self.basis.dtype) @ self.basis.T + self.center
        lo, hi = self.value_range
        return x.clamp(lo, hi).reshape(-1, *self.image_shape).float()


def clip_norm(z: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale each row to L2 norm <= ``max_norm`` (rows inside are unchanged)."""
    n = z.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return z * (max_norm / n).clamp(max=1.0)


def build_representation(kind: str, image_shape: tuple[int, int, int], value_range: tuple[float, float],
                         n_components: int | None = None, center: float | None = None,
                         radius: float | None = None, radius_quantile: float | None = None,
                         public_x: torch.Tensor | None = None) -> Representation:
    """Build a representation from PUBLIC information only (``public_x``: the public split or None).

    ``center`` (a constant pixel value; dct/identity) defaults to the middle of the value range.
    """
    c, h, w = image_shape
    d = c * h * w
    lo, hi = value_range
    if kind not in REPRESENTATIONS:
        raise ValueError(f"model.representation.kind={kind!r} is unknown; choose one of {', '.join(REPRESENTATIONS)}")
    if radius is not None and radius_quantile is not None:
        raise ValueError("set either model.representation.radius or model.representation.radius_quantile, not both")
    if kind == "pca":
        if public_x is None:
            raise ValueError("model.representation.kind=pca is fitted on the PUBLIC split: set dataset.public_fraction > 0 "
                             "(e.g. 0.5), or use kind=dct (no public data)")
        k = d if n_components is None else int(n_components)
        if not 1 <= k <= min(d, len(public_x)):
            raise ValueError(f"model.representation.n_components must be in [1, {min(d, len(public_x))}], got {k}")
        p = public_x.flatten(1).double()
        mu = p.mean(0)
        _, sv, vt = torch.linalg.svd(p - mu, full_matrices=False)
        basis, ctr = vt[:k].T.contiguous(), mu
        prior = sv[:k] ** 2 / max(len(p) - 1, 1)
    else:
        k = d if n_components is None else int(n_components)
        c0 = (lo + hi) / 2.0 if center is None else float(center)
        basis = torch.eye(d, dtype=torch.float64) if kind == "identity" else torch.from_numpy(dct_basis(image_shape, k))
        if kind == "identity" and k != d:
            raise ValueError(f"model.representation.kind=identity keeps all {d} pixels; set n_components=null")
        ctr = torch.full((d,), c0, dtype=torch.float64)
        prior = torch.ones(d, dtype=torch.float64) if kind == "identity" else \
            torch.from_numpy(dct_prior_spectrum(image_shape, k))
    if radius_quantile is not None:
        if public_x is None:
            raise ValueError("model.representation.radius_quantile is a quantile of PUBLIC code norms: set "
                             "dataset.public_fraction > 0, or give a fixed model.representation.radius")
        if not 0.0 < radius_quantile <= 1.0:
            raise ValueError(f"model.representation.radius_quantile must be in (0, 1], got {radius_quantile}")
        norms = ((public_x.flatten(1).double() - ctr) @ basis).norm(dim=1)
        r = float(torch.quantile(norms, float(radius_quantile)))
    elif radius is None:
        if kind == "pca":
            # worst case over the value-range box around the public mean (never clips)
            r = float(torch.maximum((lo - ctr).abs(), (hi - ctr).abs()).norm())
        else:
            r = max(abs(lo - float(ctr[0])), abs(hi - float(ctr[0]))) * math.sqrt(d)
    else:
        r = float(radius)
    return Representation(kind, basis, ctr, r, tuple(image_shape), (float(lo), float(hi)), prior)
