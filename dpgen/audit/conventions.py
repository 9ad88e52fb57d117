"""Worst-case neighbouring pairs for the published conventions that break the sensitivity their
accounting assumes, as audit inputs.

Each function returns the released rows of a worst-case pair ``(rows_D, rows_D')`` under the
convention's row map (:mod:`dpgen.privacy.conventions`), to be fed to
:func:`dpgen.audit.core.audit_projection_release` together with the paper's noise and the paper's
sensitivity bound (which assumes ``||x - x'|| <= 1``).  They exist to *measure* the violation; no
training path uses them.

* :func:`batch_max_worst_case`: the DP-SWD domain-adaptation code divides every feature row of the
  private target batch by ``2 m``, ``m = max_i ||g(x_i)||`` of that same batch (un-noised,
  data-dependent): ``||X - X'||_F`` up to about ``sqrt(n) / 2`` instead of 1.
* :func:`raw_pixel_worst_case`: the DP-SWD generator on raw [0, 1] pixels without a normalisation; two
  images differ by up to ``sqrt(d)`` (28 for MNIST).
"""

from __future__ import annotations

import torch

from ..privacy.conventions import batch_max_rows, raw_pixel_rows


def batch_max_worst_case(n: int, d: int, low: float = 1e-3, high: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Worst-case pair for :func:`batch_max_rows` with features in ``[0, 1]^d`` (Sigmoid features).

    D: n records whose features are all ``low * 1`` (norm ``low sqrt(d)``): every scaled row has norm
    1/2.  D': record 0 replaced by a record with features ``high * 1`` (the largest norm the Sigmoid
    range allows): the scale drops by ``high / low`` and the other n - 1 rows shrink to almost 0.
    Returns the *released rows* of D and D' (after the convention's scaling).
    """
    f0 = torch.full((n, d), float(low), dtype=torch.float64)
    f1 = f0.clone()
    f1[0] = float(high)
    return batch_max_rows(f0), batch_max_rows(f1)


def raw_pixel_worst_case(n: int, d: int, value_range: tuple[float, float] = (0.0, 1.0)) -> tuple[torch.Tensor, torch.Tensor]:
    """All-black record in D replaced by an all-white one in D': ``||x - x'|| = (hi - lo) sqrt(d)``.

    The other n - 1 rows are mid-grey images (they cancel in the likelihood ratio)."""
    lo, hi = value_range
    x0 = torch.full((n, d), (lo + hi) / 2.0, dtype=torch.float64)
    x1 = x0.clone()
    x0[0], x1[0] = lo, hi
    return raw_pixel_rows(x0), raw_pixel_rows(x1)
