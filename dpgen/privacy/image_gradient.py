"""Sanitising the image gradient of a generator (DP-Sinkhorn paper, gradient sanitisation).

The generator's parameters never touch real data; only the gradient of the loss with respect to
the generated images ("cross" group, ``G: (n, D)``) depends on the private batch, through the
transport plan.  That gradient is released after

* ``clip="whole"`` (the reference code, ``src/rdp/privacy.py``): the whole tensor is clipped to
  Frobenius norm C, then N(0, (2Cσ)²) noise is added to every entry.  For any two neighbouring
  private batches the clipped tensors differ by at most 2C (both lie in the C-ball), so with
  noise std 2Cσ this is a Gaussian mechanism with noise multiplier σ (RDP α/(2σ²) per step,
  before Poisson subsampling).  This is what the reported ε of the paper corresponds to.
* ``clip="per_row"`` (the paper's Alg. 1): every row is clipped to C, noise std 2Cσ.  Every row
  depends on the whole real batch, so one changed record can move all n rows: sensitivity 2C√n,
  effective noise multiplier σ/√n (RDP n·α/(2σ²) per step, Thm. 4.1).  The accounting must use
  :func:`effective_noise_multiplier`, which the DP-Sinkhorn method does.

Pure functions, no Hydra.
"""

from __future__ import annotations

import math

import torch

from .errors import PrivacySettingError

CLIP_MODES = ("whole", "per_row")


def clip_whole(g: torch.Tensor, c: float) -> torch.Tensor:
    """``g · min(1, C / ‖g‖_F)``: the whole tensor to Frobenius norm <= C."""
    # no branch on the norm (a host sync per step on an accelerator): for ||g|| = 0, C / 0 = inf clamps to 1
    return g * (c / g.norm()).clamp(max=1.0)


def clip_per_row(g: torch.Tensor, c: float) -> torch.Tensor:
    """Each row ``g_i`` (first dimension) to norm <= C."""
    norms = g.flatten(1).norm(dim=1).clamp_min(1e-12)
    scale = (c / norms).clamp(max=1.0)
    return g * scale.view(-1, *([1] * (g.dim() - 1)))


def sanitize(g: torch.Tensor, c: float, sigma: float, clip: str = "whole",
             generator: torch.Generator | None = None) -> torch.Tensor:
    """``clip(g) + N(0, (2Cσ)² I)`` (DP-Sinkhorn paper, the released code's sanitisation); ``sigma = 0`` clips only."""
    if clip not in CLIP_MODES:
        raise PrivacySettingError("clip", f"clip mode {clip!r} is unknown; choose one of {CLIP_MODES}")
    if c <= 0:
        raise PrivacySettingError("clip_norm", f"the clip norm C must be > 0, got {c}")
    out = clip_whole(g, c) if clip == "whole" else clip_per_row(g, c)
    if sigma > 0:
        noise = torch.randn(g.shape, generator=generator, device=g.device if generator is None else generator.device,
                            dtype=g.dtype)
        out = out + (2.0 * c * sigma) * noise.to(g.device)
    return out


def sensitivity(c: float, n: int, clip: str = "whole") -> float:
    """L2 sensitivity of the clipped cross-group gradient to one record: 2C (whole) or 2C√n (per row)."""
    if clip not in CLIP_MODES:
        raise PrivacySettingError("clip", f"clip mode {clip!r} is unknown; choose one of {CLIP_MODES}")
    return 2.0 * c * (1.0 if clip == "whole" else math.sqrt(n))


def effective_noise_multiplier(sigma: float, n: int, clip: str = "whole") -> float:
    """Noise std / sensitivity = 2Cσ / sensitivity: σ (whole) or σ/√n (per row)."""
    return sigma * 2.0 / sensitivity(1.0, n, clip)
