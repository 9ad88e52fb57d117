"""Warm start of the OT generators from the DP class-Gaussian: a two-phase run in one ledger.

``model/warm_start=class_gaussian`` (``configs/model/warm_start/class_gaussian.yaml``) for the DP-SWD generator,
DP-Sinkhorn, DPSWgen and DPSWflow-r.  The training loop (``methods.loop``) runs it; a method only says what
the warm-up fits (``Method.warm_target``: its generator or its particles, from public settings).

1. **Phase 1, the moment release** (:meth:`WarmStart.release`): ONE Gaussian release of every class's count,
   sum and second moment of the codes ``z = clip_r((x - c) V)`` -- the DP class-Gaussian's own mechanism
   (:class:`~dpgen.privacy.moments.ClassMomentRelease` inside
   :class:`~dpgen.methods.dp_class_gaussian.DPClassGaussian`), the private set read once through a
   PrivateSampler (q = 1), the release recorded in the run's ledger by the mechanism.  Its noise is calibrated
   so that this release ALONE spends ``epsilon_share * accountant.epsilon`` (calibrating accountant, run's delta).
2. **Warm-up** (:func:`fit`): post-processing.  ``fit`` receives the :class:`ClassGaussianRelease` (the noisy,
   post-processed moments and the public map: nothing else) and the method's :class:`WarmTarget`; it fits the
   generator to samples of the released class Gaussians by class-partitioned sliced Wasserstein (public random
   directions, no noise), or puts the particles on such samples.  No private record is read.
3. **Phase 2, the method's own OT release**: the method's ``setup`` runs AFTER phase 1, with the moment release
   in the ledger, and its mechanisms' noise policy is calibrated with ``history=True`` (``NoiseSettings.history``):
   sigma is calibrated for what is LEFT, so the composition of both releases under the calibrating accountant is <= ``accountant.epsilon``; the
   loop's budget stop enforces it at every step.  ``epsilon_share`` is the epsilon of phase 1 alone: RDP / PLD
   compose sub-additively, so phase 2 measured alone gets more than ``(1 - share) * epsilon``.

Neighbouring relation: both releases under the ledger's (``accountant.sampling=poisson``: add/remove, Delta = 1
for the moments; ``without_replacement``: replace-one, Delta = sqrt 2).  A release of the whole set with N public
(DPSWflow's one shot, always replace-one) cannot be composed with an add/remove release in one ledger: refused.

Resume (the checkpoint's ``warm_start`` entry, :meth:`WarmStart.state_dict`): ``phase`` 1 (released, not yet
warmed up) or 2 (warmed up), the ledger right after phase 1, the released moments and the moment mechanism's
state.  A resumed run puts the phase-1 ledger back before the method's ``setup`` (so the same sigma is
calibrated), never releases the moments again, and repeats the warm-up (post-processing) only in phase 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ..data import DataSplits
from ..data.representations import Representation
from ..errors import ConfigError
from ..ot.sliced import random_directions, sliced_wasserstein_blocks
from ..privacy import PrivacyLedger
from ..privacy.moments import ClassMoments
from .base import TrainContext
from .parallel import ParallelOptimizer, Share

WARM_STARTS = ("class_gaussian",)


@dataclass(frozen=True)
class ClassGaussianRelease:
    """What phase 1 released, post-processed: class moments of public codes and the public map.  DP by
    post-processing; the only input of the warm-up."""

    moments: ClassMoments
    rep: Representation
    num_classes: int

    def sample(self, labels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Images ``(n, C, H, W)`` in the value range: ``z ~ N(mu_y, Sigma_y)`` decoded (``DPClassGaussian.sample``)."""
        return self.rep.decode(self.moments.sample(labels.cpu(), generator=generator))


@dataclass
class WarmTarget:
    """What a method's warm-up fits, in the space its OT phase transports in.

    ``rows(x, y)``: the method's PUBLIC per-record map of images ``x`` (in the value range) with labels ``y``.
    A generator: ``generate(labels, share)`` (differentiable rows for the requested labels; ``share``
    (:class:`~dpgen.methods.parallel.Share`): this rank's rows only, with the codes of all the labels drawn, as one
    process draws them) and its ``parameters``.
    Particles: ``labels`` (one per particle, public) and ``place(rows)`` that sets them.
    """

    rows: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    device: torch.device
    generate: Callable[[torch.Tensor, Share], torch.Tensor] | None = None
    parameters: Iterable[torch.nn.Parameter] | None = None
    labels: torch.Tensor | None = None
    place: Callable[[torch.Tensor], None] | None = None


def fit(target: WarmTarget, release: ClassGaussianRelease, *, steps: int, batch_size: int, lr: float,
        num_projections: int, seed: int, progress: Callable[[int], None] | None = None) -> dict:
    """The warm-up: post-processing of ``release`` only.  Particles are put on samples of the released class
    Gaussians; a generator takes ``steps`` Adam steps on ``(mean_c SW_2^2(G(z, c), samples of class c))^{1/2}``
    (``ot.sliced_wasserstein_blocks``, ``num_projections`` fresh random directions per step, no noise: the
    samples are public).  ``progress(i)`` is told each step done.  Returns public facts for results.json.

    Several processes: each generates its contiguous share of the batch (the codes of all of it drawn, as one
    process draws them), one all-gather gives every process the whole batch and the same loss, and the
    parameters' gradients are added in one all-reduce: the single-process fit (BatchNorm over the whole batch,
    running statistics included), its work shared.  One process: unchanged."""
    gen = torch.Generator().manual_seed(int(seed))
    if target.generate is None:  # particles
        labels = target.labels.cpu()
        rows = [target.rows(release.sample(labels[i:i + 1000], gen).to(target.device),
                            labels[i:i + 1000].to(target.device)) for i in range(0, labels.shape[0], 1000)]
        target.place(torch.cat(rows).float())
        return {"warm_start_particles": int(labels.shape[0])}
    c = release.num_classes
    y = torch.arange(c).repeat_interleave(math.ceil(batch_size / c))  # m rows of every class, stacked by class
    y_dev = y.to(target.device)
    params = list(target.parameters)
    opt = ParallelOptimizer(torch.optim.Adam(params, lr=lr), params)  # several processes: gradients added in step
    share = Share.rows(y.shape[0])  # several processes: each generates its rows (as the method's step)
    loss = torch.zeros(())
    for i in range(int(steps)):
        if progress is not None:
            progress(i)
        with torch.no_grad():
            r_t = target.rows(release.sample(y, gen).to(target.device), y_dev).float()
        r_s = share.gather(target.generate(y_dev, share).float())  # the whole batch everywhere
        u = random_directions(r_t.shape[1], num_projections, generator=gen, device=target.device)
        loss = sliced_wasserstein_blocks(r_s @ u, r_t @ u, c, 2.0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if progress is not None:
        progress(int(steps))
    return {"warm_start_steps": int(steps), "warm_start_loss": float(loss.detach())}


class WarmStart:
    """``model.warm_start``: the settings of both phases and their checkpointed state (module docstring)."""

    def __init__(self, kind: str = "class_gaussian", epsilon_share: float = 0.5, representation: dict | None = None,
                 shrinkage: str = "auto", steps: int = 200, batch_size: int = 500, lr: float = 1e-3,
                 num_projections: int = 200) -> None:
        if kind not in WARM_STARTS:
            raise ConfigError(f"model.warm_start.kind={kind!r} is unknown; choose one of {', '.join(WARM_STARTS)}")
        if not 0.0 < float(epsilon_share) < 1.0:
            raise ConfigError(f"model.warm_start.epsilon_share={epsilon_share} must lie strictly between 0 and 1 (the "
                              "share of accountant.epsilon the moment release alone spends; the OT phase gets the rest)")
        if int(steps) < 0 or int(batch_size) < 1 or float(lr) <= 0 or int(num_projections) < 1:
            raise ConfigError("model.warm_start.steps >= 0, batch_size >= 1, lr > 0 and num_projections >= 1 are needed")
        self.kind, self.share = kind, float(epsilon_share)
        self.rep_cfg = dict(representation or {"kind": "dct"})
        self.shrinkage = shrinkage
        self.steps, self.batch_size, self.lr = int(steps), int(batch_size), float(lr)
        self.num_projections = int(num_projections)
        self.phase = 0          # 0: nothing released; 1: moments released; 2: warmed up
        self.ledger_after_release: dict | None = None
        self.release_: ClassGaussianRelease | None = None
        self.method = None      # the DPClassGaussian that made the release (its mechanism's state is checkpointed)
        self.summary: dict = {}

    def signature(self) -> dict:
        """Settings a resume must match."""
        return {"kind": self.kind, "epsilon_share": self.share, "representation": self.rep_cfg,
                "shrinkage": self.shrinkage, "steps": self.steps, "batch_size": self.batch_size, "lr": self.lr,
                "num_projections": self.num_projections}

    def _moment_method(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext):
        # the class-Gaussian's own release, shared, not copied
        from .dp_class_gaussian import DPClassGaussian

        cg = DPClassGaussian(representation=self.rep_cfg, shrinkage=self.shrinkage, epsilon_share=self.share)
        cg.setup(data, ledger, ctx)  # calibrated on the ledger as it is now: empty (phase 1 comes first)
        return cg

    def release(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> ClassGaussianRelease:
        """Phase 1: THE moment release (recorded in ``ledger`` by its mechanism).  Refused on a non-empty ledger."""
        if ledger.entries:
            raise RuntimeError("the warm start's moment release must be the first release of the run's ledger")
        self.method = self._moment_method(data, ledger, ctx)
        self.method.step(0)
        self.phase, self.ledger_after_release = 1, ledger.state_dict()
        self.release_ = ClassGaussianRelease(self.method.moments, self.method.rep, data.num_classes)
        return self.release_

    def restore(self, state: dict, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> ClassGaussianRelease:
        """Resume: the released moments and the phase-1 ledger back (no release); ``ledger`` must be fresh."""
        if state.get("signature") != self.signature():
            raise ConfigError("cannot resume: the checkpoint's warm start had other settings (checkpoint "
                              f"{state.get('signature')!r} vs now {self.signature()!r}): resume with the same "
                              "model.warm_start, or start the run folder over with trainer.overwrite=true")
        self.method = self._moment_method(data, ledger, ctx)
        self.method.load_state_dict(state["moments"])
        self.method.mech.load_state_dict(state["mechanism"])  # refuses a differently calibrated release
        ledger.load_state_dict(state["ledger"])
        self.phase, self.ledger_after_release = int(state["phase"]), state["ledger"]
        self.summary = dict(state.get("summary", {}))
        self.release_ = ClassGaussianRelease(self.method.moments, self.method.rep, data.num_classes)
        return self.release_

    def warm_up(self, target: WarmTarget, seed: int, progress: Callable[[int], None] | None = None) -> dict:
        """Phase 1 -> 2: :func:`fit` on the release only (``progress``: told each step done)."""
        self.summary = fit(target, self.release_, steps=self.steps, batch_size=self.batch_size, lr=self.lr,
                           num_projections=self.num_projections, seed=seed, progress=progress)
        self.phase = 2
        return self.summary

    def state_dict(self) -> dict:
        """For the checkpoint (it holds the mechanism's RNG state: as sensitive as the data, like every checkpoint)."""
        return {"phase": self.phase, "signature": self.signature(), "ledger": self.ledger_after_release,
                "moments": self.method.state_dict(), "mechanism": self.method.mech.state_dict(),
                "summary": self.summary}

    def train_summary(self) -> dict:
        """Public facts of phase 1 for results.json (noise of the moment release, the estimator it ran)."""
        m = self.method.mech
        return {"warm_start": {"kind": self.kind, "epsilon_share": self.share, "phase": self.phase,
                               "moment_noise_multiplier": m.noise_multiplier, "moment_noise_std": m.noise_std,
                               "moment_sensitivity": m.sensitivity, "moment_relation": m.relation,
                               "shrinkage_used": self.method.moments.estimator, **self.summary}}


def as_warm_start(cfg: dict | WarmStart | None) -> WarmStart | None:
    """``model.warm_start`` (a dict from the config group, or null) -> :class:`WarmStart` or None."""
    if cfg is None or isinstance(cfg, WarmStart):
        return cfg
    return WarmStart(**dict(cfg))
