"""One run on several processes: the process group and the few collectives a private release needs.

``torchrun --nproc-per-node N train.py ...`` (or ``dpgen train --nproc N ...``, :mod:`dpgen.utils.launch`)
starts N copies of the run with ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` / ``MASTER_PORT``
set; submitit's ``TorchDistributedEnvironment`` sets the same variables on a cluster.  :func:`init_from_env`
joins that group (gloo for CPU tensors, NCCL for CUDA ones when every process has a GPU) and pins each
process to the GPU of its ``LOCAL_RANK``.  Without those variables (or with ``WORLD_SIZE=1``) nothing happens,
every function below is the identity, and the run is the single-process run.

A run on N processes is ONE run of the single-process algorithm: the same global batch, the same released
tensors, the same ledger.  The collectives that keep it so:

* :func:`shard` — the sampler draws the global batch from a generator that is the same on every rank (its
  seed comes from rank 0) and each rank keeps one contiguous part of it: the parts are disjoint and their
  union, in rank order, is the single-process batch;
* :func:`all_reduce_sum` then :func:`broadcast` — a released SUM of clipped contributions is summed over
  the ranks un-noised (inside the process group, the run's trust boundary), noised ONCE on rank 0 from
  the mechanism's generator and broadcast, so the released tensor and its noise are the single-process ones;
* :func:`all_gather_rows` — per-record rows (a projection release) are gathered so that every rank holds
  the whole released batch, in rank order;
* :func:`shared_secret` / :func:`broadcast_object` — seeds and decisions (calibrated noise, the budget
  stop) are rank 0's, so every rank draws the same public randomness and stops at the same step.

:func:`active` is the one "is this one of several processes?" check and :func:`rank` the one way to ask
for this process's rank.  A rank that dies ends the run: torchrun stops the other ranks at once; a rank
that hangs makes the others' next collective fail after ``DPGEN_DIST_TIMEOUT`` seconds (default 600),
which ends them too (:func:`peer_failure` words it).  Nothing here is written or logged.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as tdist

TIMEOUT_ENV = "DPGEN_DIST_TIMEOUT"


# ---------------------------------------------------------------------------- the process group
def requested() -> bool:
    """True when a launcher (torchrun, submitit) started this process as one of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def active() -> bool:
    """True when this process is one of several in an initialised process group."""
    return tdist.is_available() and tdist.is_initialized() and tdist.get_world_size() > 1


def world_size() -> int:
    return tdist.get_world_size() if active() else 1


def rank() -> int:
    """This process's rank: the group's once joined, the launcher's ``RANK`` before (and after leaving
    it), 0 for a single process."""
    if active():
        return tdist.get_rank()
    return int(os.environ.get("RANK", "0")) if requested() else 0


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes and owns the ledger."""
    return rank() == 0


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_world_size() -> int:
    """How many processes of this run share this node."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV, "600"))


def init_from_env() -> bool:
    """Join the launcher's process group (once); True when this process is one of several."""
    if active() or not requested():
        return active()
    backend = "gloo"
    if gpu_per_process():  # NCCL wants one GPU per process: with fewer GPUs than processes, gloo alone
        torch.cuda.set_device(local_rank())
        backend = "cpu:gloo,cuda:nccl"
    tdist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s()))
    return True


def gpu_per_process() -> bool:
    """True when every process of this node can have a GPU of its own (``LOCAL_WORLD_SIZE`` <= GPUs)."""
    return torch.cuda.is_available() and local_world_size() <= torch.cuda.device_count()


def device_of_rank(device: torch.device) -> torch.device:
    """``cuda`` -> this process's GPU (``LOCAL_RANK``) when several processes share a node."""
    if device.type == "cuda" and device.index is None and active():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def too_few_gpus(device: torch.device) -> str | None:
    """Why ``device`` cannot run on this node's processes (fewer GPUs than processes: NCCL wants one
    each; ``trainer.device=cpu`` then runs, on gloo), or None."""
    if device.type != "cuda" or not active() or gpu_per_process():
        return None
    n, k = local_world_size(), torch.cuda.device_count()
    return (f"trainer.device=cuda on {n} processes per node needs a GPU for each, and {k} "
            f"{'is' if k == 1 else 'are'} visible: use --nproc {k} (torchrun --nproc-per-node), or trainer.device=cpu")


def shutdown() -> None:
    """Leave the process group (the end of a run)."""
    if active():
        tdist.destroy_process_group()


def peer_failure(err: BaseException) -> str | None:
    """The one-line message when a collective failed because another process of the run died or hung
    (its connection closed, or no answer within ``DPGEN_DIST_TIMEOUT``); None for anything else."""
    if not active() or not isinstance(err, RuntimeError):
        return None
    text = str(err)
    if not isinstance(err, tdist.DistError) and not any(s in text for s in ("gloo", "Gloo", "NCCL", "Timed out",
                                                                             "Connection closed", "Connection reset")):
        return None
    reason = "did not answer within DPGEN_DIST_TIMEOUT" if "imed out" in text or "imeout" in text else "stopped"
    return (f"another process of this {world_size()}-process run {reason}, so the run ended; its folder keeps "
            "the last checkpoint: resume it with the same command plus hydra.run.dir=<run folder> trainer.resume=true "
            "(on any number of processes)")


# ---------------------------------------------------------------------------- collectives
def _comm_device(t: torch.Tensor) -> torch.device:
    """Where a collective on ``t`` runs: NCCL needs CUDA tensors, gloo takes CPU ones."""
    if t.device.type == "cuda" or tdist.get_backend() == "gloo":
        return t.device
    return torch.device("cuda", torch.cuda.current_device())


def broadcast(t: torch.Tensor, src: int = 0) -> torch.Tensor:
    """``t`` as rank ``src`` holds it, on every rank (a new tensor on ``t``'s device)."""
    if not active():
        return t
    buf = t.detach().contiguous().to(_comm_device(t))
    tdist.broadcast(buf, src=src)
    return buf.to(t.device)


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """The sum of ``t`` over the ranks, on every rank."""
    if not active():
        return t
    buf = t.detach().contiguous().to(_comm_device(t))
    tdist.all_reduce(buf, op=tdist.ReduceOp.SUM)
    return buf.to(t.device)


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """A picklable object as rank ``src`` holds it, on every rank."""
    if not active():
        return obj
    box = [obj]
    tdist.broadcast_object_list(box, src=src)
    return box[0]


def shared_secret(bits: int = 63) -> int:
    """A secret random integer (OS entropy) drawn on rank 0 and shared by every rank: the seeds of
    generators that must draw the same numbers on every rank (the sampler, directions, noise)."""
    return int(broadcast_object(secrets.randbits(bits) if is_main() else None))


def shard_bounds(n: int) -> tuple[int, int]:
    """``[lo, hi)``: this rank's contiguous part of ``n`` items (parts differ in size by at most one)."""
    w = world_size()
    r = rank() if w > 1 else 0
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
    tdist.all_gather(sizes, size)
    counts = [int(s.item()) for s in sizes]
    most = max(counts)
    buf = torch.zeros((most, *t.shape[1:]), dtype=t.dtype, device=dev)
    buf[:t.shape[0]] = t.detach().to(dev)
    parts = [torch.empty_like(buf) for _ in counts]
    tdist.all_gather(parts, buf)
    return torch.cat([p[:c] for p, c in zip(parts, counts, strict=True)]).to(t.device)


def barrier() -> None:
    if active():
        tdist.barrier()
