"""Per-step statistics that stay on the device until they are read (the WA/BA pair distances).

A reported-only accountant (``privacy.wdp.WassersteinAccountant``, ``privacy.bayesian.BayesianAccountant``)
is fed a device tensor of pair distances every step.  Reading it on the host at once would make the host wait
for the device every step (a sync).  :class:`DeferredSteps` keeps the step's tensor where it is instead;
``stage()`` starts ONE non-blocking copy of every step kept so far to the host, and ``drain()`` (the
accountant, when its epsilon or its state is read: a ``trainer.log_every`` step, a checkpoint, the end) stages
what is left, waits for the copies and hands back the host rows in step order.  The accountant then
takes the steps one by one, exactly as it would have taken them at once: its sums are additive over steps, so
the numbers are the same; only when the host does the arithmetic changes.
"""

from __future__ import annotations

import numpy as np
import torch


class DeferredSteps:
    """Steps ``(values on the device, host arguments)`` kept until read (module docstring)."""

    def __init__(self) -> None:
        self._kept: list[tuple[torch.Tensor, tuple]] = []
        self._staged: list[tuple[torch.Tensor, list[int], list[tuple], torch.Event | None]] = []

    def __len__(self) -> int:
        return len(self._kept) + sum(len(args) for _, _, args, _ in self._staged)

    def push(self, values: torch.Tensor, *args) -> None:
        """Keep one step's ``values`` (any device, any shape: flattened) and its host arguments."""
        self._kept.append((values.detach().reshape(-1), args))

    def stage(self) -> None:
        """Start the copy of every step kept so far to the host (``non_blocking``: the host does not wait)."""
        if not self._kept:
            return
        values = torch.cat([v for v, _ in self._kept])
        host = values.to("cpu", non_blocking=True)
        event = None
        if values.device.type != "cpu":
            event = torch.Event(device=values.device)
            event.record()
        self._staged.append((host, [v.numel() for v, _ in self._kept], [a for _, a in self._kept], event))
        self._kept = []

    def drain(self) -> list[tuple[np.ndarray, tuple]]:
        """Every kept step as ``(float64 host values, args)``, in step order (waits for the staged copies)."""
        self.stage()
        out = []
        for host, sizes, args, event in self._staged:
            if event is not None:
                event.synchronize()
            for part, a in zip(np.split(host.double().numpy(), np.cumsum(sizes)[:-1]), args, strict=True):
                out.append((part, a))
        self._staged = []
        return out
