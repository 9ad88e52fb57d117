"""Counts what one step dispatches, on any device (CPU included): a proxy for its device kernels.

:class:`OpCounter` is a ``TorchDispatchMode`` that counts the aten operators that reach a kernel (views,
``detach`` and shape queries excluded: they launch nothing on a GPU) and the operators that read a tensor's
value back to the host (``aten._local_scalar_dense`` behind ``.item()`` / ``float()`` / ``int()``,
``nonzero``, ``equal``, ``is_nonzero``).  On a GPU every counted operator is about one kernel launch
(a few, e.g. a matmul, may launch two), and every read of a device tensor is a sync.
"""

from __future__ import annotations

import collections

from torch.utils._python_dispatch import TorchDispatchMode

READS = frozenset({"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.equal.default",
                   "aten.is_nonzero.default"})


class OpCounter(TorchDispatchMode):
    """``with OpCounter() as c: step()`` -> ``c.kernels`` (non-view aten operators), ``c.reads`` (value reads of
    tensors on ``read_device``: ``'cpu'``, ``'cuda'``, or None for any), ``c.ops`` (a Counter by operator name)."""

    def __init__(self, read_device: str | None = None) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.reads = 0
        self.read_device = read_device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name in READS and (self.read_device is None or any(
                getattr(a, "device", None) is not None and a.device.type == self.read_device for a in args)):
            self.reads += 1
        if not (func.is_view or name.startswith(("aten.detach", "aten.sym_", "aten.size", "aten.stride"))):
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def kernels(self) -> int:
        return sum(self.ops.values())
