"""One run on several processes: how a method's step is shared out, in one room beside the loop.

A run on N processes (``torchrun``, ``dpgen train --nproc``; the process group and its transport are
:mod:`dpgen.utils.dist`) is ONE run of the single-process algorithm: the same global batch, the same released
tensors, the same ledger, the same update.  The private side is shared out by the sampler and the mechanisms,
which declare their own reduction (a clipped sum is added over the ranks and noised once, a projection's rows
are gathered: :mod:`dpgen.privacy.mechanisms`).  What remains is the method's own side of the step, shared
out here on the pattern of Opacus' ``DPDDP`` (the model side) and ``DistributedDPOptimizer`` (one gradient
all-reduce in the optimiser's ``step``):

* :class:`Share` — which part of a step's work this rank does, as the method declares it:
  ``Share.rows(n)`` (a contiguous part of ``n`` rows: generated samples, a source batch),
  ``Share.blocks(n_blocks, block_rows)`` (whole class blocks, so a rank's sliced cost is a share of the whole
  one; the rows of a contiguous part when there are fewer blocks than ranks), ``Share.directions(k)`` (a part
  of a step's projection directions: the particle flows) and ``Share.whole(n)`` (every rank does all of it: a
  release computed from the whole batch at once).  A share gathers its parts into the whole batch
  (:meth:`Share.gather`: one all-gather, the gradient flowing back into this rank's rows only) and adds a
  scalar or a tensor over the ranks (:meth:`Share.total`).
* :class:`GeneratedSide` — the generator as the split sees it: this rank's rows of ``G(z, y)`` for the whole
  batch's ``z, y`` (drawn alike on every rank), BatchNorm normalising by the WHOLE batch's statistics, and
  ``whole(part)`` the gathered batch where the loss needs all of it.
* :class:`ParallelOptimizer` — an optimiser whose ``step`` first adds the parameters' gradients over the
  ranks in ONE all-reduce (a rank's gradient is the part from its own rows, the sum is the whole batch's),
  with the step's logged partial sums riding in the same buffer (:meth:`ParallelOptimizer.reduce`), and
  ``backward_of_sum`` for a loss that is a function of a sum of the ranks' shares (the sliced cost of whole
  blocks) in that same all-reduce.
* :func:`own_draws` — the private randomness of a rank's own samples (dropout masks) from a stream of its own,
  the public streams left in step.

One process: every share is the whole, every wrapper the identity, and no collective is made.

A method declares its split with :attr:`Method.split` (``rows`` / ``blocks`` / ``directions`` / ``whole``:
docs/ARCHITECTURE.md, "Adding a method"), builds its generator through :class:`GeneratedSide` and its
optimiser through :class:`ParallelOptimizer`, and its ``step`` reads like its paper's algorithm box.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from ..utils import dist

SPLITS = ("rows", "blocks", "directions", "whole")


def slower_note(method, device: torch.device) -> str | None:
    """The one line a run on several CPU processes prints when its family's step is too small to gain from the
    split on gloo (the method's ``cpu_split_note``: the measured figure and its measured reason); None otherwise."""
    if not dist.active() or device.type != "cpu":
        return None
    note = getattr(method, "cpu_split_note", None) or CPU_SPLIT_NOTE
    return f"note: on {dist.world_size()} CPU processes {method.name} gains little or runs slower: {note}"


# every family on several CPU processes (dpgen bench --only distributed, docs/benchmarks.md): what a split step gains
# depends on its size, and every process repeats the start-up and set-up
CPU_SPLIT_NOTE = ("a step gains from a second CPU process only when it is large (2 processes ran 1.4-1.5x the steady "
                  "steps/s of one at the MNIST presets, 0.3-1.4x at the 8x8 digits presets), and each process starts "
                  "and sets up the run again (a 20-step run took 0.7-1.0x as long on 2 processes as on one); a short "
                  "or small run may be faster on one process (or on GPUs)")


# ---------------------------------------------------------------------------- what this rank does
@dataclass(frozen=True)
class Share:
    """Rows ``lo:hi`` of an ``n``-row batch (or of ``n`` directions) are this rank's part of a step's work.

    ``kind``: ``rows`` (a contiguous part), ``blocks`` (whole blocks of ``block_rows`` rows: a loss summed
    within blocks is the sum of the ranks' shares of it), ``directions`` or ``whole`` (every rank all of it)."""

    lo: int
    hi: int
    n: int
    kind: str = "rows"

    @classmethod
    def rows(cls, n: int) -> Share:
        lo, hi = dist.shard_bounds(n)
        return cls(lo, hi, n, "rows")

    @classmethod
    def of_batch(cls, rows: int) -> Share:
        """The share of a variable-size batch (a Poisson draw) of which this rank holds ``rows``, shared out as the
        sampler shares it (:meth:`rows` of the whole batch's size; the size is added over the ranks: one
        all-reduce).  One process: all ``rows``, no collective."""
        if not dist.active():
            return cls(0, rows, rows, "rows")
        share = cls.rows(int(dist.all_reduce_sum(torch.tensor([rows])).item()))
        if share.size != rows:
            raise ValueError(f"this rank holds {rows} rows of the batch, not its share {share.size} of {share.n}")
        return share

    @classmethod
    def blocks(cls, n_blocks: int, block_rows: int) -> Share:
        """This rank's whole blocks; with fewer blocks than ranks, a contiguous part of the rows (``kind`` rows:
        the cost is then computed on the gathered whole batch)."""
        n = n_blocks * block_rows
        part = dist.block_bounds(n_blocks, block_rows)
        return cls(*part, n, "blocks") if part is not None else cls.rows(n)

    @classmethod
    def directions(cls, k: int) -> Share:
        lo, hi = dist.shard_bounds(k)
        return cls(lo, hi, k, "directions")

    @classmethod
    def whole(cls, n: int) -> Share:
        return cls(0, n, n, "whole")

    @property
    def bounds(self) -> tuple[int, int]:
        return self.lo, self.hi

    @property
    def slice(self) -> slice:
        return slice(self.lo, self.hi)

    @property
    def size(self) -> int:
        return self.hi - self.lo

    @property
    def shared(self) -> bool:
        """True when a sum over this share's blocks is a share of the whole sum (the ranks' shares add up)."""
        return self.kind == "blocks"

    def take(self, t: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the whole batch's ``t``."""
        return t[self.lo:self.hi]

    def gather(self, part: torch.Tensor) -> torch.Tensor:
        """The whole ``(n, ...)`` batch whose rows ``lo:hi`` are ``part`` on each rank, on every rank: ONE
        all-gather (the sizes are public).  Differentiable: the gradient flows back into this rank's rows only
        (:class:`_GatherShares`).  One process, or a whole share: ``part`` itself."""
        if not dist.active() or self.kind == "whole":
            return part
        if part.shape[0] != self.size:
            raise ValueError(f"this rank's part has {part.shape[0]} rows, not its share of {self.n}")
        return _GatherShares.apply(part, self)

    def projected(self, x: torch.Tensor, u: torch.Tensor, sigma: float,
                  generator: torch.Generator | None = None) -> torch.Tensor:
        """This rank's rows of the Gaussian-smoothed projection ``X U + sigma Z`` of the whole batch, where ``x`` is
        this rank's rows of X: the ``(n, k)`` noise drawn whole from ``generator`` (the method's public generator;
        default torch's) as one process draws it, so every rank's generator stays in step, and its rows ``lo:hi``
        added (DP-SWD paper, Alg. 1 step 5)."""
        p = x @ u
        if sigma > 0:
            p = p + sigma * self.take(torch.randn((self.n, u.shape[1]), dtype=p.dtype, device=p.device,
                                                  generator=generator))
        return p

    @staticmethod
    def collect(part: torch.Tensor) -> torch.Tensor:
        """The ranks' parts (of any sizes) concatenated in rank order, on every rank (not differentiable)."""
        return dist.all_gather_rows(part)

    @staticmethod
    def largest(t: torch.Tensor) -> torch.Tensor:
        """The largest over the ranks of the scalar ``t``, on every rank."""
        return dist.all_gather_rows(t.reshape(1)).max()

    @staticmethod
    def total(t: torch.Tensor) -> torch.Tensor:
        """The sum over the ranks of ``t`` (a rank's part of a whole-batch quantity), on every rank."""
        return dist.all_reduce_sum(t)


class _GatherShares(torch.autograd.Function):
    """All-gather of the ranks' shares of an ``n``-row tensor; the backward pass keeps this rank's rows.

    Every rank computes the same function of the gathered tensor (the loss), so the gradient w.r.t. the
    gathered tensor is the same on every rank and this rank's rows of it are exactly the single-process
    gradient w.r.t. its own rows: nothing crosses the processes on the way back (a reduce-scatter, as
    ``torch.distributed.nn.functional.all_gather`` does, would sum W equal copies).  The parameters' gradients
    are then partial sums, added over the ranks by :class:`ParallelOptimizer`."""

    @staticmethod
    def forward(ctx, part: torch.Tensor, share: Share) -> torch.Tensor:
        ctx.lo, ctx.hi = share.lo, share.hi
        return dist.all_gather_parts(part, dist.shard_sizes(share.n))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[ctx.lo:ctx.hi], None


# ---------------------------------------------------------------------------- the generated side
class GeneratedSide:
    """The generator of a step split by rows: ``side(z, y, share)`` is this rank's rows ``share`` of ``G(z, y)``
    for the WHOLE batch's ``z, y`` (drawn alike on every rank, as one process draws them).

    A generator whose layers that mix rows (BatchNorm) all sit in a cheap ``head`` (``G(z, y) =
    G.tail(G.head(z, y))``, the tail row-wise) runs the head on the whole batch on every rank and the costly
    tail on its rows only: no collective, the rows equal the single-process ones.  Any other generator runs on
    its rows, each BatchNorm layer normalising (in training) by the statistics of the WHOLE batch (one
    all-reduce per layer each way: :func:`whole_batch_norm`, installed here).  ``compile``: makes G's compiled
    view, which the step runs (``compiled=False``: G itself).  One process: ``G(z, y)``."""

    def __init__(self, G: torch.nn.Module, compile: Callable | None = None) -> None:
        self.G = whole_batch_norm(G)
        self.forward = compile(self.G) if compile is not None else self.G  # e.g. utils.compiling.compile_module

    def __call__(self, z: torch.Tensor, y: torch.Tensor | None, share: Share, compiled: bool = True) -> torch.Tensor:
        forward = self.forward if compiled else self.G
        if not dist.active():
            return forward(z, y)
        if _has_head(self.G):
            return self.G.tail(self.G.head(z, y)[share.slice])
        return forward(share.take(z), None if y is None else share.take(y))


def _has_head(module: torch.nn.Module) -> bool:
    return callable(getattr(module, "head", None)) and callable(getattr(module, "tail", None))


# ---------------------------------------------------------------------------- the optimiser
class ParallelOptimizer:
    """``optimizer`` whose :meth:`step` first adds the gradients of ``params`` over the ranks (each rank's is the
    part from its own rows; the sum is the whole batch's) in ONE all-reduce of one flat buffer, unless the step
    already did (:meth:`reduce`, :meth:`backward_of_sum`).  Everything else is the wrapped optimiser's
    (``zero_grad``, ``state_dict``, ``param_groups``).  One process: the optimiser itself, no collective."""

    def __init__(self, optimizer, params) -> None:
        self.optimizer = optimizer
        self.params = [p for p in params if p.requires_grad]
        self._reduced = False

    def __getattr__(self, name):
        if name == "optimizer":  # not yet set (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)
        self._reduced = False

    def reduce(self, also: torch.Tensor | None = None) -> torch.Tensor | None:
        """Add the gradients over the ranks now (once per step), with ``also`` (a flat tensor of the step's partial
        sums, e.g. its logged losses) added in the same all-reduce and returned summed."""
        total = _sum_gradients(self.params, also)
        self._reduced = True
        return total

    def backward_of_sum(self, part: torch.Tensor, outer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``outer(Σ_r part_r)`` of the ranks' scalar shares ``part`` (the sliced cost of a rank's whole blocks),
        its gradient left in the parameters' ``.grad`` in the step's ONE all-reduce: each rank back-propagates its
        own share, the shares travel with the gradients, and the chain rule's scalar factor scales the sum,
        ``∇ outer(Σ_r part_r) = outer'(Σ_r part_r) · Σ_r ∇ part_r``.  One process: ``outer(part)`` and its
        gradient."""
        part.backward()
        total = self.reduce(also=part.detach().reshape(1))[0].clone().requires_grad_(True)
        with torch.enable_grad():
            value = outer(total)
        (scale,) = torch.autograd.grad(value, total)
        grads = [p.grad for p in self.params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, scale)  # one multi-tensor kernel on a GPU
        return value.detach()

    def step(self, *args, **kwargs):
        if not self._reduced:
            self.reduce()
        self._reduced = False
        return self.optimizer.step(*args, **kwargs)


def _sum_gradients(params: list[torch.Tensor], also: torch.Tensor | None = None) -> torch.Tensor | None:
    """Add the ``.grad`` of ``params`` over the ranks in place, in ONE all-reduce of one flat buffer (a single
    bucket), ``also`` (a flat tensor) in the same buffer, returned summed.  One process: ``also``."""
    if not dist.active():
        return also
    for p in params:  # the same buffer layout on every rank, whichever parameters this rank's samples reached
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    grads = [p.grad for p in params]
    extra = [] if also is None else [also.reshape(-1).to(grads[0].dtype if grads else also.dtype)]
    if not grads and not extra:
        return also
    flat = dist.all_reduce_sum(torch.cat([g.reshape(-1) for g in grads] + extra))
    chunks = flat.split([g.numel() for g in grads] + [e.numel() for e in extra])
    for g, chunk in zip(grads, chunks[:len(grads)], strict=True):
        g.copy_(chunk.view_as(g))
    return None if also is None else chunks[-1].view_as(also).to(also.dtype)


def batch_mean_backward(loss_sum: torch.Tensor, rows: int, params) -> torch.Tensor:
    """The gradient of the WHOLE batch's mean loss, ``Σ_r loss_sum_r / Σ_r rows_r`` (the one-process estimator
    of a non-private baseline, whatever each rank's share of a variable-size batch), left in ``params``'
    ``.grad``: each rank back-propagates the sum over its rows, its row count travels with the gradients in ONE
    all-reduce, and the sum is divided by the batch's size.  Returns the whole batch's mean loss.  An empty
    share (or batch) contributes a zero gradient.  One process: the mean loss and its gradient."""
    params = [p for p in params if p.requires_grad]
    if loss_sum.requires_grad:
        loss_sum.backward()
    total = _sum_gradients(params, torch.stack([loss_sum.detach().float().reshape(()),
                                                torch.tensor(float(rows), device=loss_sum.device)]))
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    count = total[1].clamp_min(1.0)
    torch._foreach_div_([p.grad for p in params], count)
    return total[0] / count


def rank0_result(compute: Callable[[], object]):
    """``compute()`` run on rank 0 only (a public model read from a cache or trained, which only rank 0 writes), its
    picklable result on every rank.  One process: ``compute()``."""
    return dist.broadcast_object(compute() if dist.is_main() else None)


# ---------------------------------------------------------------------------- a rank's own randomness
@contextmanager
def own_draws(stream: int = 0) -> Iterator[None]:
    """Several processes: draws made inside (dropout masks of this rank's samples) come from a stream of this
    rank's own, and torch's global generators are back in their state on leaving, so every rank's next public
    draw (generator inputs, smoothing noise) is still every other rank's: nothing is exchanged to keep the ranks
    in step.  The stream is seeded from the global state (the same on every rank) plus the rank: masks of the
    same law as one process's, not the same values.  One process: nothing changes.  ``stream``: another stream
    of the same step (e.g. a second chunk of samples)."""
    if not dist.active():
        yield
        return
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed((int(torch.randint(2**62, ())) + dist.rank() + dist.world_size() * stream) % 2**63)
        yield


# ---------------------------------------------------------------------------- BatchNorm over the whole batch
def whole_batch_norm(module: torch.nn.Module) -> torch.nn.Module:
    """Several processes: every BatchNorm layer of ``module`` normalises (in training) by the statistics of the
    WHOLE batch, the ranks' parts together, as one process would (torch's ``SyncBatchNorm`` runs on GPUs only);
    its running statistics follow the whole batch too.  The layers keep their parameters and buffers (the same
    state dict); evaluation is unchanged.  One process, or a module with a ``head`` and a ``tail``
    (:class:`GeneratedSide` runs its BatchNorm layers on the whole batch on every rank): ``module`` as it is."""
    if dist.active() and not _has_head(module):
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
        sums = dist.all_reduce_sum(torch.cat([db, dw]).float())  # Σ dy, Σ dy·x̂ over the whole batch
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
        total = dist.all_reduce_sum(torch.cat([d.sum(dims), d.square().sum(dims), d.new_full((1,), x.numel() / c)]))
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
