"""THE op counter: what a step dispatches, on any device (CPU included), as a CUDA run takes it.

One vocabulary for every count of the project (``bench.step_overhead``'s per-step table and tests, the static-step
check, the op counts asserted by the tests of the OT solvers and of DP-SGD):

* an **op** is an aten operator that reaches the dispatcher; a **kernel** is an op that is not a view (views,
  ``detach`` and shape queries launch nothing on a GPU; on a GPU every other op is about one kernel launch);
* a **read** is an op whose result (or its size) the host must read from the device (:data:`READ_OPS`:
  ``_local_scalar_dense`` behind ``.item()`` / ``float()`` / ``int()``, ``nonzero``, ``equal``, ...): a sync;
* a **random op** (:data:`RANDOM_OPS`, ``aten.binomial`` included) draws from the generator passed to it, or from the
  global default generator when none is (:func:`generator_of`);
* the optimiser takes the path a CUDA run takes: PyTorch picks the multi-tensor ``foreach`` implementation on a
  GPU and a per-parameter loop on the CPU, so every optimiser of a step asks for ``foreach=True`` itself
  (``utils.compiling.adam``, DP-SGD's SGD, DP-Sinkhorn's Adam) and a CPU count is the CUDA run's.

:class:`OpCounter` is the plain counter (a ``TorchDispatchMode``): ``with OpCounter() as c: step()``.
``bench.step_overhead.StepOps`` extends it with the placement of every tensor (host or device) and per-step
intervals.
"""

from __future__ import annotations

import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ops whose result (or its size) the host must read from the device before it goes on
READ_OPS = frozenset({"aten._local_scalar_dense", "aten.nonzero", "aten.equal", "aten.is_nonzero",
                      "aten.masked_select", "aten.unique", "aten._unique", "aten._unique2", "aten.unique_dim",
                      "aten.unique_consecutive", "aten.argwhere", "aten.is_set_to"})
RANDOM_OPS = frozenset({"aten.randn", "aten.rand", "aten.randint", "aten.randperm", "aten.normal", "aten.normal_",
                        "aten.uniform_", "aten.bernoulli", "aten.bernoulli_", "aten.multinomial", "aten.exponential_",
                        "aten.random_", "aten.rand_like", "aten.randn_like", "aten.randint_like", "aten.poisson",
                        "aten.binomial", "aten.native_dropout", "aten.cauchy_", "aten.geometric_",
                        "aten.log_normal_"})
# dispatched but launching nothing: views, detach and shape queries
NOT_KERNELS = ("aten.detach", "aten.sym_", "aten.size", "aten.stride")


def op_name(func) -> str:
    """``aten.add`` for ``aten.add.Tensor`` (the overload packet: what the tables count)."""
    return str(func.overloadpacket)


def is_kernel(func) -> bool:
    """Whether ``func`` launches a kernel on a GPU (not a view, ``detach`` or a shape query)."""
    return not (func.is_view or str(func).startswith(NOT_KERNELS))


def generator_of(args: tuple, kwargs: dict) -> torch.Generator | None:
    """The generator a random op draws from (``None``: the global default generator)."""
    gen = kwargs.get("generator")
    if gen is None:
        gen = next((a for a in args if isinstance(a, torch.Generator)), None)
    return gen


def signature(func, args: tuple, kwargs: dict) -> tuple:
    """``(op, shapes and dtypes of its tensor arguments)``: what two static steps dispatch identically."""
    flat = [a for a in flatten((args, kwargs)) if isinstance(a, torch.Tensor)]
    return (str(func), tuple((tuple(t.shape), t.dtype) for t in flat))


def flatten(x):
    if isinstance(x, (list, tuple)):
        for v in x:
            yield from flatten(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from flatten(v)
    else:
        yield x


class OpCounter(TorchDispatchMode):
    """``with OpCounter() as c: step()`` -> ``c.kernels`` (ops that are not views), ``c.reads`` (value reads of
    tensors on ``read_device``: ``'cpu'``, ``'cuda'``, or None for any), ``c.ops`` (a Counter of the kernels by
    operator name), ``c.dispatched`` (every op, views included), ``c.random`` (the generator of each random op,
    ``None`` for the global one)."""

    def __init__(self, read_device: str | None = None) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.reads = 0
        self.dispatched = 0
        self.random: list[torch.Generator | None] = []
        self.read_device = read_device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = op_name(func)
        if name in READ_OPS and (self.read_device is None or any(
                getattr(a, "device", None) is not None and a.device.type == self.read_device for a in args)):
            self.reads += 1
        if name in RANDOM_OPS:
            self.random.append(generator_of(args, kwargs))
        self.dispatched += 1
        if is_kernel(func):
            self.ops[str(func)] += 1
        return func(*args, **kwargs)

    @property
    def kernels(self) -> int:
        return sum(self.ops.values())
