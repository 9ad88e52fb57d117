"""One run on several processes: the process group and its transport.

``torchrun --nproc-per-node N train.py ...`` (or ``dpgen train --nproc N ...``, :mod:`dpgen.utils.launch`)
starts N copies of the run with ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` / ``MASTER_PORT``
set; submitit's ``TorchDistributedEnvironment`` sets the same variables on a cluster.  :func:`init_from_env`
joins that group (gloo for CPU tensors, NCCL for CUDA ones when every process has a GPU) and pins each
process to the GPU of its ``LOCAL_RANK``.  Without those variables (or with ``WORLD_SIZE=1``) nothing happens,
every function below is the identity, and the run is the single-process run.

A run on N processes is ONE run of the single-process algorithm: the same global batch, the same released
tensors, the same ledger.  This module only carries tensors and objects between the processes; how a step is
shared out (which rows a rank generates, the differentiable gather, BatchNorm over the whole batch, the one
gradient all-reduce) is :mod:`dpgen.methods.parallel`'s, and how a release is reduced is its mechanism's:

* :func:`shard` / :func:`shard_bounds` / :func:`block_bounds` — which contiguous part of ``n`` items (or whole
  blocks) is this rank's: the sampler draws the global batch from a generator that is the same on every rank
  (its seed comes from rank 0) and each rank keeps its part; the parts are disjoint and their union, in rank
  order, is the single-process batch;
* :func:`all_reduce_sum` then :func:`broadcast` — a released SUM of clipped contributions is summed over
  the ranks un-noised (inside the process group, the run's trust boundary), noised ONCE on rank 0 from
  the mechanism's generator and broadcast, so the released tensor and its noise are the single-process ones;
* :func:`all_gather_rows` / :func:`gather_shards` — per-record rows (a projection release) are gathered so
  that every rank holds the whole released batch, in rank order;
* :func:`shared_secret` / :func:`broadcast_object` — seeds and decisions (calibrated noise, the budget
  stop) are rank 0's, so every rank draws the same public randomness and stops at the same step.

:func:`active` is the one "is this one of several processes?" check and :func:`rank` the one way to ask
for this process's rank.  A rank that dies ends the run: torchrun stops the other ranks at once; a rank
that hangs makes the others' next collective fail after ``DPGEN_DIST_TIMEOUT`` seconds (default 600),
which ends them too (:func:`peer_failure` words it).  Nothing here is written or logged."""

from __future__ import annotations

import os
import secrets
import sys
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


def processes(resumed_from: int | None = None) -> dict:
    """How the run is spread (results.json and the privacy card): the number of processes, the backend, and
    the number of processes of the checkpoint it resumed from when that differs."""
    w = world_size()
    out = {"world_size": w, "backend": tdist.get_backend() if active() else None}
    return {**out, "resumed_from_world_size": resumed_from} if resumed_from is not None and resumed_from != w else out


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_world_size() -> int:
    """How many processes of this run share this node."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV, "600"))


_JOINS = [0]  # how many times this process has joined a group (the jobs of a sweep each join once)


def init_from_env() -> bool:
    """Join the launcher's process group (once per run); True when this process is one of several.

    The jobs of a sweep (``-m``) run one after the other in the same processes, each joining a new group
    after the last one left it: each join keys its exchange of addresses under its own prefix of the
    launcher's store (the same on every rank: every rank joins once per job), so a later job never reads the
    addresses of an earlier one.  The process also asks to be stopped (SIGTERM) when its launcher dies."""
    if active() or not requested():
        return active()
    die_with_parent()
    backend = "gloo"
    if gpu_per_process():  # NCCL wants one GPU per process: with fewer GPUs than processes, gloo alone
        torch.cuda.set_device(local_rank())
        backend = "cpu:gloo,cuda:nccl"
    timeout = timedelta(seconds=timeout_s())
    store, rank_, size = next(tdist.rendezvous("env://", timeout=timeout))
    _JOINS[0] += 1
    tdist.init_process_group(backend=backend, store=tdist.PrefixStore(f"dpgen-run-{_JOINS[0]}", store), rank=rank_,
                             world_size=size, timeout=timeout)
    return True


def die_with_parent() -> None:
    """Linux: ask the kernel to send this process SIGTERM when its parent (torchrun's agent, ``dpgen train
    --nproc``) dies, even by SIGKILL (``prctl(PR_SET_PDEATHSIG)``): a rank never outlives its launcher holding
    the run folder.  SIGTERM ends the run as a stop does (the checkpoint is kept).  Elsewhere: nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if parent == 1 or os.getppid() != parent:  # the launcher died before the request: stop now, as the kernel would
        os.kill(os.getpid(), signal.SIGTERM)


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
    return f"another process of this {world_size()}-process run {reason}, so the run ended; {RESUME_ADVICE}"


# what to do after a run of several processes ended early (its folder may not hold a checkpoint yet)
RESUME_ADVICE = ("if its folder holds a checkpoint (checkpoints/last.pt), resume it with the same command plus "
                 "hydra.run.dir=<run folder> trainer.resume=true (on any number of processes); if not, run the same "
                 "command again")


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


def shard_sizes(n: int) -> list[int]:
    """The size of every rank's part of ``n`` items (:func:`shard_bounds`): public, known on every rank."""
    w = world_size()
    base, extra = divmod(n, w)
    return [base + (1 if r < extra else 0) for r in range(w)]


def all_gather_parts(part: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Concatenation over the ranks (in rank order) of each rank's ``part``, whose row counts ``sizes`` are known on
    every rank (public): ONE all-gather of buffers padded to the largest part.  Not differentiable (the split's
    differentiable gather is :meth:`dpgen.methods.parallel.Share.gather`)."""
    if not active():
        return part
    dev, most = _comm_device(part), max(sizes)
    buf = part.new_zeros((most, *part.shape[1:]), device=dev)
    buf[:part.shape[0]] = part.detach().to(dev)
    parts = [torch.empty_like(buf) for _ in sizes]
    tdist.all_gather(parts, buf)
    return torch.cat([p[:c] for p, c in zip(parts, sizes, strict=True)]).to(part.device)


def gather_shards(part: torch.Tensor, n: int) -> torch.Tensor:
    """The ``(n, ...)`` tensor whose rows ``shard_bounds(n)`` are ``part`` on each rank, on every rank: ONE
    all-gather (the sizes are public).  One process: ``part`` itself."""
    if not active():
        return part
    lo, hi = shard_bounds(n)
    if part.shape[0] != hi - lo:
        raise ValueError(f"this rank's part has {part.shape[0]} rows, not its share of {n}")
    return all_gather_parts(part, shard_sizes(n))


def block_bounds(n_blocks: int, block_rows: int) -> tuple[int, int] | None:
    """``[lo, hi)``: the rows of this rank's whole blocks when ``n_blocks`` blocks of ``block_rows`` rows are
    shared out as :func:`shard_bounds` shares items (at least one block per rank); None when the blocks are
    fewer than the ranks.  One process: every row."""
    if world_size() > n_blocks:
        return None
    lo, hi = shard_bounds(n_blocks)
    return lo * block_rows, hi * block_rows


def barrier() -> None:
    if active():
        tdist.barrier()
