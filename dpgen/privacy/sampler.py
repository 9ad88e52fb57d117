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

Where it draws: on the run's device (``device=``; the method passes ``ctx.device``).  The private set
is moved there once, when the sampler is built, and the generator is a ``torch.Generator`` of that
device, seeded as before: the inclusion draws have the same distribution wherever they are drawn (so
the accountant's assumption is unchanged), and on the CPU they are the same numbers as before.  A
checkpoint records the generator's device type with its state; a run resumed on another device type
seeds its generator from a secret derived from the stored state (:func:`resumed_generator`): the
batches keep their distribution, not their values.

Variable-size Poisson batches of a sampler given a device (DP-SGD, DP-Sinkhorn) are drawn by
:func:`poisson_indices`: their size on the host from a generator of its own (``size_generator``, checkpointed
too), the records on the device, exactly the Poisson law, with nothing read back from the device (the same
numbers on every device type; without a device, one inclusion mask on the host as before).

Static shapes (a step captured once and replayed, ``trainer.graph``): :meth:`PrivateSampler.padded_batch` draws
the same Poisson batch into a buffer of a public capacity with a validity mask (its docstring has the argument).

Fixed-size releases (DP-SWD, DPSWflow-r, DPSWgen, the DP-SWD adapter) read the batch through
:meth:`PrivateSampler.fixed_batch` / :meth:`PrivateSampler.class_batch`: exactly ``B`` (or ``C m``)
records and a mask of the rows that are padding, formed on the device without a host sync: the records
with the ``B`` smallest Poisson uniforms (the ``m`` smallest of each class for class blocks; one selection,
no sort of the private set), then the rows in a uniformly random order (see those methods for the argument
that the released rows have the law of ``privacy.rows.fixed_size`` / ``class_blocks``, followed by a
uniform shuffle of the rows).

Several processes (``torchrun``, :mod:`dpgen.utils.dist`): the generator's seed is rank 0's,
so every rank draws the SAME global batch, exactly the single-process one, and keeps its own contiguous
part of it (``dist.shard``).  The parts are disjoint and their union is one Poisson(q) sample of
the whole private set (or ``batch_size`` records without replacement): the accountant's assumption is
the single-process one.  This is the argument of Opacus' distributed Poisson sampler (each record is
included independently with probability q, whichever rank reads it), with one generator instead of
one per shard: the batches do not depend on the number of processes (a run resumed on another number
draws the batches the uninterrupted run would have drawn), and a rank whose part is empty still takes
the step (every rank takes every step; the collectives of the release keep them in lockstep).
"""

from __future__ import annotations

import hashlib
from typing import Protocol

import torch

from ..utils import dist
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
    k = poisson_size(n, q, size_generator)
    return exact_subset(n, k, generator, device)


def poisson_size(n: int, q: float, size_generator: torch.Generator) -> int:
    """``K ~ Binomial(n, q)`` drawn on the host from ``size_generator``, in float64: ``n`` and ``q`` exactly as the
    accountant states them (float32 would round ``n`` above 2^24 and ``q`` to 24 bits, another law)."""
    return int(torch.binomial(torch.tensor(float(n), dtype=torch.float64), torch.tensor(float(q), dtype=torch.float64),
                              generator=size_generator))


def exact_subset(n: int, k: int, generator: torch.Generator, device: torch.device | None) -> torch.Tensor:
    """A uniformly random ``k``-subset of ``range(n)`` (sorted indices on ``device``): the first k of a random
    permutation."""
    return torch.randperm(n, generator=generator, device=device)[:k].sort().values


class PrivateSource(Protocol):
    def __len__(self) -> int: ...

    def _gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...

    def _labels(self) -> torch.Tensor: ...

    def _on(self, device: torch.device) -> PrivateSource: ...


def device_generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A ``torch.Generator`` of ``device`` (default: the CPU) seeded with ``seed``: the generator every secret draw
    uses (the sampler's, a mechanism's noise and directions).  On the CPU it is the generator dpgen always used."""
    return torch.Generator(device=torch.device("cpu" if device is None else device)).manual_seed(int(seed))


def generator_state(generator: torch.Generator) -> dict:
    """What a checkpoint keeps of a generator: its state and its device type."""
    return {"state": generator.get_state(), "device": generator.device.type}


def resumed_generator(generator: torch.Generator, stored) -> None:
    """Restore ``stored`` (:func:`generator_state`, or a bare CPU state of an older checkpoint) into ``generator``.

    Same device type: the stored state, so the draws continue as an uninterrupted run's.  Another device type
    (a run checkpointed on a GPU resumed on the CPU, or the reverse: one device's state cannot be loaded into
    another's generator): ``generator`` is seeded from a secret derived from the stored state (a SHA-256 of it,
    63 bits), so the draws that follow keep their distribution (and their secrecy), not their values."""
    state, device = (stored["state"], stored["device"]) if isinstance(stored, dict) else (stored, "cpu")
    if device == generator.device.type:
        generator.set_state(state)
    else:
        digest = hashlib.sha256(bytes(state.cpu().numpy())).digest()
        generator.manual_seed(int.from_bytes(digest[:8], "little") % 2**63)


class PrivateSampler:
    """Draws private batches ``(x, y)`` from a private source according to ``sampling``.

    ``split=False``: with several processes, every rank reads the whole batch (for a release computed
    from the whole batch at once, noised once by its mechanism); the default gives each rank its part.
    ``device``: where the private set is kept (moved there once, here) and the batches are drawn."""

    def __init__(self, source: PrivateSource, batch_size: int, sampling: str, seed: int = 0, split: bool = True,
                 device: torch.device | str | None = None) -> None:
        # None: the host (torch's default device), where the private split stays
        self.device = None if device is None else torch.device(device)
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
        # the largest class's size, counted where the labels are before they move: the width of class_batch's
        # layout (a shape, like N itself; never logged)
        labels = source._labels().long()
        self._widest_class = int(torch.bincount(labels - labels.min()).max())
        if self.device is not None:
            source = source._on(self.device)  # the private split (or its encoding) on the run's device, once
        self.source = source
        self.sampling = check_sampling(sampling)
        # several processes: rank 0's seed on every rank (the same global batches, module docstring)
        seed = int(dist.broadcast_object(int(seed)))
        self.generator = device_generator(seed, self.device)
        # Poisson with a device: the batch's size from a host generator of its own (poisson_indices)
        self.size_generator = device_generator(seed ^ 0x5DEECE66D)
        self.draws = 0
        # False: every rank reads the whole batch (a release that is not per record, e.g. DP-Sinkhorn's gradient)
        self.split = bool(split)
        self._class_layout: torch.Tensor | None = None  # class_batch's (C, W) record indices, built at its first draw
        # padded_batch: the public capacity, the size drawn ahead of a step (prepare), its device copy, the
        # steps whose size exceeded the capacity (run with the exact batch)
        self.capacity: int | None = None
        self._prepared: int | None = None
        self._k_buf: torch.Tensor | None = None
        self.over_capacity = 0

    @property
    def _sized_on_host(self) -> bool:
        return self.sampling == "poisson" and self.device is not None

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
            mask = self._uniforms() < self.sample_rate
            return mask.nonzero(as_tuple=False).flatten()  # on the host: a variable-size batch, its size read there
        return torch.randperm(self.n, generator=self.generator, device=self.device)[: self.batch_size]

    def _uniforms(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``u_i ~ U[0, 1)``, one per record, on the device: record i is in the Poisson batch iff ``u_i < q``."""
        return torch.rand(self.n, generator=self.generator, device=self.device, dtype=dtype)

    def _shuffle(self, idx: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``idx, valid: (..., m)`` with each last-axis block in a uniformly random order (the ranks of a uniform
        permutation within each block)."""
        perm = torch.randperm(idx.numel(), generator=self.generator, device=self.device).view(idx.shape)
        perm = perm.argsort(dim=-1)
        return idx.gather(-1, perm), valid.gather(-1, perm)

    def fixed_batch(self, size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Exactly ``size`` records ``(x, y)`` and ``valid: (size,)`` bool (False: a padding row, which the caller
        replaces by the zero row), drawn on the device without a host sync.

        Poisson: record i is in the batch iff ``u_i < q`` (``u`` in float64).  Given the batch S, the ``u_i`` of its
        records are i.i.d. uniform on ``[0, q)`` and all smaller than the others, so the ``size`` smallest ``u_i``
        (one selection, ``topk``) are a uniform ``size``-subset of S when S is larger, else all of S followed by
        ``size - |S|`` records outside it (padding).  The uniforms are float64 so that a tie at the cut, which
        ``topk`` would settle by position rather than uniformly, is negligible (about ``N 2^-53`` a draw; float32
        ones lie on a grid of ``2^-24`` on the CPU and tie there about once in a thousand draws at N = 60,000).  The
        ``size`` rows are then put in a uniformly random order.  So the released rows are, in law, exactly
        ``rows.fixed_size`` of the batch (a uniform subset, or the batch and zero rows) followed by a uniform
        shuffle of the rows: a post-processing of that release (its noise is i.i.d. per entry, so shuffling noised
        rows is noising shuffled rows), and the exchangeable form under which adding or removing one record changes
        one released row (the ``partners`` argument of ``GaussianProjectionRelease``).  Without replacement:
        ``size`` distinct records (:meth:`global_indices`), none padding.  Several processes: every rank draws the
        same, whole batch (rank 0's generator).
        """
        self.draws += 1
        if self.sampling == "poisson":
            u = self._uniforms(torch.float64)
            idx = u.topk(size, largest=False, sorted=False).indices
            idx, valid = self._shuffle(idx, u[idx] < self.sample_rate)
        else:
            idx = torch.randperm(self.n, generator=self.generator, device=self.device)[:size]
            valid = torch.ones(size, dtype=torch.bool, device=self.device)
        x, y = self.source._gather(idx)
        return x, y, valid

    def _by_class(self, n_classes: int, block: int) -> torch.Tensor:
        """``(C, W)`` record indices, row c the records of class c (in index order), the other cells the sentinel
        ``N``; ``W`` = the largest class size (counted when the sampler was built), at least ``block``.  Built once,
        on the device, without reading it."""
        layout = self._class_layout
        if layout is None or layout.shape[0] != n_classes or layout.shape[1] < block:
            labels = self.source._labels().long()
            counts = torch.zeros(n_classes, dtype=torch.long, device=self.device).index_add_(
                0, labels, torch.ones_like(labels))
            order = labels.argsort(stable=True)  # by class; the rank within its class is the column
            col = torch.arange(self.n, device=self.device) - (counts.cumsum(0) - counts)[labels[order]]
            layout = torch.full((n_classes, max(self._widest_class, block)), self.n, dtype=torch.long,
                                device=self.device)
            self._class_layout = layout.index_put_((labels[order], col), order)
        return self._class_layout

    def class_batch(self, n_classes: int, block: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``C`` blocks of exactly ``m = block`` records, block c of class c, stacked: ``(x, y)`` of ``C m`` records and
        ``valid: (C m,)`` (False: padding), drawn on the device without a host sync (Poisson sampling only).

        The Poisson draw of :meth:`fixed_batch`, and per class the m smallest ``u_i`` (one selection over the
        ``(C, W)`` class layout, its empty cells keyed 2 > any uniform): given the batch, they are a uniform
        m-subset of class c's batch when it is larger, else all of it and padding (the argument of
        :meth:`fixed_batch`, class by class).  Each block is then put in a uniformly random order.  In law:
        ``rows.class_blocks`` of the Poisson batch followed by a uniform shuffle within each block (a
        post-processing of that release, as in :meth:`fixed_batch`).  The class layout of the private set is built
        once, on the device, and never leaves it.
        """
        if self.sampling != "poisson":
            raise PrivacySettingError("sampling", "class blocks are accounted under Poisson sampling (add/remove); "
                                                  "use Poisson sampling")
        self.draws += 1
        layout = self._by_class(n_classes, block)
        u = self._uniforms(torch.float64)
        keys = torch.cat([u, u.new_full((1,), 2.0)]).index_select(0, layout.view(-1)).view(layout.shape)
        idx = layout.gather(1, keys.topk(block, dim=1, largest=False, sorted=False).indices)  # (C, m)
        real, idx = idx < self.n, idx.clamp(max=self.n - 1)  # a sentinel reads some record, a padding row
        idx, valid = self._shuffle(idx, real & (u[idx] < self.sample_rate))
        x, y = self.source._gather(idx.reshape(-1))
        return x, y, valid.reshape(-1)

    # -- static shapes (a captured step: methods.capture) ------------------------------------------
    def prepare(self) -> bool:
        """The host part of the next :meth:`padded_batch`, done before the step (outside a captured graph): draw
        ``K ~ Binomial(N, q)`` on the host and write it into the device buffer (``fill_``: a kernel with a scalar
        argument, no host-to-device copy).  True when the next step's batch fits the capacity (it may replay);
        False when it does not (that step runs eagerly with the exact batch of this same K).  A sampler without a
        capacity (no static shapes asked) has nothing to prepare: True."""
        if self.capacity is None or self.sampling != "poisson":
            return True
        k = self._prepared = poisson_size(self.n, self.sample_rate, self.size_generator)
        if k <= self.capacity:
            self._size_buffer().fill_(k)
        return k <= self.capacity

    def _size_buffer(self) -> torch.Tensor:
        if self._k_buf is None:
            self._k_buf = torch.zeros((), dtype=torch.long, device=self.device)
        return self._k_buf

    def padded_batch(self, capacity: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One Poisson(q) batch in exactly ``capacity`` rows: ``(x, y, valid)``, ``valid: (capacity,)`` bool (False: a
        padding row, which the caller weights 0 in the loss, the clipping and the sums).  The shapes do not depend
        on the draw, so the step can be captured once and replayed (``methods.capture``).

        The law.  Under Poisson sampling the probability of a batch S is ``q^|S| (1 − q)^(N − |S|)``: it depends on
        |S| only, so given its size K the batch is a uniformly random K-subset.  Here K ~ Binomial(N, q) is drawn on
        the host (:func:`poisson_size`, float64, the size generator; by :meth:`prepare` before the step, or here),
        independently of the device draw: ``N`` i.i.d. float64 uniforms ``u_i`` and the ``capacity`` smallest of
        them in increasing order (``topk(sorted=True)``).  Their first K are the K smallest uniforms, and the set
        of the indices of the K smallest of N i.i.d. continuous uniforms is a uniformly random K-subset (the
        uniforms are exchangeable; a tie, which ``topk`` would settle by position, has probability about
        ``N^2 2^-53`` in float64).  ``valid = arange(capacity) < K`` keeps exactly those K rows.  So the valid rows
        are, in law, exactly the Poisson batch the accountant assumes; the other rows are records read only to
        fill the shape, each weighted 0.  K > capacity is never truncated (that would change the law): the batch
        is then the exact K-subset of :func:`exact_subset` (variable shape, ``valid`` all True) and the step
        runs eagerly; :attr:`over_capacity` counts such steps (checkpointed; a function of the batch sizes, whose
        law depends on the private N, so it is not published).  With
        ``capacity = privacy.dpsgd.poisson_capacity`` (6 sd above q N) that is about one step in 10^9.

        Several processes: every rank draws the same whole batch (rank 0's generators) and keeps its contiguous
        part of the rows (the split sampler), the validity mask with them.
        """
        if self.sampling != "poisson":
            raise PrivacySettingError("sampling", "a padded batch is a Poisson batch; use Poisson sampling")
        self.capacity = int(capacity)
        self.draws += 1
        k, self._prepared = self._prepared, None
        if k is None:  # not prepared ahead (an eager step): the host draw and the buffer now
            k = poisson_size(self.n, self.sample_rate, self.size_generator)
            if k <= self.capacity:
                self._size_buffer().fill_(k)
        if k > self.capacity:  # never truncated: the exact batch of this same K, counted
            self.over_capacity += 1
            idx = exact_subset(self.n, k, self.generator, self.device)
            valid = torch.ones(k, dtype=torch.bool, device=self.device)
        else:
            u = self._uniforms(torch.float64)
            idx = u.topk(self.capacity, largest=False, sorted=True).indices
            valid = torch.arange(self.capacity, device=self.device) < self._size_buffer()
        if self.split:
            lo, hi = dist.shard_bounds(idx.shape[0])
            idx, valid = idx[lo:hi], valid[lo:hi]
        x, y = self.source._gather(idx)
        return x, y, valid

    def sample_indices(self) -> torch.Tensor:
        """Indices of this process's part of one private batch (all of it with one process; maybe empty)."""
        idx = self.global_indices()
        return dist.shard(idx) if self.split else idx

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One private batch ``(x: (b, ...), y: (b,))``."""
        return self.source._gather(self.sample_indices())

    def state_dict(self) -> dict:
        return {"generator": generator_state(self.generator), "size_generator": generator_state(self.size_generator),
                "draws": self.draws, "sampling": self.sampling, "over_capacity": self.over_capacity}

    def load_state_dict(self, state: dict) -> None:
        if state["sampling"] != self.sampling:
            raise PrivacySettingError("sampling", f"cannot resume: the checkpoint's batches were drawn with "
                                                  f"{state['sampling']} sampling but this run uses {self.sampling}; "
                                                  "resume with the same sampling")
        resumed_generator(self.generator, state["generator"])  # another device type: reseeded (module docstring)
        if "size_generator" in state:
            resumed_generator(self.size_generator, state["size_generator"])
        self.draws = int(state["draws"])
        self.over_capacity = int(state.get("over_capacity", 0))
        self._prepared = None
