"""What every method provides to the training loop (``methods/loop.py``) and to the pipeline.

A method is a set of per-step maths (its paper's algorithm box) plus state; the loop owns
everything else (resume, budget stop, non-finite check, logging cadence, checkpoints, progress
bar, release artefact).  Interface (see docs/ARCHITECTURE.md):

* ``setup(data, ledger, ctx)``: build models, the PrivateSampler (``self.sampler``) and the
  release mechanisms (``self.mechanisms``: name -> ``privacy.mechanisms.Mechanism``, calibrated
  here through the ledger).  No private release happens in ``setup``.
* ``total_steps``: the planned number of steps (``None``: until the budget is spent).
* ``step_mechanisms(t)``: the mechanisms step ``t`` will release once each (budget check);
  default: all of them at every step.
* ``step(t) -> dict``: one step; returns loggable values that are public or released (noised),
  as python floats or 0-d tensors left on the device (the loop reads them at its log cadence: no
  host sync per step; see ``loop.py``).  Model forwards may run under ``utils.autocast(ctx.device,
  ctx.precision)`` (``trainer.precision``), cast back with ``.float()``; the privacy maths never does.
* ``state_dict()`` / ``load_state_dict(state)``: training state (models, optimisers, particles, ...);
  the loop adds the ledger, mechanisms, sampler and RNG states.
* ``signature()``: settings a resume must match.
* ``release_state()``: the weights-only artefact (never private data or RNG states).
* ``train_summary()``: extra entries for results.json ``train``.
* ``generators()``: every ``torch.Generator`` a step draws from (the capture registers them, ``methods.capture``);
  ``capturable(t)``: whether step ``t`` may be a replay of a captured step (False: it depends on ``t`` on the host).
* ``sample(...)`` (generative) / ``predict(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data import DataSplits
from ..errors import ConfigError
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.mechanisms import Mechanism
from ..privacy.noise import NoisePolicy, NoiseSettings, build_policy, check_policy
from ..privacy.sampler import device_generator
from ..utils import dist


@dataclass
class TrainContext:
    """Everything a method needs besides the data and the ledger."""

    device: torch.device
    logger: object  # dpgen.logging.RunLogger
    run_dir: Path
    seed: int = 0
    log_every: int = 50
    checkpoint_every: int = 500
    resume_from: Path | None = None
    fresh_noise: bool = False  # a branch: the resumed run's secret generators reseeded from OS entropy (methods/loop.py)
    max_steps: int | None = None  # cap (smoke runs); the privacy calibration still uses the full schedule
    progress: bool = True
    deterministic: bool = False  # seed sampling/noise from `seed` (tests, debugging): noise becomes guessable
    resume_state: dict | None = None  # the method's state from the checkpoint (set by the loop before setup)
    precision: str = "32"  # "bf16": bfloat16 autocast around model forwards (utils.autocast), never the privacy maths
    compile: bool = False  # trainer.compile=on: torch.compile of the model, public loss and optimiser step (utils.compiling)
    graph: bool = False  # trainer.graph: the whole step captured once and replayed (methods.capture; static shapes)
    graph_required: bool = False  # trainer.graph=on (not auto): a step that cannot be captured is an error, not eager
    # ledger -> public entries added to the release (config, public facts, privacy card: dpgen.export.release)
    release_extra: Callable[[PrivacyLedger], dict] | None = None
    processes: dict | None = None  # how the run is spread over processes (``utils.dist.processes``; set by the loop)

    @property
    def checkpoint_path(self) -> Path:
        return self.run_dir / "checkpoints" / "last.pt"


def secret_seed(ctx: TrainContext, offset: int = 1) -> int:
    """Seed for a private sampler, and reseed torch's global RNG (directions, public smoothing noise).

    Secret (OS entropy) unless ``trainer.deterministic=true``, in which case both derive from the
    logged ``seed`` (reproducible, but the noise becomes guessable: debugging and tests only).
    """
    if ctx.deterministic:
        return ctx.seed + offset
    torch.manual_seed(dist.shared_secret())  # several processes: rank 0's (the same on every rank)
    return dist.shared_secret()


def mechanism_seed(ctx: TrainContext, offset: int = 11) -> int | None:
    """Seed of a mechanism's noise generator: ``None`` (OS entropy) unless ``trainer.deterministic=true``."""
    return ctx.seed + offset if ctx.deterministic else None


def settle(settings: object, **values: object) -> None:
    """Store a frozen settings dataclass's converted values (``int("16")``, ``tuple([0.9, 0.999])``): call it from
    the dataclass's ``__post_init__`` only, after the checks."""
    for key, value in values.items():
        object.__setattr__(settings, key, value)


def check_signature(old: dict, signature: dict) -> None:
    """Refuse (one error line) a checkpoint whose method signature differs from this run's."""
    diff = {k: (old.get(k), v) for k, v in signature.items() if old.get(k) != v}
    if diff:
        raise ConfigError("cannot resume: the checkpoint was written by a run with other settings ("
                          + ", ".join(f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in diff.items())
                          + "): resume with the same experiment, dataset split and model settings, start the run "
                          "folder over with trainer.overwrite=true, or choose a new folder with hydra.run.dir=<new folder>")


class NonFiniteLossError(FloatingPointError):
    def __init__(self, step: int, what: str = "loss") -> None:
        super().__init__(
            f"the training {what} became NaN/inf at step {step}. Lower model.lr or check the data "
            f"scaling; the last checkpoint is kept: after fixing, resume in place with "
            f"hydra.run.dir=<run folder> trainer.resume=true"
        )


class NoiseHolder:
    """What holds a run's noise policy (a method, a domain-adaptation alignment): it states its settings
    (``noise_settings``), the policy is decided once outside it (``privacy.noise.build_policy``, by the
    pipeline) and handed in (``take_noise``); ``noise_form`` is the one hook for a method-specific form."""

    _noise: NoisePolicy | None = None

    def noise_settings(self) -> NoiseSettings:
        """The settings the policy is decided from (default: ``self.private``, calibrated)."""
        return NoiseSettings(private=bool(getattr(self, "private", True)))

    def noise_form(self, policy: NoisePolicy) -> NoisePolicy:
        """The method's own form of the policy it is handed (default: the policy itself)."""
        return policy

    def take_noise(self, policy: NoisePolicy) -> None:
        """Hand in the run's policy (once, before ``setup``)."""
        self._noise = self.noise_form(check_policy(policy))

    @property
    def noise(self) -> NoisePolicy:
        """The policy the mechanisms apply: the one handed in, or (a method built by hand, e.g. in a test)
        the same decision from its own settings."""
        if self._noise is None:
            self.take_noise(build_policy(self.noise_settings()))
        return self._noise


def public_generator(ctx: TrainContext) -> torch.Generator:
    """The generator of a method's public randomness in a step (latent codes, generated labels, public smoothing
    noise): a generator of the run's device, secretly seeded (rank 0's secret on every rank) unless
    ``trainer.deterministic=true``.  The loop makes it before ``setup`` (``Method.rng``) and checkpoints it."""
    seed = ctx.seed + 13 if ctx.deterministic else dist.shared_secret()
    return device_generator(seed, ctx.device)


class Method(NoiseHolder):
    """A training algorithm.  Private data is read only through ``self.sampler`` and released only
    through ``self.mechanisms`` inside ``step``."""

    _rng: torch.Generator | None = None

    @property
    def rng(self) -> torch.Generator:
        """The step's public randomness (:func:`public_generator`, set by the loop; a method set up by hand, e.g. in a
        test, gets one seeded from torch's global generator on its ``device``)."""
        if self._rng is None:
            self._rng = device_generator(int(torch.randint(2**62, ())), getattr(self, "device", None))
        return self._rng

    @rng.setter
    def rng(self, generator: torch.Generator) -> None:
        self._rng = generator

    name: str = "method"  # progress-bar label
    release_name: str = "release.pt"  # weights-only artefact in the run folder
    min_steps: int = 0  # steps before there is a model to release (1: the model IS the first step's release)
    # how several processes share a step's own work (``methods.parallel``): "rows" (each rank its contiguous rows
    # of the batch), "blocks" (whole class blocks), "directions" (a part of the step's projection directions) or
    # "whole" (every rank all of it); the private side is shared by the sampler and the mechanisms
    split: str = "whole"
    sampler: PrivateSampler | None = None
    mechanisms: dict[str, Mechanism]

    # -- the interface the loop calls ----------------------------------------------------
    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement setup()")

    @property
    def total_steps(self) -> int | None:
        raise NotImplementedError

    def step_mechanisms(self, t: int) -> list[Mechanism]:
        return list(getattr(self, "mechanisms", {}).values())

    def step(self, t: int) -> dict:
        raise NotImplementedError

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError

    def signature(self) -> dict:
        raise NotImplementedError

    def release_state(self) -> dict:
        raise NotImplementedError

    def convention_report(self) -> dict | None:
        """``privacy.convention=paper`` runs: the stated vs TRUE sensitivity and ``epsilon_true``
        (``privacy.conventions.true_epsilon``) for results.json ``privacy``; None for honest runs."""
        return None

    def train_summary(self) -> dict:
        return {}

    def generators(self) -> list[torch.Generator]:
        """Every generator a step draws from (``methods.capture`` registers them with the graph, so each replay draws
        fresh numbers): the sampler's, each mechanism's noise and directions generators, and the method's own (its
        ``torch.Generator`` attributes: public batches, latent codes).  A method that keeps a generator elsewhere
        adds it."""
        found = [] if self.sampler is None else [self.sampler.generator]
        for mech in getattr(self, "mechanisms", {}).values():
            found += [mech.generator, mech.directions_generator]
        found += [g for g in vars(self).values() if isinstance(g, torch.Generator)]
        return list({id(g): g for g in found}.values())

    def capturable(self, t: int) -> bool:
        """Whether step ``t`` may be a replay of the captured step: True unless the step depends on ``t`` on the host
        (a phase, a schedule read in Python); such a step runs eagerly (``methods.capture``)."""
        return True

    def progress_info(self, values: dict) -> str:
        """Short text beside the progress bar (public / released values only)."""
        return "  ".join(f"{k} {v:.4f}" for k, v in values.items() if isinstance(v, float))

    def finish(self, ctx: TrainContext) -> None:
        """After the last step (e.g. a plot of public quantities)."""


class GenerativeMethod(Method):
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` synthetic images ``(n, C, H, W)`` in [0, 1] and their labels ``(n,)`` (on cpu)."""
        raise NotImplementedError
