"""Step overhead, counted on the CPU as a CUDA run would take it (``dpgen bench --only step-overhead``).

A private step that reads a device value or copies a host tensor to the device stalls the GPU: the
host waits for the device (a read: ``.item()``, ``nonzero``, ...) or the device for the host (a blocking
host-to-device copy of a tensor drawn or built on the host).  This module counts both on a CPU-only
machine, in one place used by the test of every private family (``tests/runs/test_device.py``) and by
the bench:

* :class:`StepOps` is a ``TorchDispatchMode`` plus a few Python-level hooks that follow, for every
  tensor of the run, where it would live in a CUDA run of the same code: on the **device** when the
  code asked for the run's device (a factory given ``device=<torch.device>``, ``.to(<torch.device>)``
  or ``.to(<tensor on the device>)``, ``Module.to(device)``), and every result computed from a device
  tensor; on the **host** otherwise (a factory without ``device=`` or with the string ``"cpu"``, a
  tensor built from Python data, ``.cpu()``, ``.to("cpu")``).  The CPU run computes the same values;
  only the bookkeeping differs.  A CPU machine cannot tell ``device=ctx.device`` from
  ``device="cpu"`` by value, so the string ``"cpu"`` is taken as the host and a ``torch.device`` as the
  run's device (dpgen passes ``ctx.device``, a ``torch.device``, everywhere it means the run's device).
  A tensor that a composite op creates inside itself lives with the op's inputs (the run's device).
  ``.to(device)`` of a host tensor returns a new tensor on CUDA but the same one on a CPU: the counting run
  hands back a view of it instead, so the host tensor stays on the host (a module's parameters move).
  ``F.one_hot`` with a class count checks the labels' range on the host on a CPU but not on CUDA (a device
  assert): it counts as one op of its input's placement.
  Code that reads a value only on the host (``utils.misc.on_host``) takes its device path.
* Counted per step:

  - **device reads** (a sync: the host waits for the device): the ops in :data:`READ_OPS` on a device
    tensor (``_local_scalar_dense`` is ``.item()`` / ``float()`` / ``int()`` / ``bool()``; ``nonzero``,
    ``masked_select``, ``unique``, ``repeat_interleave`` without ``output_size`` and boolean-mask
    indexing have an output size that depends on device values; ``equal`` / ``is_nonzero`` return a
    Python value), and ``.tolist()`` / ``.numpy()`` / a blocking ``.cpu()`` or ``.to("cpu")`` of a
    device tensor;
  - **host-to-device copies**: ``.to(device)`` (or ``.to(device_tensor)``) of a host tensor,
    ``copy_`` of a host tensor into a device one, ``torch.tensor(..., device=)`` from Python data, and
    any op that meets a host tensor with at least one dimension and a device tensor (CUDA copies the
    host operand first, e.g. indexing with a host index or a Python list, or refuses the op);
  - **aten ops** dispatched, and **device kernels** (estimate: the ops that are not views, on device
    tensors);
  - **host random numbers**: the entries drawn by random ops whose result lives on the host.

:func:`family_steps` runs a family's short preset through the real pipeline under :class:`StepOps`
and returns the counts of every step interval (step t's ``method.step`` plus the loop's work up to step
t + 1); :func:`section` is the bench's table, with the CPU milliseconds of the same minimal step.
:func:`mnist_rows` (``python -m dpgen.bench.step_overhead --mnist``) counts every family's step at its MNIST
preset (:data:`MNIST`) and checks it is static; :func:`compile_rows` (``python -m dpgen.bench.step_overhead
--compile``) times the same minimal step with ``trainer.compile`` off and on, in one process, in alternating
blocks of steps.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from .op_count import RANDOM_OPS, READ_OPS, OpCounter, flatten, generator_of, is_kernel, signature

__all__ = ["MNIST", "READ_OPS", "RANDOM_OPS", "Counts", "StepOps", "family_steps", "mnist_rows", "static_check"]

aten = torch.ops.aten

# Python-level factories whose placement is decided by their ``device=`` argument
FACTORIES = ("randn", "rand", "randint", "randperm", "normal", "zeros", "ones", "empty", "full", "arange",
             "linspace", "eye", "tensor", "as_tensor", "scalar_tensor", "zeros_like", "ones_like", "empty_like",
             "full_like", "randn_like", "rand_like")
FROM_DATA = ("tensor", "as_tensor")  # built from Python data: on the device, a host-to-device copy


@dataclass
class Counts:
    """What one step interval dispatched (see the module docstring)."""

    ops: int = 0
    kernels: int = 0
    reads: int = 0
    copies: int = 0
    host_random: int = 0
    where: list[str] = field(default_factory=list)  # the first reads and copies, for the test's message
    # inside ``method.step`` only (the part a capture takes): each op's signature (op, argument shapes and dtypes)
    # and each random op's generator (None: the global default generator) with its placement
    sequence: list[tuple] = field(default_factory=list)
    random: list[tuple[str, object, bool]] = field(default_factory=list)

    def note(self, kind: str, what: str) -> None:
        if len(self.where) < 12:
            self.where.append(f"{kind}: {what} at {_caller()}")


def _caller() -> str:
    """The innermost frame of dpgen's own code (not this module's) that led to the current op."""
    import traceback

    here = Path(__file__).resolve()
    package = here.parent.parent
    for frame in reversed(traceback.extract_stack()):
        path = Path(frame.filename).resolve()
        if path != here and package in path.parents:
            return f"{path.relative_to(package.parent)}:{frame.lineno}"
    return "?"


def _is_device_arg(dev) -> bool | None:
    """``True``: the run's device; ``False``: the host; ``None``: not given."""
    if dev is None:
        return None
    if isinstance(dev, str):
        return dev != "cpu"
    if isinstance(dev, torch.device):
        return True
    return None


class StepOps(OpCounter):
    """Follows host / device placement of every tensor and counts per step interval (module docstring), in the
    vocabulary of :mod:`dpgen.bench.op_count` (whose counter it extends).

    ``with StepOps() as ops: ...`` installs it; ``ops.mark()`` starts a new interval (``ops.intervals``
    holds the finished ones); nothing is counted before the first ``mark``; ``ops.in_step`` (set around
    ``method.step`` by :func:`family_steps`) says whether the op is the step's own (its signature is kept)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_step = False
        self.declared: list[torch.Generator] = []  # the counted method's generators() (set at its first step)
        self.on_device = WeakTensorKeyDictionary()
        self.current: Counts | None = None
        self.intervals: list[Counts] = []
        self._pending: bool | None = None  # placement of the factory being called
        self._quiet = 0  # inside an op whose CPU kernel reads values that its CUDA kernel does not (F.one_hot)
        self._patches: list[tuple[object, str, object]] = []

    # -- placement --------------------------------------------------------------------------
    def device(self, t) -> bool:
        return isinstance(t, torch.Tensor) and self.on_device.get(t, False)

    def _tag(self, out, on_device: bool) -> None:
        for t in (out if isinstance(out, (tuple, list)) else [out]):
            if isinstance(t, torch.Tensor):
                self.on_device[t] = on_device

    def mark(self) -> None:
        if self.current is not None:
            self.intervals.append(self.current)
        self.current = Counts()

    def stop(self) -> None:
        self.mark()
        self.current = None

    def _read(self, what: str) -> None:
        if self.current is not None and not self._quiet:
            self.current.reads += 1
            self.current.note("device read", what)

    def _copy(self, what: str) -> None:
        if self.current is not None and not self._quiet:
            self.current.copies += 1
            self.current.note("host-to-device copy", what)

    # -- the dispatcher ---------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func.overloadpacket)
        flat = [a for a in flatten((args, kwargs)) if isinstance(a, torch.Tensor)]
        dev = [self.device(t) for t in flat]
        if not flat:  # a factory: where the Python call asked for it (inside a composite op: with its inputs)
            on_device = True if self._pending is None else self._pending
        elif name == "aten.copy_":  # dst keeps its place; a host source into a device dst is a copy
            on_device = dev[0]
            if dev[0] and not dev[1]:
                self._copy(f"copy_ of a host tensor {tuple(flat[1].shape)}")
            elif dev[1] and not dev[0]:
                self._read(f"copy_ of a device tensor {tuple(flat[1].shape)} to the host")
        else:
            on_device = any(dev)
            if on_device and any(not d and t.dim() > 0 for d, t in zip(dev, flat, strict=True)):
                self._copy(f"{name} meets a host tensor "
                           f"{[tuple(t.shape) for d, t in zip(dev, flat, strict=True) if not d and t.dim() > 0]}")
        self._tag(out, on_device)
        c = self.current
        if c is not None and not self._quiet:
            c.ops += 1
            if on_device and is_kernel(func):
                c.kernels += 1
            if on_device and (name in READ_OPS or _bool_index(name, args)):
                self._read(name)
            if name in RANDOM_OPS and not on_device and self.in_step:  # (the sampler's host size: before the step)
                c.host_random += sum(t.numel() for t in (out if isinstance(out, (tuple, list)) else [out])
                                     if isinstance(t, torch.Tensor))
            if self.in_step:
                c.sequence.append(signature(func, args, kwargs))
                if name in RANDOM_OPS:
                    c.random.append((name, self._which(generator_of(args, kwargs)), on_device))
        return out

    def _which(self, gen) -> str:
        """``"global"`` (the default generator), ``"declared"`` (one of ``self.declared``: the method's
        ``generators()``) or ``"other"``.  The dispatcher hands an op a new Python wrapper of its generator, so a
        generator is recognised by its state at the draw (distinct seeds: distinct states)."""
        if gen is None:
            return "global"
        state = gen.get_state()
        same = any(g.device == gen.device and torch.equal(g.get_state(), state) for g in self.declared)
        return "declared" if same else "other"

    # -- Python-level entry points (placement the dispatcher cannot see on a CPU) -------------
    def __enter__(self):
        self._install()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for obj, attr, orig in reversed(self._patches):
                setattr(obj, attr, orig)
            self._patches.clear()

    def _patch(self, obj, attr: str, make) -> None:
        orig = getattr(obj, attr)
        self._patches.append((obj, attr, orig))
        setattr(obj, attr, make(orig))

    def _install(self) -> None:
        me = self
        for fname in FACTORIES:
            def factory(orig, fname=fname):
                def f(*a, **k):
                    like = a[0] if fname.endswith("_like") and a and isinstance(a[0], torch.Tensor) else None
                    asked = _is_device_arg(k.get("device"))
                    if asked is None:
                        src = a[0] if fname in FROM_DATA and a and isinstance(a[0], torch.Tensor) else like
                        asked = me.device(src) if src is not None else False
                    elif asked and fname in FROM_DATA and not (a and me.device(a[0])):
                        me._copy(f"torch.{fname}(..., device=) from host data")
                    prev, me._pending = me._pending, asked
                    try:
                        out = orig(*a, **k)
                    finally:
                        me._pending = prev
                    me._tag(out, asked)
                    return out
                return f
            self._patch(torch, fname, factory)

        def to(orig):
            def f(t, *a, **k):
                target = k.get("device")
                for x in a:
                    if isinstance(x, (str, torch.device, torch.Tensor)):
                        target = x
                        break
                # .to(other): other's placement (a tensor this module has not seen, e.g. a functorch wrapper
                # inside vmap / grad, is taken to be where the source is: no copy is counted)
                want = me.on_device.get(target) if isinstance(target, torch.Tensor) else _is_device_arg(target)
                out = orig(t, *a, **k)
                if want is None:
                    me._tag(out, me.device(t))
                    return out
                if out is t and want != me.device(t) and not isinstance(t, torch.nn.Parameter):
                    out = t.view_as(t)  # CUDA makes a new tensor; a CPU run returns t: keep t where it was
                if want and not me.device(t):
                    me._copy(f".to(device) of a host tensor {tuple(t.shape)}")
                elif not want and me.device(t) and not k.get("non_blocking", False):
                    me._read(f"blocking .to('cpu') of a device tensor {tuple(t.shape)}")
                me._tag(out, want)
                return out
            return f

        def cpu(orig):
            def f(t, *a, **k):
                if me.device(t):
                    me._read(f".cpu() of a device tensor {tuple(t.shape)}")
                out = orig(t, *a, **k)
                me._tag(out, False)
                return out
            return f

        def host_read(what):
            def make(orig):
                def f(t, *a, **k):
                    if me.device(t):
                        me._read(f".{what}() of a device tensor {tuple(t.shape)}")
                    return orig(t, *a, **k)
                return f
            return make

        def cuda_kernel(orig):  # counted as ONE op of its input's placement (the CUDA kernel reads nothing)
            def f(t, *a, **k):
                me._quiet += 1
                try:
                    out = orig(t, *a, **k)
                finally:
                    me._quiet -= 1
                me._tag(out, me.device(t))
                if me.current is not None:
                    me.current.ops += 1
                    me.current.kernels += int(me.device(t))
                return out
            return f

        self._patch(torch.nn.functional, "one_hot", cuda_kernel)
        self._patch(torch.Tensor, "to", to)
        self._patch(torch.Tensor, "cpu", cpu)
        for what in ("tolist", "numpy", "__array__"):
            self._patch(torch.Tensor, what, host_read(what))


def _bool_index(name: str, args) -> bool:
    """Boolean-mask indexing (``x[mask]``, ``x[mask] = v``): a ``nonzero`` on the device first."""
    if name not in ("aten.index", "aten.index_put", "aten.index_put_", "aten._index_put_impl_"):
        return False
    idx = [i for i in (args[1] if len(args) > 1 else None) or [] if i is not None]
    masks = [i for i in idx if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)]
    if name != "aten.index" and len(idx) == len(masks) == 1 and len(args) > 2 and isinstance(args[2], torch.Tensor) \
            and args[2].numel() == 1:
        return False  # x[mask] = scalar: PyTorch's index_put_ runs it as masked_fill_ (no nonzero, no sync)
    return bool(masks)


# -- the families, through the real pipeline ------------------------------------------------------
AE_SHORT = ["model.ae_steps=3", "model.ae_batch_size=32", "model.autoencoder_cache=null"]
# the smallest sizes a family's preset takes (a batch of one record per class, 10 directions, few particles and
# levels): the step's cost is then its overhead (dispatch, Python, syncs), what a GPU step at these presets pays
SMALL = ["model.batch_size=10"]
FLOW = [*AE_SHORT, *SMALL, "model.n_particles=20", "model.num_percentiles=10", "model.dp.num_projections=10"]
# family -> (name shown, composition of a short run at those sizes)
FAMILIES: dict[str, tuple[str, list[str]]] = {
    "dpswd_generator": ("DP-SWD generator", ["experiment=digits_dpswd", *SMALL, "model.dp.num_projections=10",
                                             "model.generator.hidden=16"]),
    "dpswd_adapter": ("DP-SWD adapter", ["experiment=digits_shift_dpswd", *SMALL, "model.start_align=0",
                                         "model.alignment.dp.num_projections=10"]),
    "dp_dann": ("DP-DANN", ["experiment=digits_shift_dp_dann", *SMALL, "model.start_align=0"]),
    "dpswflow_r": ("DPSWflow-r", ["experiment=digits_dpswflow_r", *FLOW]),
    "dpswflow": ("DPSWflow", ["experiment=digits_dpswflow_r", "model=dpswflow", "experiment_name=digits_dpswflow",
                              *FLOW, "model.steps=8", "model.projections_per_step=5"]),
    "dpswgen": ("DPSWgen", ["experiment=digits_dpswd", "model=dpswgen", "experiment_name=digits_dpswgen",
                            "dataset.public_fraction=0.5", "model.autoencoder.width=16", "model.autoencoder.pad_to=8",
                            *AE_SHORT, *SMALL, "model.dp.num_projections=10"]),
    "dpsgd_classifier": ("DP-SGD classifier", ["experiment=digits_dpsgd", *SMALL]),
    "dpsinkhorn": ("DP-Sinkhorn", ["experiment=digits_dpsinkhorn", *SMALL]),
}
# family -> its MNIST preset (MNIST / USPS for the adapters), shortened only where the private step's shapes stay:
# the adapters align from the first step (model.start_align=0: the steps before it touch no private record), the
# autoencoder of DPSWgen / DPSWflow-r / DPSWflow pre-trains for 3 steps on the public half (before the private
# steps; no cache); the batch, the image size, the networks, the projections and the ε-scaling are the preset's
AE_MNIST = ["model.ae_steps=3", "model.autoencoder_cache=null"]
MNIST: dict[str, list[str]] = {
    "dpswd_generator": ["experiment=mnist_dpswd"],
    "dpswd_adapter": ["experiment=mnist_usps_dpswd", "model.start_align=0"],
    "dp_dann": ["experiment=mnist_usps_dp_dann", "model.start_align=0"],
    "dpswflow_r": ["experiment=mnist_dpswflow_r", *AE_MNIST],
    "dpswflow": ["experiment=mnist_dpswflow", *AE_MNIST],
    "dpswgen": ["experiment=mnist_dpswgen", *AE_MNIST],
    "dpsgd_classifier": ["experiment=mnist_dpsgd"],  # as it ships: the WA / BA reports on
    "dpsinkhorn": ["experiment=mnist_dpsinkhorn"],
}
# the choices a CUDA run's ``auto`` makes where a CPU run's differs (dpgen.privacy.per_sample.resolve_rule: the
# per-sample path is ghost on a CPU, unfold on CUDA): a counted run takes the CUDA run's path
CUDA_CHOICES: dict[str, list[str]] = {
    "dpsgd_classifier": ["model.per_sample=unfold"],
    "dp_dann": ["model.alignment.per_sample=unfold"],
}
STEPS = 6  # steps of a counted run: step 0 warms up (lazy optimiser state), the last interval logs
RUN = ["logger=local", "evaluator=none", "trainer.progress=false", "trainer.device=cpu", "trainer.deterministic=true",
       f"trainer.max_steps={STEPS}", f"trainer.log_every={STEPS}", f"trainer.checkpoint_every={10 * STEPS}"]


@dataclass
class FamilySteps:
    """The counted intervals of a family's short run, and the set-up method (to time more steps)."""

    intervals: list[Counts]
    method: object

    @property
    def steady(self) -> list[Counts]:
        """Intervals of steady-state steps: not the first two (lazy state, a one-shot release) nor the last
        (it holds the log, the checkpoint and the release artefact)."""
        return self.intervals[2:-1]

    def worst(self, attr: str) -> int:
        return max(getattr(c, attr) for c in self.steady)


def compose(overrides: list[str], run_dir: Path):
    """The composed config of ``python train.py <overrides>`` with its run folder (data: $DPGEN_DATA_ROOT, else the
    checkout's data/; the digits presets need none)."""
    from dpgen.config import compose as compose_config
    from dpgen.paths import ROOT

    return compose_config(overrides, data_root=os.environ.get("DPGEN_DATA_ROOT", str(ROOT / "data")), output_dir=run_dir)


@contextlib.contextmanager
def _counting_train(ops: StepOps, seen: dict):
    """``loop.train`` with ``ops.mark()`` at the start of every ``method.step`` (the pipeline's loop)."""
    from dpgen.methods import loop

    original = loop.train

    def train(method, data, ledger, ctx):
        step = method.step
        seen["method"] = method

        def marked(t):
            ops.mark()
            ops.declared = method.generators()
            ops.in_step = True
            try:
                return step(t)
            finally:
                ops.in_step = False

        method.step = marked
        try:
            return original(method, data, ledger, ctx)
        finally:
            ops.stop()
            del method.step

    loop.train = train
    try:
        yield
    finally:
        loop.train = original


def family_steps(family: str, run_dir: Path, extra: list[str] | tuple[str, ...] = (),
                 preset: list[str] | None = None) -> FamilySteps:
    """Run ``family``'s short preset (:data:`FAMILIES`, or the composition ``preset``, e.g. an MNIST preset) on the
    CPU under :class:`StepOps`; per-step counts."""
    import dpgen.ot.flows
    import dpgen.utils.misc
    from dpgen.pipeline import run

    gc.collect()  # an earlier counted run's reference cycles (its method, data, run): one process counts many runs
    cfg = compose([*(FAMILIES[family][1] if preset is None else preset), *RUN, *CUDA_CHOICES.get(family, ()), *extra],
                  run_dir)
    ops, seen = StepOps(), {}
    hosts = [(mod, mod.on_host) for mod in (dpgen.utils.misc, dpgen.ot.flows)]
    for mod, _ in hosts:  # the value-dependent shortcuts of a host tensor: off for a device tensor
        mod.on_host = lambda t: not ops.device(t)
    try:
        with _counting_train(ops, seen), ops:
            run(cfg)
    finally:
        for mod, fn in hosts:
            mod.on_host = fn
    return FamilySteps(ops.intervals, seen["method"])


# ``nn.Dropout`` draws its masks from the device's default generator (it takes no generator); torch registers that
# generator with every capture itself, so a replay draws fresh masks: the one draw the check lets through
DROPOUT_OPS = frozenset({"aten.bernoulli_", "aten.bernoulli", "aten.native_dropout"})


def static_check(fs: FamilySteps, steps: tuple[int, int] = (2, 3)) -> list[str]:
    """The static-step check of a counted run (:func:`family_steps`, with ``trainer.graph=on``: static shapes):
    what makes two consecutive steady-state steps unfit for one captured graph, as lines (empty: fit).

    * the two steps dispatch exactly the same sequence of aten ops with the same shapes and dtypes;
    * every random op draws from a generator the capture registers (``method.generators()``), none from the global
      default generator (but a model's dropout masks: :data:`DROPOUT_OPS`), none on the host;
    * no device read and no host-to-device copy (over the whole step interval);
    * the method declares both steps capturable."""
    method = fs.method
    a, b = (fs.intervals[i] for i in steps)
    faults = []
    if a.sequence != b.sequence:
        first = next((i for i, (x, y) in enumerate(zip(a.sequence, b.sequence, strict=False)) if x != y),
                     min(len(a.sequence), len(b.sequence)))
        faults.append(f"steps {steps[0]} and {steps[1]} dispatch different ops ({len(a.sequence)} vs "
                      f"{len(b.sequence)}; first difference at op {first}: "
                      f"{a.sequence[first] if first < len(a.sequence) else None} vs "
                      f"{b.sequence[first] if first < len(b.sequence) else None})")
    for c in (a, b):
        for name, which, on_device in c.random:
            if which == "global" and name in DROPOUT_OPS and on_device:
                continue  # a model's dropout mask: the device's default generator, which torch registers with every capture
            if which == "global":
                faults.append(f"{name} draws from the global default generator")
            elif which == "other":
                faults.append(f"{name} draws from a generator the method does not declare (Method.generators)")
            elif not on_device:
                faults.append(f"{name} draws on the host inside the step")
        if c.reads or c.copies:
            faults.append(f"{c.reads} device reads and {c.copies} host-to-device copies: {c.where}")
    faults += [f"step {t} is declared not capturable" for t in steps if not method.capturable(t)]
    return list(dict.fromkeys(faults))


def step_ms(method, first: int, repeats: int = 30) -> float:
    """Median CPU milliseconds (``time.process_time``) of ``repeats`` more steps of a set-up method."""
    times = []
    for t in range(first, first + repeats):
        t0 = time.process_time()
        method.step(t)
        times.append(time.process_time() - t0)
    return 1e3 * statistics.median(times)


def measure(family: str) -> dict:
    """The bench's row of ``family``: worst steady-state counts and the CPU ms of one more step."""
    with tempfile.TemporaryDirectory() as tmp:
        fs = family_steps(family, Path(tmp) / "run")
        ms = step_ms(fs.method, STEPS)
    return {"ops": fs.worst("ops"), "kernels": fs.worst("kernels"), "reads": fs.worst("reads"),
            "copies": fs.worst("copies"), "host_random": fs.worst("host_random"), "ms": ms}


def section(device: torch.device) -> str:
    """The markdown section ``dpgen bench --only step-overhead`` writes into docs/benchmarks.md (one torch thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = []
        for family, (label, _) in FAMILIES.items():
            print(f"[bench] overhead: {label} ...", flush=True)
            m = measure(family)
            rows.append(f"| {label} | {m['ops']} | {m['kernels']} | {m['reads']} | {m['copies']} | "
                        f"{m['host_random']:,} | {m['ms']:.2f} |")
    finally:
        torch.set_num_threads(threads)
    load = os.getloadavg()
    wrap = partial(textwrap.fill, width=110, break_long_words=False, break_on_hyphens=False)
    return "\n".join([
        "## Step overhead (counted on the CPU as a CUDA run takes it)", "", wrap(
        "Per family, one steady-state private step of its digits preset at the smallest sizes it takes (a batch of "
        "10 records, one per class; 10 directions; 20 particles and 10 levels for the flows: "
        "`dpgen/bench/step_overhead.py`), the worst of the steps 2-4 of a 6-step run through the real pipeline and "
        "loop (the loop's work up to the next step included): aten ops dispatched, device kernels (estimate: the ops "
        "that are not views, on tensors that a CUDA run keeps on the device), device reads (syncs) and "
        "host-to-device copies, entries drawn by host random number generators, and the median CPU time of 30 "
        "more steps (`time.process_time`, one torch thread). Counts are exact and may be asserted; times depend "
        f"on the machine (load average {load[0]:.1f} at the end). `dpgen bench --only step-overhead` regenerates it."), "",
        "| family | aten ops / step | device kernels / step | device reads / step | host-to-device copies / step "
        "| host random numbers / step | CPU ms / step |",
        "|---|---|---|---|---|---|---|", *rows]) + "\n"


def mnist_rows(families: tuple[str, ...] = tuple(MNIST)) -> list[str]:
    """Per family, its MNIST preset (:data:`MNIST`) run for :data:`STEPS` steps with ``trainer.graph=on`` (static
    shapes, the emulated capture) under :class:`StepOps`: the aten ops the captured step dispatches (step 3, the
    capture), the device kernels of its step interval, and the static-step check (:func:`static_check`).  Needs
    MNIST and USPS under ``$DPGEN_DATA_ROOT``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        for family in families:
            print(f"[bench] MNIST preset: {FAMILIES[family][0]} ...", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                fs = family_steps(family, Path(tmp) / "run", ["trainer.graph=on"], preset=MNIST[family])
            faults = static_check(fs)
            rows.append(f"| {FAMILIES[family][0]} | `{' '.join(MNIST[family])}` | {len(fs.intervals[3].sequence)} | "
                        f"{fs.intervals[3].kernels} | {'static' if not faults else 'NOT static: ' + faults[0]} |")
            print(f"[bench] {rows[-1]}", flush=True)
    finally:
        torch.set_num_threads(threads)
    return ["| family | MNIST preset, as counted | aten ops in the step | device kernels / step | static-step check |",
            "|---|---|---|---|---|", *rows]


# the families whose step trainer.compile changes (dpgen.utils.compiling); the flows have no model or optimiser step
COMPILED = ("dpswd_generator", "dpswd_adapter", "dp_dann", "dpswgen", "dpsgd_classifier")


def set_up(family: str, run_dir: Path, extra: list[str] | tuple[str, ...] = ()) -> tuple[object, float]:
    """``family``'s short preset run through the real pipeline (no counting); its method, and the wall seconds
    of the run (set-up and the :data:`STEPS` steps: with ``trainer.compile=on``, the compilation, whose C++ builds
    run in worker processes)."""
    from dpgen.methods import loop
    from dpgen.pipeline import run

    cfg, seen, original = compose([*FAMILIES[family][1], *RUN, *extra], run_dir), {}, loop.train

    def train(method, data, ledger, ctx):
        seen["method"] = method
        return original(method, data, ledger, ctx)

    loop.train = train
    t0 = time.perf_counter()
    try:
        run(cfg)
    finally:
        loop.train = original
    return seen["method"], time.perf_counter() - t0


def compile_rows(families: tuple[str, ...] = COMPILED, rounds: int = 6, block: int = 15) -> list[str]:
    """Per family, the median CPU ms of the minimal step with ``trainer.compile=off`` and ``on`` (both methods
    set up in this process, timed in ``rounds`` alternating blocks of ``block`` steps, one torch thread), and the
    wall seconds of each short run (the compiled one compiles)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        for family in families:
            print(f"[bench] compile: {FAMILIES[family][0]} ...", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                eager, run_eager = set_up(family, Path(tmp) / "eager")
                compiled, run_compiled = set_up(family, Path(tmp) / "compiled", ["trainer.compile=on"])
                times: dict[str, list[float]] = {"off": [], "on": []}
                t = STEPS
                for _ in range(rounds):
                    for key, method in (("off", eager), ("on", compiled)):
                        times[key].append(step_ms(method, t, block))
                    t += block
            off, on = statistics.median(times["off"]), statistics.median(times["on"])
            rows.append(f"| {FAMILIES[family][0]} | {off:.2f} | {on:.2f} | ×{off / on:.2f} | {run_eager:.0f} | "
                        f"{run_compiled:.0f} |")
            print(f"[bench] {rows[-1]}", flush=True)
    finally:
        torch.set_num_threads(threads)
    return ["| family | CPU ms / step, compile off | compile on | off / on | short run wall s, off | on |",
            "|---|---|---|---|---|---|", *rows]


if __name__ == "__main__":
    import sys

    if "--compile" in sys.argv[1:]:
        print("\n".join(compile_rows()))
    elif "--mnist" in sys.argv[1:]:
        print("\n".join(mnist_rows()))
    else:
        print(section(torch.device("cpu")))
