"""One CUDA graph per step: a method's whole step, release included, captured once and replayed
(``trainer.graph``; the loop's step phase runs every step through :class:`StepRunner`).

``StepRunner(method, ledger, ctx).run(t)`` is ``method.step(t)`` when ``ctx.graph`` is off.  On:

1. before every step, the host part of the step is done outside any graph: the sampler's
   :meth:`~dpgen.privacy.sampler.PrivateSampler.prepare` draws the Poisson batch size K on the host and
   writes it into its device buffer (a ``fill_``: no host-to-device copy);
2. a step the graph cannot take runs eagerly, as without a graph: one whose K exceeds the sampler's
   capacity (the exact batch of that K; counted in the sampler's checkpointed state, ``over_capacity``: a
   function of the batch sizes, whose law depends on the private N, so never published), or one the method
   declares not capturable (:meth:`~dpgen.methods.base.Method.capturable`: a host-side dependence on ``t``);
3. the first :data:`WARMUP` capturable steps run eagerly on a side stream (lazy optimiser state, cuBLAS
   handles, the allocator: what ``torch.cuda.graph`` requires before a capture);
4. the next one is captured under ``torch.cuda.graph`` with every generator the step draws from registered
   (:meth:`~dpgen.methods.base.Method.generators`; ``CUDAGraph.register_generator_state``); the returned
   values are the graph's static outputs; Adam runs with ``capturable=True`` (its step counts on the device);
5. every later capturable step is one ``replay()``.

An eager step of a run with a graph (a warm-up step, one the graph cannot take) makes its records right after
the step, as a replay does (:meth:`StepRunner._eager`).

``trainer.graph=auto`` (the default on a CUDA run): a capture that fails (an operation a graph cannot hold) is
said in one console line and the run goes on eagerly (:meth:`StepRunner._give_up`: a capture runs no kernel, so
nothing it deferred is recorded); ``trainer.graph=on`` raises instead.

The privacy argument of a replay.  What is captured is the step's kernels, with the mechanism's noise
draw ``randn(shape, generator=mech.generator) * noise_std``: the std is the calibrated constant the
mechanism fixed once (a Python float baked into the kernel, the same number the eager step multiplies by),
and the draw reads its generator's Philox seed and offset from the generator's graph-safe state.  Each
``replay()`` first advances every registered generator's offset by the total the captured step consumed,
so every replay draws fresh noise (the next numbers of the same stream an eager run would have drawn, in
the same amounts), never a repeat of the captured draw.  The ledger records in Python, which a graph
cannot replay: during the capture :meth:`~dpgen.privacy.ledger.PrivacyLedger.deferred` collects the
records the step's mechanisms make (nothing is recorded then), and after EACH replay they are applied
once: one record per replayed release, the same entry the eager step makes (``Mechanism._record``).  The
budget check before each step is unchanged, so the run stops where the eager run stops.  The batch of a
replay is the sampler's padded Poisson batch (the law argued in ``padded_batch``: exactly the
accountant's sampling); nothing is read back from the device inside the graph.  Checkpoints are written
between replays, with the generators' states after the last replay; a resumed run captures again.

What each family captures (``Method.capturable``; the step's public randomness draws from the method's generator
``Method.rng``, checkpointed by the loop; a model's dropout masks from the device's default generator, which torch
registers with every capture itself):

* DP-SWD generator, DPSWgen, DPSWflow-r, DPSWflow (after its one release at step 0): every step (fixed-size
  batches); the DP-SWD generator with the CelebA feature map (its public batch drawn on the host): eager;
* DP-SGD, DP-Sinkhorn, DP-DANN: every step, the Poisson batch padded (``padded_batch``); eager: a batch above
  the capacity, DP-Sinkhorn with another loss than the semi-debiased one (its padding would need GeomLoss'
  weights).  DP-SGD with the data-dependent reports captures them too: the pair distances are computed inside the
  step into a static buffer, and their accounting is submitted like a record (``ledger.ReportedStep``): after
  each replay a copy of the buffer goes to the reported-only accountants, which read it on the host when their
  epsilon is read (``trainer.log_every``, a checkpoint, the end);
* the domain adapters (DP-SWD, DP-DANN, and the non-private DANN / SWD baselines when their batch is static): the
  aligning steps; the warm-up steps before ``model.start_align`` run eagerly (another step);
* the non-private baselines of the other families: as their private family (the same step, noise 0).

``backend``: ``"cuda"`` (a CUDA run) or ``"emulated"`` (``trainer.graph=on`` off CUDA, and the tests): the
same bookkeeping without a graph: the capture runs the step with the records deferred and applies them,
and a replay runs the captured callable again with its own records deferred and discarded, then applies
the captured ones (so a step whose releases changed after the capture fails loudly here, as it would
silently under a graph).
"""

from __future__ import annotations

import torch
from rich.console import Console

from ..privacy import PrivacyLedger
from ..utils.misc import on_gpu
from .base import Method, TrainContext

WARMUP = 3  # eager steps before the capture (torch.cuda.graph's warm-up on a side stream)


class StepRunner:
    """``run(t)``: one step of ``method`` (module docstring).  ``captures``, ``replays``, ``eager``: counts of the
    run's steps by kind (``summary()``: results.json ``train``)."""

    def __init__(self, method: Method, ledger: PrivacyLedger, ctx: TrainContext, backend: str | None = None,
                 warmup: int = WARMUP) -> None:
        self.method, self.ledger = method, ledger
        on = bool(getattr(ctx, "graph", False))
        self.backend = backend if backend is not None else (
            None if not on else "cuda" if on_gpu(ctx.device) else "emulated")
        self.warmup = int(warmup)
        self.graph = None
        self._t = 0  # the captured step's index
        self.outputs: dict | None = None
        self.records: list = []  # the captured step's ledger records (callables), applied after each replay
        self.draws = 0  # the captured step's sampler draws (counted per replay)
        self.warm = self.captures = self.replays = self.eager = 0
        self._side = None
        self.required = bool(getattr(ctx, "graph_required", False))  # trainer.graph=on: a failed capture is an error
        self.failed: str | None = None  # auto: why the capture failed (the run went on eagerly)

    # -- the step ------------------------------------------------------------------------------
    def run(self, t: int) -> dict:
        m = self.method
        if self.backend is None:
            return m.step(t)
        fits = m.sampler.prepare() if m.sampler is not None else True  # the host's K, outside the graph
        if not fits or not m.capturable(t):
            self.eager += 1
            return self._eager(t)
        if self.warm < self.warmup:
            self.warm += 1
            return self._warm_step(t)
        if self.graph is None:
            return self._capture(t)
        return self._replay()

    def _eager(self, t: int) -> dict:
        """An eager step, its records made right after it, as after a replay: every step of the run, however it ran,
        dispatches the same operations inside ``method.step`` (a record's host work, e.g. copying a report's
        device statistics, comes after the step)."""
        with self.ledger.deferred() as records:
            out = self.method.step(t)
        for pending in records:
            pending()
        return out

    def _warm_step(self, t: int) -> dict:
        if self.backend != "cuda":
            return self._eager(t)
        if self._side is None:
            self._side = torch.cuda.Stream()
        self._side.wait_stream(torch.cuda.current_stream())
        with self.ledger.deferred() as records, torch.cuda.stream(self._side):
            out = self.method.step(t)
        torch.cuda.current_stream().wait_stream(self._side)
        for pending in records:
            pending()  # on the current stream, after the step's kernels
        return out

    def _capture(self, t: int) -> dict:
        m = self.method
        self._t = t
        draws = m.sampler.draws if m.sampler is not None else 0
        if self.backend == "cuda":
            graph = torch.cuda.CUDAGraph()
            for gen in m.generators():
                if on_gpu(gen.device):
                    graph.register_generator_state(gen)
            try:
                with self.ledger.deferred() as records, torch.cuda.graph(graph, stream=self._side):
                    self.outputs = m.step(t)
            except Exception as err:  # noqa: BLE001 - auto: the run goes on eagerly, and says so
                if self.required:
                    raise
                return self._give_up(t, draws, err)
            self.graph = graph
        else:
            with self.ledger.deferred() as records:
                self.outputs = m.step(t)
            self.graph = "emulated"
        self.records = list(records)
        if m.sampler is not None:  # the capture's draws are counted per replay (_apply)
            self.draws, m.sampler.draws = m.sampler.draws - draws, draws
        self.captures += 1
        if self.backend == "cuda":
            return self._replay()  # a capture records the kernels without running them: the step is its first replay
        self._apply()
        return self.outputs

    def _give_up(self, t: int, draws: int, err: Exception) -> dict:
        """``trainer.graph=auto`` and the capture failed: nothing it recorded ran (a capture runs no kernel), so its
        deferred records are dropped and the step runs eagerly, releasing and recording as without a graph; so do all
        later steps.  One console line names the reason."""
        if self.method.sampler is not None:
            self.method.sampler.draws = draws
        self.backend, self.graph, self.failed = None, None, f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        Console(stderr=True).log(f"trainer.graph=auto: the step could not be captured as a CUDA graph ({self.failed}); "
                                 "the run goes on with eager steps (trainer.graph=off skips the attempt)")
        torch.cuda.synchronize()
        return self.method.step(t)

    def _replay(self) -> dict:
        if self.backend == "cuda":
            self.graph.replay()
        else:
            sampler = self.method.sampler
            draws = sampler.draws if sampler is not None else 0
            with self.ledger.deferred() as again:
                self.outputs = self.method.step(self._t)  # what the graph replays: the captured step's host decisions
            if [r.entry for r in again] != [r.entry for r in self.records]:
                raise RuntimeError("a replayed step released other mechanisms than the captured step: the step is "
                                   "not static (declare it with Method.capturable)")
            if sampler is not None:
                sampler.draws = draws  # counted once, by _apply
        self._apply()
        return self.outputs

    def _apply(self) -> None:
        """The captured step's Python side effects, once per replay: its ledger records, its sampler draws."""
        for pending in self.records:
            pending()  # the mechanism's own recording (Mechanism._record), as the eager step makes it
        if self.method.sampler is not None:
            self.method.sampler.draws += self.draws
        self.replays += 1

    def summary(self) -> dict:
        """results.json ``train`` entries: how the steps ran.  With a padded Poisson batch the split between replays and
        eager steps includes the steps whose batch exceeded the capacity, a function of the batch sizes whose law
        depends on the private N: only the backend is published then (the count stays in the checkpoint's sampler
        state, ``over_capacity``).  Otherwise the counts follow the public schedule (warm-up, capture, replays)."""
        if self.failed is not None:
            return {"graph": "off", "graph_failed": self.failed}
        sampler = self.method.sampler
        if sampler is not None and sampler.capacity is not None:
            return {"graph": self.backend}
        return {"graph": self.backend or "off", "graph_captures": self.captures, "graph_replays": self.replays,
                "steps_eager": self.eager + self.warm}
