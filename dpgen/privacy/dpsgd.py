"""DP-SGD's private gradient (Abadi et al. 2016, Algorithm 1) as small pure functions.

Shared by every method whose privacy boundary is per-sample clipped gradients (DP-DANN, the DP-SGD
classifier of the WDP experiments).  Per-sample gradients come from ``torch.func`` (``vmap`` over
``grad`` of a one-sample loss), so no model wrapping is needed; models must not mix samples inside a
batch (no BatchNorm in training mode: use GroupNorm/LayerNorm or none).

One step on a Poisson batch B_t (rate q, expected size q N), the accountant's assumption:

    g_i      = grad_theta L(theta; x_i)                           per-sample gradient   (line 5)
    g~_i     = g_i / max(1, ||g_i||_2 / C)                         clip to norm C         (line 6)
    g~       = (sum_i g~_i + N(0, sigma^2 C^2 I)) / (q N)          noise, average         (line 7)

Neighbouring relation and sensitivity (``accountant.sampling``):

* ``poisson`` (add/remove one record): the clipped sum changes by at most C in L2, so the release
  is the subsampled Gaussian mechanism with noise multiplier ``sigma`` (std / sensitivity).
* ``without_replacement`` (replace one record, fixed batch size B): the clipped sum changes by
  ``||g~_x - g~_x'|| <= 2C``, so noise of std ``sigma C`` is a Gaussian mechanism with multiplier
  ``sigma / 2``: the ledger records (and calibration targets) ``sigma / 2``.

:func:`accounted_multiplier` / :func:`noise_multiplier_for` convert between the two.  Dividing by
the *public* expected batch size q N (not the realised, private size) keeps it post-processing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.func import functional_call, grad, vmap

Grads = dict[str, torch.Tensor]


def sensitivity_in_clip_norms(sampling: str) -> float:
    """L2 sensitivity of the clipped sum ``sum_i g~_i`` in units of C under the relation of ``sampling``:
    1 for ``poisson`` (add/remove one record), 2 for ``without_replacement`` (replace one record)."""
    if sampling == "poisson":
        return 1.0
    if sampling == "without_replacement":
        return 2.0
    raise ValueError(f"accountant.sampling={sampling!r} is unknown; choose poisson or without_replacement")


def accounted_multiplier(noise_multiplier: float, sampling: str) -> float:
    """Multiplier the accountant must record for noise std ``noise_multiplier * C`` on the clipped sum:
    std / sensitivity = ``noise_multiplier / sensitivity_in_clip_norms(sampling)``."""
    return float(noise_multiplier) / sensitivity_in_clip_norms(sampling)


def noise_multiplier_for(accounted: float, sampling: str) -> float:
    """Inverse of :func:`accounted_multiplier`: noise std in units of C that gives the accounted multiplier."""
    return float(accounted) * sensitivity_in_clip_norms(sampling)


def per_sample_grads(model: torch.nn.Module, loss_one: Callable[..., torch.Tensor], *batch: torch.Tensor,
                     params: Grads | None = None) -> Grads:
    """Per-sample gradients ``{name: (b, *param.shape)}`` of ``loss_one`` over ``batch``.

    ``loss_one(output_fn, *sample)`` receives ``output_fn(*inputs)`` (the model applied with the
    functional parameters to a batch of *one*) and the tensors of a single sample (no batch dim), and
    returns a scalar.  Only trainable parameters (``requires_grad``) get gradients.
    """
    if params is None:
        params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def one(p: Grads, *sample: torch.Tensor) -> torch.Tensor:
        def output_fn(*inputs: torch.Tensor) -> torch.Tensor:
            return functional_call(model, (p, buffers), tuple(t.unsqueeze(0) for t in inputs))

        return loss_one(output_fn, *sample)

    in_dims = (None,) + (0,) * len(batch)
    return vmap(grad(one), in_dims=in_dims, randomness="different")(params, *batch)


def per_sample_norms(grads: Grads) -> torch.Tensor:
    """``(b,)``: the L2 norm of each sample's whole gradient (all parameters together)."""
    flat = [g.flatten(1) for g in grads.values()]
    return torch.cat(flat, dim=1).norm(dim=1)


def clip_per_sample(grads: Grads, max_norm: float) -> tuple[Grads, torch.Tensor]:
    """Scale each sample's gradient to norm <= ``max_norm`` (line 6).  Returns (clipped, norms before)."""
    if not max_norm > 0:
        raise ValueError(f"clipping norm C must be > 0, got {max_norm}")
    norms = per_sample_norms(grads)
    scale = (max_norm / norms.clamp_min(1e-12)).clamp(max=1.0)
    clipped = {k: g * scale.view(-1, *([1] * (g.dim() - 1))) for k, g in grads.items()}
    return clipped, norms


def noisy_mean(clipped: Grads, max_norm: float, noise_multiplier: float, expected_batch_size: float,
               generator: torch.Generator | None = None) -> Grads:
    """``(sum_i g~_i + N(0, (sigma C)^2 I)) / (q N)`` for every parameter (line 7).

    The noise is drawn on the gradients' device from ``generator`` (a secret, OS-seeded generator in
    training; seeded only in tests).
    """
    if expected_batch_size <= 0:
        raise ValueError(f"expected batch size q*N must be > 0, got {expected_batch_size}")
    out: Grads = {}
    for k, g in clipped.items():
        s = g.sum(dim=0)
        if noise_multiplier > 0:
            z = torch.randn(s.shape, generator=generator, device="cpu" if generator is not None else s.device,
                            dtype=s.dtype).to(s.device)
            s = s + (noise_multiplier * max_norm) * z
        out[k] = s / expected_batch_size
    return out


def private_gradient(grads: Grads, max_norm: float, noise_multiplier: float, expected_batch_size: float,
                     generator: torch.Generator | None = None) -> tuple[Grads, torch.Tensor]:
    """Lines 6-7 together: clip each sample to ``max_norm``, sum, add noise, divide by ``q N``.

    Returns the private gradient and the per-sample norms before clipping (for diagnostics only: do
    not log them per sample).
    """
    clipped, norms = clip_per_sample(grads, max_norm)
    return noisy_mean(clipped, max_norm, noise_multiplier, expected_batch_size, generator), norms


def assign_grads(model: torch.nn.Module, grads: Grads, accumulate: bool = False) -> None:
    """Write ``grads`` into ``param.grad`` (add to it when ``accumulate``) so a torch optimiser steps."""
    named = dict(model.named_parameters())
    for k, g in grads.items():
        p = named[k]
        g = g.to(p.dtype)
        if accumulate and p.grad is not None:
            p.grad = p.grad + g
        else:
            p.grad = g.clone()
