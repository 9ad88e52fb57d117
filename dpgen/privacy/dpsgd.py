"""DP-SGD's private gradient (Abadi et al. 2016, Algorithm 1) as small pure functions.

Shared by every method whose privacy boundary is per-sample clipped gradients (DP-DANN, the DP-SGD
classifier of the WDP experiments).  Per-sample gradients come from ``torch.func`` (``vmap`` over
``grad`` of a one-sample loss), so no model wrapping is needed; models must not mix samples inside a
batch (no BatchNorm in training mode: use GroupNorm/LayerNorm or none).

One step on a Poisson batch B_t (rate q, expected size q N), the accountant's assumption:

    g_i      = grad_theta L(theta; x_i)                           per-sample gradient   (line 5)
    g~_i     = g_i / max(1, ||g_i||_2 / C)                         clip to norm C         (line 6)
    g~       = (sum_i g~_i + N(0, sigma^2 C^2 I)) / (q N)          noise, average         (line 7)

The noise (line 7) is added by the mechanism ``privacy.mechanisms.NoisyGradientSum``, which clips
with :func:`clip_per_sample`, sums, adds N(0, s^2) from its own generator and records the release:
sensitivity C under add/remove (Poisson), 2C under replace-one (sampling without replacement).
Dividing by the *public* expected batch size q N (not the realised, private size) keeps it
post-processing.  This module holds the pure functions only.

On a GPU the step neither reads the device nor waits for a copy:

* the batch's size is not read back.  A Poisson batch has a data-independent random size; the sampler
  draws it on the host (``K ~ Binomial(N, q)``) and then a uniform K-subset on the device
  (``privacy.sampler.poisson_indices``): exactly the Poisson distribution, so the accountant's
  assumption and the guarantee are unchanged, with no padding, no truncation and no overflow case to
  account for (a fixed-capacity batch with a validity mask would need one: a draw above the capacity is
  either dropped, which adds its probability to delta, or read back, which is the sync).  The shapes
  vary from step to step, which eager execution and vmap take as they come.
* the per-sample gradients of the whole batch come from one vmap (``model.microbatch=auto``,
  :func:`auto_microbatch`), so the kernels per step do not grow with the batch; on CPU, chunks of
  :data:`CPU_MICROBATCH` measured faster.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch.func import functional_call, grad, vmap

from ..utils.misc import on_gpu
from ..utils.threads import concurrent_jobs

Grads = dict[str, torch.Tensor]

# ``model.microbatch=auto`` off CUDA: per-sample gradients in chunks of 16 measured fastest on CPU for the vmap
# path (the mnist_dpsgd CNN at batch 1024, one thread; docs/benchmarks.md), where a whole-batch vmap is slower
CPU_MICROBATCH = 16
# ... and for the layer rules (privacy.per_sample, the ``unfold`` and ``ghost`` paths): chunks of 64 (same measurement)
CPU_UNFOLD_MICROBATCH = 64
# ``auto`` on CUDA: the share of the free device memory one chunk's per-sample gradients may take
AUTO_MEMORY_SHARE = 0.5


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


def cpu_microbatch(rule: str) -> int:
    """``model.microbatch=auto`` off CUDA for a per-sample path (``vmap``, ``unfold`` or ``ghost``)."""
    return CPU_MICROBATCH if rule == "vmap" else CPU_UNFOLD_MICROBATCH


def auto_microbatch(model: torch.nn.Module, loss_one: Callable[..., torch.Tensor], sample_shape: tuple[int, ...],
                    device: torch.device, capacity: int, probe: int = 8, cpu_chunk: int = CPU_MICROBATCH) -> int:
    """``model.microbatch=auto``: the chunk size of the per-sample gradients.

    Off CUDA: ``cpu_chunk`` (:func:`cpu_microbatch` of the run's path).  The memory of one row is measured with
    the vmap path, the larger of the two (the layer rules keep one ``(b, D)`` buffer and the activations).  On CUDA: the largest chunk whose per-sample gradients fit
    :data:`AUTO_MEMORY_SHARE` of the free device memory, at most ``capacity`` (a batch that fits is one
    vmap); the memory of one sample is measured once on a probe of ``probe`` all-zero inputs with label 0
    (public constants: no private record is read, nothing is released); the runs of a joblib sweep share the
    free memory (:func:`chunk_that_fits`).  Runs once, in setup."""
    if not on_gpu(device):
        return min(int(cpu_chunk), max(1, int(capacity)))
    x = torch.zeros((probe, *sample_shape), device=device)
    y = torch.zeros(probe, dtype=torch.long, device=device)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    grads = per_sample_grads(model, loss_one, x, y)
    per_sample_norms(grads)
    torch.cuda.synchronize(device)
    per_row = max(1, (torch.cuda.max_memory_allocated(device) - base) // probe)
    del grads
    free, _ = torch.cuda.mem_get_info(device)
    return chunk_that_fits(free, per_row, capacity, concurrent_jobs())


def chunk_that_fits(free_bytes: int, bytes_per_row: int, capacity: int, jobs: int = 1) -> int:
    """The largest chunk whose rows take at most :data:`AUTO_MEMORY_SHARE` of ``free_bytes`` split between the
    ``jobs`` runs that share the device (a joblib sweep on one GPU), between 1 and ``capacity``."""
    share = AUTO_MEMORY_SHARE * free_bytes / max(1, jobs)
    return max(1, min(int(capacity), int(share // max(1, bytes_per_row))))


def poisson_capacity(n: int, q: float, sds: float = 6.0) -> int:
    """An upper size for chunking a Poisson(q) batch of ``n`` records: ``q n + sds·sqrt(q n (1 − q))``
    rounded up (a larger draw is simply split in two chunks: this is memory sizing, not a truncation)."""
    return min(int(n), math.ceil(q * n + sds * math.sqrt(q * n * (1.0 - q))) + 1)


def per_sample_norms(grads: Grads) -> torch.Tensor:
    """``(b,)``: the L2 norm of each sample's whole gradient (all parameters together),
    ``||g_i|| = sqrt(sum_k ||g_i^k||^2)`` over the parameter tensors k (no concatenated copy)."""
    sq = [torch.linalg.vector_norm(g.flatten(1), dim=1).square() for g in grads.values()]
    return torch.stack(sq).sum(0).sqrt()


def clip_scale(norms: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``(b,) -> (b,)``: ``min(1, C / ||g_i||)``, the factor that puts sample i's gradient in the C-ball."""
    if not max_norm > 0:
        raise ValueError(f"clipping norm C must be > 0, got {max_norm}")
    return (max_norm / norms.clamp_min(1e-12)).clamp(max=1.0)


def clip_per_sample(grads: Grads, max_norm: float) -> tuple[Grads, torch.Tensor]:
    """Scale each sample's gradient to norm <= ``max_norm`` (line 6).  Returns (clipped, norms before)."""
    norms = per_sample_norms(grads)
    scale = clip_scale(norms, max_norm)
    clipped = {k: g * scale.view(-1, *([1] * (g.dim() - 1))) for k, g in grads.items()}
    return clipped, norms


def clipped_sum(grads: Grads, max_norm: float) -> tuple[Grads, torch.Tensor]:
    """``sum_i g_i * min(1, C / ||g_i||)`` per parameter (lines 6-7 before the noise), without
    materialising the clipped per-sample tensors: one weighted sum (``tensordot`` of the ``(b,)``
    scales with ``(b, *shape)``) per parameter.  Same maths as summing :func:`clip_per_sample`'s output
    (float rounding aside; ``tests/privacy/test_dpsgd.py`` checks it).  Returns (sums ``{name: shape}``, norms)."""
    norms = per_sample_norms(grads)
    scale = clip_scale(norms, max_norm)
    return {k: torch.tensordot(scale.to(g.dtype), g, dims=1) for k, g in grads.items()}, norms


def assign_grads(model: torch.nn.Module, grads: Grads, accumulate: bool = False, owned: bool = False) -> None:
    """Write ``grads`` into ``param.grad`` (add to it when ``accumulate``) so a torch optimiser steps.
    ``owned``: the caller hands the tensors over (a fresh release nobody else writes): no copy is made."""
    named = dict(model.named_parameters())
    for k, g in grads.items():
        p = named[k]
        g = g.to(p.dtype)
        if accumulate and p.grad is not None:
            p.grad = p.grad + g
        else:
            p.grad = g if owned else g.clone()
