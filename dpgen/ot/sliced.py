"""Sliced Wasserstein distances, plain and Gaussian-smoothed / differentially private.

DP-SWD paper, Alg. 1.  All functions are batched torch code and run on
whatever device their inputs live on.  Random draws with a ``generator`` are made on the generator's
device (a mechanism's generator is the run's device's: nothing is copied) and returned on ``device``.
"""

from __future__ import annotations

import math

import torch


def random_directions(d: int, k: int, *, generator: torch.Generator | None = None,
                      device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``U: (d, k)``: k directions uniform on ``S^{d-1}`` (Gaussian columns / their L2 norm), drawn on the
    generator's device (else on ``device``)."""
    u = _moved(torch.randn(d, k, generator=generator, dtype=dtype, device=_draw_device(generator, device)), device)
    return u / u.norm(dim=0, keepdim=True)


def _draw_device(generator: torch.Generator | None, device: torch.device | str | None) -> torch.device | str | None:
    """Where a draw is made: the generator's device (a torch generator draws only there), else ``device``."""
    return generator.device if generator is not None else device


def _moved(t: torch.Tensor, device: torch.device | str | None) -> torch.Tensor:
    """``t`` on ``device`` (itself when it is there already, or when no device is asked for)."""
    return t if device is None or t.device == torch.device(device) else t.to(device)


def sliced_wasserstein_projected(p_s: torch.Tensor, p_t: torch.Tensor, q: float = 2.0) -> torch.Tensor:
    """SW_q from projections ``p_s, p_t: (n, k)`` (same n): 1-D OT by sorting each column.

    ``W_j = (mean_i |sort(p_t)[i,j] - sort(p_s)[i,j]|^q)^{1/q}``, returns
    ``(mean_j W_j^q)^{1/q}`` (DP-SWD paper, Alg. 1 steps 4-5).
    """
    if p_s.shape != p_t.shape:
        raise ValueError(f"projections must have the same shape, got {tuple(p_s.shape)} and {tuple(p_t.shape)}")
    s_sorted, _ = torch.sort(p_s, dim=0)
    t_sorted, _ = torch.sort(p_t, dim=0)
    cost = (s_sorted - t_sorted).abs().pow(q).mean()  # mean over samples and directions
    return cost.pow(1.0 / q)


def _truncate(x_s: torch.Tensor, x_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """DP-SWD paper, Alg. 1 step 1: keep the first min(n_s, n_t) rows of each side."""
    n = min(x_s.shape[0], x_t.shape[0])
    return x_s[:n].flatten(1), x_t[:n].flatten(1)


def sliced_wasserstein(x_s: torch.Tensor, x_t: torch.Tensor, k: int = 100, q: float = 2.0, *,
                       directions: torch.Tensor | None = None,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """Monte-Carlo sliced Wasserstein SW_q between ``x_s: (n, d)`` and ``x_t: (m, d)``.

    ``directions: (d, k)`` may be given (unit columns); otherwise k fresh ones are drawn.
    """
    x_s, x_t = _truncate(x_s, x_t)
    u = directions if directions is not None else random_directions(
        x_s.shape[1], k, generator=generator, device=x_s.device, dtype=x_s.dtype)
    return sliced_wasserstein_projected(x_s @ u, x_t @ u, q)


def gaussian_projection_release(x: torch.Tensor, u: torch.Tensor, sigma: float, *,
                                generator: torch.Generator | None = None) -> torch.Tensor:
    """The Gaussian mechanism of DP-SWD: ``M(X) = X U + V``, ``V_ij ~ N(0, sigma^2)`` (Alg. 1).

    ``x: (n, d)``, ``u: (d, k)`` -> ``(n, k)``.
    """
    p = x @ u
    if sigma > 0:
        noise = torch.randn(p.shape, generator=generator, dtype=p.dtype, device=_draw_device(generator, p.device))
        p = p + sigma * _moved(noise, p.device)
    return p


def dp_sliced_wasserstein(x_s: torch.Tensor, x_t: torch.Tensor, sigma: float, k: int = 100, q: float = 2.0, *,
                          directions: torch.Tensor | None = None,
                          generator: torch.Generator | None = None) -> torch.Tensor:
    """DP-SWD (Algorithm 1): smoothed SW_q with independent noise on both projected sides.

    ``x_s: (n, d)`` public/generated (gradients flow through it), ``x_t: (m, d)`` private.
    ``P_t = X_t U + Z_t`` is the private release; ``P_s = X_s U + Z_s`` smooths the public side
    with independent noise of the same std.  With ``sigma = 0`` this is the plain SWD.
    """
    x_s, x_t = _truncate(x_s, x_t)
    u = directions if directions is not None else random_directions(
        x_s.shape[1], k, generator=generator, device=x_s.device, dtype=x_s.dtype)
    p_t = gaussian_projection_release(x_t.detach(), u, sigma, generator=generator)
    p_s = gaussian_projection_release(x_s, u, sigma, generator=generator)
    return sliced_wasserstein_projected(p_s, p_t, q)


def orthogonal_directions(d: int, k: int, *, generator: torch.Generator | None = None,
                          device: torch.device | str | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``U: (d, k)``: ``ceil(k/d)`` independent uniformly random orthonormal ``d x d`` blocks side by side,
    truncated to k columns (QR of Gaussian matrices, signs fixed by ``diag(R)``: Haar measure).

    Every column is a unit vector and, deterministically, ``||v U||^2 <= ceil(k/d) ||v||^2`` for every
    ``v`` (each full block preserves norms, the truncated one cannot increase them).
    """
    blocks = []
    for _ in range(math.ceil(k / d)):
        g = torch.randn(d, d, generator=generator, dtype=torch.float64, device=_draw_device(generator, device))
        q, r = torch.linalg.qr(g)
        blocks.append(q * torch.sign(torch.diagonal(r))[None, :])
    return _moved(torch.cat(blocks, dim=1)[:, :k].to(dtype), device)


def sliced_wasserstein_blocks(p_s: torch.Tensor, p_t: torch.Tensor, n_blocks: int, q: float = 2.0) -> torch.Tensor:
    """Class-partitioned SW_q from projections ``p_s, p_t: (C m, k)`` stacked as C blocks of m rows.

    ``(mean_{c, i, j} |sort_i(p_t^c)[i, j] - sort_i(p_s^c)[i, j]|^q)^{1/q}``: 1-D transport within each
    block only (block c of the generated side carries label c), i.e. ``(mean_c SW_q^q(block_c))^{1/q}``.
    """
    return (sliced_cost_blocks(p_s, p_t, n_blocks, q) / p_s.numel()).pow(1.0 / q)


def sliced_cost_blocks(p_s: torch.Tensor, p_t: torch.Tensor, n_blocks: int, q: float = 2.0) -> torch.Tensor:
    """``sum_{c, i, j} |sort_i(p_t^c)[i, j] - sort_i(p_s^c)[i, j]|^q`` over C blocks of m rows: the sum that
    :func:`sliced_wasserstein_blocks` averages.  Sums over disjoint sets of whole blocks add up to the whole
    batch's (several processes: each rank's blocks, :meth:`dpgen.methods.parallel.ParallelOptimizer.backward_of_sum`)."""
    if p_s.shape != p_t.shape or p_s.shape[0] % n_blocks:
        raise ValueError(f"projections must have the same shape (C m, k) with C = {n_blocks}, got "
                         f"{tuple(p_s.shape)} and {tuple(p_t.shape)}")
    s = torch.sort(p_s.reshape(n_blocks, -1, p_s.shape[1]), dim=1)[0]
    t = torch.sort(p_t.reshape(n_blocks, -1, p_t.shape[1]), dim=1)[0]
    return (s - t).abs().pow(q).sum()
