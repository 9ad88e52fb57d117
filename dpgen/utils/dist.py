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
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


class _GatherShards(torch.autograd.Function):
    """All-gather of the ranks' parts (:func:`shard`) of an ``n``-row tensor; the backward pass keeps
    this rank's rows of the gradient.

    Every rank computes the same function of the gathered tensor (the loss), so the gradient w.r.t. the
    gathered tensor is the same on every rank and this rank's rows of it are exactly the single-process
    gradient w.r.t. its own rows: nothing needs to cross the processes on the way back (a reduce-scatter,
    as ``torch.distributed.nn.functional.all_gather`` does, would sum W equal copies).  The parameters'
    gradients are then partial sums, added over the ranks by :func:`sum_gradients`."""

    @staticmethod
    def forward(ctx, part: torch.Tensor, n: int) -> torch.Tensor:
        sizes = shard_sizes(n)
        ctx.lo, ctx.hi = shard_bounds(n)
        dev, most = _comm_device(part), max(sizes)
        buf = part.new_zeros((most, *part.shape[1:]), device=dev)
        buf[:part.shape[0]] = part.detach().to(dev)
        parts = [torch.empty_like(buf) for _ in sizes]
        tdist.all_gather(parts, buf)
        return torch.cat([p[:c] for p, c in zip(parts, sizes, strict=True)]).to(part.device)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[ctx.lo:ctx.hi], None


def gather_shards(part: torch.Tensor, n: int) -> torch.Tensor:
    """The ``(n, ...)`` tensor whose rows ``shard_bounds(n)`` are ``part`` on each rank, on every rank: ONE
    all-gather (the sizes are public).  Differentiable: gradients flow back only into this rank's ``part``
    (:class:`_GatherShards`).  One process: ``part`` itself."""
    if not active():
        return part
    lo, hi = shard_bounds(n)
    if part.shape[0] != hi - lo:
        raise ValueError(f"this rank's part has {part.shape[0]} rows, not its share of {n}")
    return _GatherShards.apply(part, n)


def backward_of_sum(part: torch.Tensor, outer: Callable[[torch.Tensor], torch.Tensor], params) -> torch.Tensor:
    """``outer(Σ_r part_r)`` of the ranks' scalar ``part``s, with its gradient w.r.t. ``params`` left in their
    ``.grad``, in ONE all-reduce: each rank back-propagates its own part, the parts travel with the parameter
    gradients (:func:`sum_gradients`), and the chain rule's scalar factor scales the sum:
    ``∇ outer(Σ_r part_r) = outer'(Σ_r part_r) · Σ_r ∇ part_r``.  One process: ``outer(part)`` and its gradient."""
    params = [p for p in params if p.requires_grad]
    part.backward()
    total = sum_gradients(params, also=part.detach().reshape(1))[0].clone().requires_grad_(True)
    with torch.enable_grad():
        value = outer(total)
    (scale,) = torch.autograd.grad(value, total)
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        torch._foreach_mul_(grads, scale)  # one multi-tensor kernel on a GPU
    return value.detach()


def block_bounds(n_blocks: int, block_rows: int) -> tuple[int, int] | None:
    """``[lo, hi)``: the rows of this rank's whole blocks when ``n_blocks`` blocks of ``block_rows`` rows are
    shared out as :func:`shard_bounds` shares items (at least one block per rank); None when the blocks are
    fewer than the ranks.  One process: every row."""
    if world_size() > n_blocks:
        return None
    lo, hi = shard_bounds(n_blocks)
    return lo * block_rows, hi * block_rows


def generated_rows(G: torch.nn.Module, z: torch.Tensor, y: torch.Tensor | None, lo: int, hi: int,
                   forward=None) -> torch.Tensor:
    """Rows ``lo..hi`` of ``G(z, y)``, where ``z, y`` are the whole batch (the same on every rank).

    A generator whose layers that mix rows (BatchNorm) all sit in a cheap ``head`` (``G(z, y) =
    G.tail(G.head(z, y))``, the tail row-wise) runs the head on the whole batch on every rank and the costly
    tail on these rows only: no collective, and the rows equal the single-process ones.  Any other generator
    runs on these rows, its BatchNorm layers normalising over the whole batch (:func:`whole_batch_norm`: one
    all-reduce per layer, forward and backward).  One process: ``forward(z, y)`` (``forward``: G's compiled
    view, else G)."""
    if not active():
        return (G if forward is None else forward)(z, y)
    if _has_head(G):
        return G.tail(G.head(z, y)[lo:hi])
    return (G if forward is None else forward)(z[lo:hi], None if y is None else y[lo:hi])


def _has_head(module: torch.nn.Module) -> bool:
    return callable(getattr(module, "head", None)) and callable(getattr(module, "tail", None))


def sum_gradients(params, also: torch.Tensor | None = None) -> torch.Tensor | None:
    """Add the ``.grad`` of ``params`` over the ranks in place, in ONE all-reduce of one flat buffer (a
    single bucket): each rank's gradient is the part from its own samples, the sum is the whole batch's.
    ``also``: a flat tensor added over the ranks in the same all-reduce, returned summed.  One process: the
    gradients as they are, and ``also``."""
    if not active():
        return also
    params = [p for p in params if p.requires_grad]
    for p in params:  # the same buffer layout on every rank, whichever parameters this rank's samples reached
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    extra = [] if also is None else [also.reshape(-1).to(grads[0].dtype if grads else also.dtype)]
    if not grads and not extra:
        return also
    flat = all_reduce_sum(torch.cat([g.reshape(-1) for g in grads] + extra))
    chunks = flat.split([g.numel() for g in grads] + [e.numel() for e in extra])
    for g, chunk in zip(grads, chunks[:len(grads)], strict=True):
        g.copy_(chunk.view_as(g))
    return None if also is None else chunks[-1].view_as(also).to(also.dtype)


@contextmanager
def own_rng(stream: int = 0) -> Iterator[None]:
    """Several processes: draws made inside (dropout masks of this rank's samples) come from a stream of this
    rank's own, and torch's global generators are back in their state on leaving, so every rank's next
    public draw (generator inputs, smoothing noise) is still the same as every other rank's: nothing is
    exchanged to keep the ranks in step.  The stream is seeded from the global state (the same on every
    rank) plus the rank: masks of the same law as one process's, not the same values.  One process: nothing
    changes (the draws are the global generator's, as always).  ``stream``: another stream of the same
    step (e.g. a second chunk of samples)."""
    if not active():
        yield
        return
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed((int(torch.randint(2**62, ())) + rank() + world_size() * stream) % 2**63)
        yield


def whole_batch_norm(module: torch.nn.Module) -> torch.nn.Module:
    """Several processes: every BatchNorm layer of ``module`` normalises (in training) by the statistics of the
    WHOLE batch, the ranks' parts together, as one process would (torch's ``SyncBatchNorm`` runs on GPUs only);
    its running statistics follow the whole batch too.  The layers keep their parameters and buffers (the same
    state dict); evaluation is unchanged.  One process, or a module with a ``head`` and a ``tail``
    (:func:`generated_rows` runs its BatchNorm layers on the whole batch on every rank): ``module`` as it is."""
    if active() and not _has_head(module):
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.forward = types.MethodType(_whole_batch_forward, m)
    return module


class _WholeBatchNorm(torch.autograd.Function):
    """BatchNorm of this rank's rows by the whole batch's ``mean`` and ``var`` (SyncBatchNorm's algorithm, on any
    device): the forward is one fused normalisation; the backward adds the two per-channel sums that the input
    gradient needs (``Σ dy`` and ``Σ dy·x̂`` over every rank's rows) in ONE all-reduce, so the gradient w.r.t. a
    rank's rows is the one-process gradient.  The weight and bias get this rank's partial sums, which the
    method's gradient all-reduce adds like every other parameter's."""

    @staticmethod
    def forward(ctx, x, weight, bias, mean, var, count, eps):
        ctx.save_for_backward(x, weight, mean, var)
        ctx.count, ctx.eps = count, eps
        return torch.nn.functional.batch_norm(x, mean, var, weight, bias, training=False, eps=eps)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, var = ctx.saved_tensors
        w = weight if weight is not None else torch.ones_like(mean)
        # fused, with the statistics as constants: dy·w·invstd, and this rank's Σ dy·x̂ and Σ dy per channel
        dy = dy.contiguous(memory_format=_layout(x))  # the input's layout (a mixed pair takes a slow kernel)
        dx, dw, db = torch.ops.aten.native_batch_norm_backward(dy, x, w, mean, var, None, None, False, ctx.eps,
                                                             [True, True, True])
        sums = all_reduce_sum(torch.cat([db, dw]).float())  # Σ dy, Σ dy·x̂ over the whole batch
        c = mean.numel()
        invstd = torch.rsqrt(var + ctx.eps)
        scale = w * invstd / ctx.count
        a = scale * invstd * sums[c:]                     # the part of the statistics' gradient that grows with x
        b = scale * (sums[:c] - mean * invstd * sums[c:])
        shape = [1, c] + [1] * (x.dim() - 2)
        dx = dx - torch.addcmul(b.view(shape).to(dx.dtype), x, a.view(shape).to(dx.dtype))
        return dx, (dw if weight is not None and ctx.needs_input_grad[1] else None), \
            (db if ctx.needs_input_grad[2] else None), None, None, None, None


def _layout(x: torch.Tensor) -> torch.memory_format:
    """``x``'s memory layout: channels-last (a convolution's output on a CPU) or contiguous."""
    if x.dim() == 4 and not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def _whole_batch_forward(bn: torch.nn.modules.batchnorm._BatchNorm, x: torch.Tensor) -> torch.Tensor:
    """BatchNorm in training by the statistics of every rank's rows: each rank's per-channel sums are added in
    ONE all-reduce, then :class:`_WholeBatchNorm` normalises and, on the way back, adds the statistics' gradient
    over the ranks."""
    if not bn.training:
        return type(bn).forward(bn, x)
    c, dims = x.shape[1], [0, *range(2, x.dim())]
    shape = [1, c] + [1] * (x.dim() - 2)
    with torch.no_grad():
        # sums of x - k and of its square (plain reductions: the fastest pass on a CPU), in ONE all-reduce; k (the
        # running mean, the same on every rank) keeps E[(x-k)^2] - E[x-k]^2 from cancelling when the mean is
        # large against the spread
        k = bn.running_mean.detach().float() if bn.running_mean is not None else x.new_zeros(c, dtype=torch.float32)
        d = x.float() - k.view(shape)
        total = all_reduce_sum(torch.cat([d.sum(dims), d.square().sum(dims), d.new_full((1,), x.numel() / c)]))
        n = total[-1]
        shift = total[:c] / n
        mean = shift + k
        var = (total[c:2 * c] / n - shift * shift).clamp_min(0.0)
    y = _WholeBatchNorm.apply(x, bn.weight, bn.bias, mean, var, n, bn.eps)
    if bn.track_running_stats:
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            mom = bn.momentum if bn.momentum is not None else 1.0 / float(bn.num_batches_tracked)
            bn.running_mean.mul_(1 - mom).add_(mom * mean.to(bn.running_mean.dtype))
            bn.running_var.mul_(1 - mom).add_((mom * var * n / (n - 1).clamp_min(1.0)).to(bn.running_var.dtype))
    return y


def barrier() -> None:
    if active():
        tdist.barrier()
