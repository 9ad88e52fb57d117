"""``trainer.compile``: ``torch.compile`` of the public, static parts of a private step.

``trainer.compile=on`` compiles, in every family that builds its step from them:

* the model's forward in the step (generator, feature extractor, classifier): a compiled view of the module that
  shares its parameters (the eager module stays the one saved, sampled and warm-started: checkpoints and releases
  are unchanged), in mode ``"reduce-overhead"`` on CUDA (its kernels replayed as CUDA graphs) and in the default
  mode elsewhere;
* the public loss computed from released quantities (the sorted 1-D transport of the projections);
* the optimiser's step (PyTorch's "compiling the optimizer" recipe: ``torch.compile`` of ``opt.step``), with
  ``capturable=True`` for Adam on CUDA (its step counts on the device, as a CUDA graph of the step needs).

What stays eager, and why.  The private release -- the sampler, the directions, the mechanism's noise and the
clipping -- runs eagerly whatever the setting:

* its randomness comes from explicit ``torch.Generator`` objects (the sampler's and each mechanism's), seeded
  secretly, saved in checkpoints and restored on resume.  Dynamo does not put a draw from an explicit generator
  into a graph (it runs the draw eagerly between graphs), so compiling the release would gain nothing; left eager,
  the numbers drawn and the generator states saved are by construction those of the eager code, whatever a
  later compiler does with random operations (inductor draws its own by Philox seeds);
* a mechanism records each release in the privacy ledger, once (a Python side effect that a compiled graph or a
  CUDA graph replay does not run): the printed (epsilon, delta) must follow from releases that ran;
* the clipping is the code the sensitivity bound is argued from: it stays as written, not fused or reassociated.

The noise distribution, the calibration and the accounting are therefore the same with the setting on or off;
only how the public arithmetic is launched changes.  The compiled parts run the same operations, so a compiled
step equals the eager one up to floating-point reassociation (``tests/runs/test_compile.py``: 1e-6).

Cost and default: compiling takes seconds to minutes at a run's first steps (and once more per new input
shape).  On the CPU the compiled step is no faster at the presets' sizes (docs/benchmarks.md, "trainer.compile
on the CPU"), so the default is ``off``.  On a GPU, CUDA graphs remove the launch overhead of the model's forward
and backward; ``make gpu-check`` measures it (its ``trainer.compile`` row).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import torch

from .misc import on_gpu
from .settings import GRAPH_SETTINGS, check_compile, check_graph  # noqa: F401 - checked before torch loads

F = TypeVar("F", bound=Callable)


def mode(device: torch.device) -> str | None:
    """``torch.compile``'s mode on ``device``: CUDA graphs on CUDA, the default elsewhere."""
    return "reduce-overhead" if on_gpu(device) else None


def compile_module(module: torch.nn.Module, on: bool, device: torch.device) -> torch.nn.Module:
    """What the step calls for ``module``: ``module`` itself, or (``on``) a compiled view of it sharing its
    parameters and buffers (the caller keeps ``module`` for its state, sampling and everything outside the step)."""
    return torch.compile(module, mode=mode(device), dynamic=False) if on else module


def compile_function(fn: F, on: bool, device: torch.device) -> F:
    """``fn`` (a pure function of public or released tensors), compiled when ``on``."""
    return torch.compile(fn, mode=mode(device), dynamic=False) if on else fn


def adam(params: Iterable, on: bool, device: torch.device, graph: bool = False, **settings) -> torch.optim.Adam:
    """``torch.optim.Adam(params, **settings)``; compiled (``on``): ``capturable`` on CUDA and a compiled step;
    ``graph`` (``trainer.graph``: the whole step captured, ``methods.capture``): ``capturable`` on CUDA (its step
    counts on the device, nothing read back in the graph)."""
    # foreach: one multi-tensor kernel per update term (PyTorch's default on a GPU, asked for everywhere so that a CPU
    # run, and the op counter, take the CUDA run's path)
    return compile_step(torch.optim.Adam(params, capturable=(on or graph) and on_gpu(device), foreach=True,
                                         **settings), on)


def compile_step(opt: torch.optim.Optimizer, on: bool) -> torch.optim.Optimizer:
    """``opt`` whose ``step`` is compiled when ``on`` (its state, ``state_dict`` and hyper-parameters unchanged)."""
    if on:
        opt.step = torch.compile(opt.step, dynamic=False)
    return opt


def resolve_graph(value, device: torch.device, compile_on: bool = False, processes: int = 1) -> bool:
    """Whether the run's steps are captured (``dpgen.methods.capture``): ``auto`` = on for a CUDA run of one process
    without ``trainer.compile`` (whose own CUDA graphs take the model), else off; ``on`` refuses those two."""
    setting = check_graph(value)
    if setting == "auto":
        return on_gpu(device) and not compile_on and processes == 1
    if setting == "off":
        return False
    if compile_on:
        raise ValueError("trainer.graph=on and trainer.compile=on both capture the step; choose one "
                         "(trainer.compile=off to capture the whole step, release included)")
    if processes > 1:
        raise ValueError("trainer.graph=on runs one process (its collectives are not captured); run one process "
                         "or set trainer.graph=off")
    return True
