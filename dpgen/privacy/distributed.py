"""The collective operations a private release needs when one run spans several processes.

A run launched by ``torchrun`` (``torch.distributed``; gloo on CPU, NCCL on GPU) is ONE run of the
single-process algorithm: the same global batch, the same released tensors, the same ledger.  This
module holds the few collective steps the sampler and the mechanisms use for that; with one process
(no process group) every function is the identity, so the single-process path is unchanged.

* :func:`shard` — the sampler draws the global batch from a generator that is the same on every
  rank (its seed comes from rank 0) and each rank keeps one contiguous part of it: the parts are
  disjoint and their union, in rank order, is the single-process batch;
* :func:`all_reduce_sum` then :func:`broadcast` — a released SUM of clipped contributions is summed
  over the ranks un-noised (inside the process group, the run's trust boundary), noised ONCE on rank
  0 from the mechanism's generator and broadcast, so the released tensor and its noise are exactly
  the single-process ones;
* :func:`all_gather_rows` — per-record rows (a projection release) are gathered so that every rank
  holds the whole released batch, in rank order;
* :func:`shared_secret` / :func:`broadcast_object` — seeds and decisions (calibrated noise, the
  budget stop) are rank 0's, so every rank draws the same public randomness and stops at the same step.

Everything here is a pure wrapper of ``torch.distributed``; nothing is written or logged.
"""

from __future__ import annotations

import secrets
from typing import Any

import torch
import torch.distributed as dist


def active() -> bool:
    """True when this process is one of several in an initialised process group."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    return dist.get_world_size() if active() else 1


def rank() -> int:
    return dist.get_rank() if active() else 0


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes and owns the ledger."""
    return rank() == 0


def _comm_device(t: torch.Tensor) -> torch.device:
    """Where a collective on ``t`` runs: NCCL needs CUDA tensors, gloo takes CPU ones."""
    if t.device.type == "cuda" or dist.get_backend() == "gloo":
        return t.device
    return torch.device("cuda", torch.cuda.current_device())


def broadcast(t: torch.Tensor, src: int = 0) -> torch.Tensor:
    """``t`` as rank ``src`` holds it, on every rank (a new tensor on ``t``'s device)."""
    if not active():
        return t
    buf = t.detach().contiguous().to(_comm_device(t))
    dist.broadcast(buf, src=src)
    return buf.to(t.device)


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over the ranks, on every rank."""
    if not active():
        return t
    buf = t.detach().contiguous().to(_comm_device(t))
    dist.all_reduce(buf, op=dist.ReduceOp.SUM)
    return buf.to(t.device)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """A picklable object as rank ``src`` holds it, on every rank."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def shared_secret(bits: int = 63) -> int:
    """A secret random integer (OS entropy) drawn on rank 0 and shared by every rank: the seeds of
    generators that must draw the same numbers on every rank (the sampler, directions, noise)."""
    return int(broadcast_object(secrets.randbits(bits) if is_main() else None))


def shard_bounds(n: int) -> tuple[int, int]:
    """``[lo, hi)``: this rank's contiguous part of ``n`` items (parts differ in size by at most one)."""
    w, r = world_size(), rank()
    base, extra = divmod(n, w)
    lo = r * base + min(r, extra)
    return lo, lo + base + (1 if r < extra else 0)


def shard(items: torch.Tensor) -> torch.Tensor:
    """This rank's contiguous part of ``items`` (dim 0): disjoint over the ranks, union = ``items`` in rank order."""
    lo, hi = shard_bounds(items.shape[0])
    return items[lo:hi]


def all_gather_rows(t: torch.Tensor) -> torch.Tensor:
    """Concatenation over the ranks (in rank order) of each rank's ``t: (b_r, ...)``; the ``b_r`` may differ."""
    if not active():
        return t
    dev = _comm_device(t)
    size = torch.tensor([t.shape[0]], dtype=torch.long, device=dev)
    sizes = [torch.zeros_like(size) for _ in range(world_size())]
    dist.all_gather(sizes, size)
    counts = [int(s.item()) for s in sizes]
    most = max(counts)
    buf = torch.zeros((most, *t.shape[1:]), dtype=t.dtype, device=dev)
    buf[:t.shape[0]] = t.detach().to(dev)
    parts = [torch.empty_like(buf) for _ in counts]
    dist.all_gather(parts, buf)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(t.device)


def barrier() -> None:
    if active():
        dist.barrier()
