"""The private sampler: the only way a method reaches private records.

It draws batches exactly as the accountant assumes, chosen by the same config value
(the accountant's ``sampling``):

* ``poisson``: each of the ``N`` records is included independently with probability
  ``q = batch_size / N`` (batch size is Binomial(N, q));
* ``without_replacement``: ``batch_size`` distinct records, uniformly at random, fresh at every
  step (i.i.d. fixed-size subsampling; *not* epoch-wise reshuffling, which no accountant here
  covers).

The sampler owns its own ``torch.Generator`` so its state goes into checkpoints and a resumed run
draws the batches an uninterrupted run would have drawn.

Several processes (``torchrun``, :mod:`dpgen.privacy.distributed`): the generator's seed is rank 0's,
so every rank draws the SAME global batch, exactly the single-process one, and keeps its own contiguous
part of it (``distributed.shard``).  The parts are disjoint and their union is one Poisson(q) sample of
the whole private set (or ``batch_size`` records without replacement): the accountant's assumption is
the single-process one.  This is the argument of Opacus' distributed Poisson sampler (each record is
included independently with probability q, whichever rank reads it), with one generator instead of
one per shard: the batches do not depend on the number of processes (a run resumed on another number
draws the batches the uninterrupted run would have drawn), and a rank whose part is empty still takes
the step (every rank takes every step; the collectives of the release keep them in lockstep).
"""

from __future__ import annotations

from typing import Protocol

import torch

from . import distributed
from .accountants import check_sampling
from .errors import PrivacySettingError


def poisson_indices(n: int, q: float, size_generator: torch.Generator, generator: torch.Generator,
                    device: torch.device) -> torch.Tensor:
    """A Poisson(q) sample of ``range(n)`` drawn without reading the device (sorted indices on ``device``).

    The probability of a set S under Poisson sampling, ``q^|S| (1 − q)^(n − |S|)``, depends on |S| only:
    given its size K, the sample is uniform among the K-subsets.  So drawing ``K ~ Binomial(n, q)`` on the
    host (``size_generator``, a CPU generator) and then a uniformly random K-subset on the device (the first
    K of a random permutation from ``generator``) draws exactly the Poisson sample the accountant assumes.
    K is a Python number when the device work is queued: no device read, no host-to-device copy."""
    k = int(torch.binomial(torch.tensor(float(n)), torch.tensor(float(q)), generator=size_generator))
    return torch.randperm(n, generator=generator, device=device)[:k].sort().values


class PrivateSource(Protocol):
    def __len__(self) -> int: ...

    def _gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class PrivateSampler:
    """Draws private batches ``(x, y)`` from a private source according to ``sampling``.

    ``split=False``: with several processes, every rank reads the whole batch (for a release computed
    from the whole batch at once, noised once by its mechanism); the default gives each rank its part."""

    def __init__(self, source: PrivateSource, batch_size: int, sampling: str, seed: int = 0, split: bool = True,
                 device: torch.device | str = "cpu") -> None:
        self.source = source
        self.n = len(source)
        if batch_size < 1:
            raise PrivacySettingError("batch_size", f"a batch needs at least one record, got a batch size of {batch_size}; "
                                                    "use 1 or more")
        if batch_size > self.n:  # N is private under add/remove: not in the message
            raise PrivacySettingError("batch_size", f"the batch size {batch_size} is larger than the private training "
                                                    "split, so a batch cannot be filled (the number of private records "
                                                    "is not printed: it is private data); fix: a smaller batch size, or "
                                                    "more training records")
        self.batch_size = int(batch_size)
        self.sampling = check_sampling(sampling)
        # several processes: rank 0's seed on every rank (the same global batches, module docstring)
        seed = int(distributed.broadcast_object(int(seed)))
        self.device = torch.device(device)
        # on an accelerator, Poisson batches come from poisson_indices (its size drawn on the host by its own
        # generator, the subset by a generator on the device); on the CPU, from one mask as before
        self.generator = torch.Generator(device=self.device if self._sized_on_host else "cpu").manual_seed(seed)
        self.size_generator = torch.Generator().manual_seed(seed ^ 0x5DEECE66D)
        self.draws = 0
        # False: every rank reads the whole batch (a release that is not per record, e.g. DP-Sinkhorn's gradient)
        self.split = bool(split)

    @property
    def _sized_on_host(self) -> bool:
        return self.sampling == "poisson" and self.device.type != "cpu"

    @property
    def sample_rate(self) -> float:
        """``q``: the inclusion probability the accountant is told about."""
        return self.batch_size / self.n

    def global_indices(self) -> torch.Tensor:
        """Indices of one private batch of the whole run (LongTensor, shape (b,)): the single-process draw."""
        self.draws += 1
        if self._sized_on_host:
            return poisson_indices(self.n, self.sample_rate, self.size_generator, self.generator, self.device)
        if self.sampling == "poisson":
            mask = torch.rand(self.n, generator=self.generator) < self.sample_rate
            return mask.nonzero(as_tuple=False).flatten()
        return torch.randperm(self.n, generator=self.generator)[: self.batch_size]

    def sample_indices(self) -> torch.Tensor:
        """Indices of this process's part of one private batch (all of it with one process; maybe empty)."""
        idx = self.global_indices()
        return distributed.shard(idx) if self.split else idx

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One private batch ``(x: (b, ...), y: (b,))``."""
        return self.source._gather(self.sample_indices())

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state(), "size_generator": self.size_generator.get_state(),
                "draws": self.draws, "sampling": self.sampling}

    def load_state_dict(self, state: dict) -> None:
        if state["sampling"] != self.sampling:
            raise PrivacySettingError("sampling", f"cannot resume: the checkpoint's batches were drawn with "
                                                  f"{state['sampling']} sampling but this run uses {self.sampling}; "
                                                  "resume with the same sampling")
        self.generator.set_state(state["generator"])
        if "size_generator" in state:
            self.size_generator.set_state(state["size_generator"])
        self.draws = int(state["draws"])
