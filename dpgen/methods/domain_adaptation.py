"""Unsupervised domain adaptation with a private target domain (DP-SWD paper, Alg. 2).

One method, :class:`DomainAdaptation`, trains a feature extractor g and a classifier h on the
labelled public *source* (``data.public``) and aligns g's features of the source with those of the
unlabelled private *target* (``data.private``).  The alignment term is a Hydra-instantiated
component (``model.alignment._target_``), one class per variant:

* :class:`SWDAlignment`     — ``swd``: plain SW_2 between g(x_s) and g(x_t) (Lee et al. 2019); not private.
* :class:`DPSWDAlignment`   — ``dpswd``: Algorithm 2, the target side through the DP-SWD mechanism.
* :class:`DANNAlignment`    — ``dann``: gradient reversal + domain discriminator (Ganin et al.); not private.
* :class:`DPDANNAlignment`  — ``dp_dann``: DANN whose target-dependent gradients go through DP-SGD.

Training step (Alg. 2; T = epochs * ceil(N_t / B) steps, an epoch being one expected pass over the
private target set — the step count the paper's accountant assumed), run by ``methods.loop``:
  1. source batch (x_s, y_s): B public records, uniformly at random (public randomness)
  2. L_c = CE(h(g(x_s)), y_s)                                                       (Alg. 2 line 7)
  3. from epoch ``start_align`` on: private target batch x_t ~ PrivateSampler(rate B/N_t),
     L = L_c + alignment(g, g(x_s), x_t)                                           (lines 8-12)
  4. Adam step on g, h (and the discriminator)                                      (line 13)
Warm-up steps (epochs < start_align) never touch the private data (``step_mechanisms`` is empty).

Privacy boundary (the private variants): the target batch reaches the weights only through the
alignment's mechanism (``privacy.mechanisms``), whose ``release`` adds the calibrated noise and
records the release in the ledger in the same call.
* ``dpswd``: ``GaussianProjectionRelease`` of the rows r(x_t) = clip_{1/2}(g(x_t) / (2R))
  (``privacy.rows.scale_and_clip``), g in *eval* mode, under ``no_grad``: a fixed per-record map (no
  dropout randomness, no BatchNorm statistics, no autograd path from x_t to any weight); R is a
  PUBLIC constant (``feature_radius`` or the extractor's public bound, sqrt(320) for the Sigmoid
  digits features), never the un-noised batch maximum the released code uses (DP-SWD paper, unit-norm assumption).  The loss
  gradient reaches g only through the *source* rows: post-processing of the release.
  Accounting: d = g.out_dim (320 for digits, not 784), the number of private batches actually drawn.
* ``dp_dann``: ``NoisyGradientSum`` of the per-sample gradients of the target domain loss
  CE(D(GRL(g(x_t))), 0) w.r.t. *all* parameters of g and D jointly (D directly, g through the
  gradient-reversal layer): clipped to a joint L2 norm C, summed, noised, divided by the public
  expected batch size qN (DP-SGD, Abadi et al.).  Sensitivity C under add/remove (Poisson), 2C under
  replace-one (sampling without replacement).  Everything else (source CE, source domain loss) is
  public.
The non-private variants record each target access with noise multiplier 0 (``UnnoisedAccess``),
so the run reports epsilon = inf.  Sampling, directions and noise come from OS entropy unless
``trainer.deterministic=true``.
"""

from __future__ import annotations

import math
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..data import DataSplits
from ..models.da import grad_reverse
from ..ot import sliced_wasserstein
from ..ot.sliced import sliced_wasserstein_projected
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.conventions import (
    UNBOUNDED,
    PaperConvention,
    as_convention,
    batch_max_scale,
    batch_scaling_diameter,
    true_epsilon,
)
from ..privacy.dpsgd import poisson_capacity
from ..privacy.mechanisms import (
    GaussianProjectionRelease,
    Mechanism,
    NoisyGradientSum,
    UnnoisedAccess,
)
from ..privacy.noise import NoisePolicy, NoiseSettings
from ..privacy.per_sample import PerSampleGradients, check_rule, resolve_rule
from ..privacy.projection import ProjectionDP, as_projection_dp
from ..privacy.rows import fixed_size, scale_and_clip
from ..privacy.sampler import device_generator, generator_state, resumed_generator
from ..privacy.sensitivity import l2_sensitivity
from ..utils import autocast
from ..utils.compiling import adam, compile_module
from .base import Method, NoiseHolder, TrainContext, mechanism_seed, secret_seed
from .parallel import ParallelOptimizer, Share, own_draws

SOURCE_DOMAIN, TARGET_DOMAIN = 1, 0  # DANN domain labels (DP-SWD paper, domain-adaptation baselines)


@dataclass
class AlignmentContext:
    """What an alignment needs to set itself up (all public)."""

    feature_extractor: nn.Module
    n_private: int
    sample_rate: float
    private_steps: int
    batch_size: int
    ledger: PrivacyLedger
    device: torch.device
    seed: int | None = None  # the mechanism's noise seed (None: OS entropy)


@dataclass
class AlignmentOutput:
    loss: torch.Tensor  # public-autograd part, added to L_c before backward
    private_grads: dict[str, torch.Tensor] | None = None  # {param name in `modules()`: grad}, added after backward
    value: float | torch.Tensor = float("nan")  # for logging (public or released)
    # several processes: ``loss`` and ``value`` are this rank's share of the whole batch's (they add up over the
    # ranks); False: the whole batch's, the same on every rank
    shared: bool = False


class Alignment(NoiseHolder, ABC):
    """The alignment term of one DA variant; ``mechanism`` is its one release per aligning step."""

    private: bool = False
    rng: torch.Generator | None = None  # public randomness (smoothing noise): the method's generator, set in its setup

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = float(weight)
        self.mechanism: Mechanism | None = None

    def setup(self, actx: AlignmentContext) -> dict:
        """Build extra networks and the mechanism (calibrated); return what to report in the results.
        Non-private variants: an ``UnnoisedAccess`` (epsilon = inf)."""
        self.mechanism = UnnoisedAccess(actx.ledger, sample_rate=actx.sample_rate)
        self.batch_size = actx.batch_size  # the source batch (public)
        return {}

    def modules(self) -> nn.ModuleDict:
        """Extra trainable networks (the discriminator); part of the optimiser and checkpoints."""
        return nn.ModuleDict()

    @abstractmethod
    def __call__(self, g: nn.Module, x_s: torch.Tensor, f_s: torch.Tensor, x_t: torch.Tensor) -> AlignmentOutput:
        """``x_s: (B, *input)`` public source batch, ``f_s = g(x_s): (B, d)`` (train mode, with grad);
        ``x_t: (b, *input)`` the private batch (used only through ``self.mechanism``)."""


# ---------------------------------------------------------------------------------------- swd
class SWDAlignment(Alignment):
    """``weight * SW_2(g(x_s), g(x_t))`` on raw features, k fresh directions (DP-SWD paper, domain-adaptation baselines, not private)."""

    def __init__(self, weight: float = 0.05, num_projections: int = 200, power: float = 2.0) -> None:
        super().__init__(weight)
        self.k, self.power = int(num_projections), float(power)

    def __call__(self, g, x_s, f_s, x_t):
        self.mechanism.release()  # an un-noised access, recorded
        with own_draws():  # this rank's target samples (dropout)
            f_t = g(x_t)
        # several processes: SW of the whole source and target batches on every rank (their rows gathered; the
        # gradient flows back into each rank's own rows), as one process computes it
        f_s, f_t = Share.rows(self.batch_size).gather(f_s), Share.of_batch(f_t.shape[0]).gather(f_t)
        sw = sliced_wasserstein(f_s, f_t, k=self.k, q=self.power, generator=self.mechanism.directions_generator)
        return AlignmentOutput(self.weight * sw, value=sw.detach())


# -------------------------------------------------------------------------------------- dpswd
class DPSWDAlignment(Alignment):
    """Algorithm 2: ``weight * 2R * SW_2(r(x_s) U + Z_s, r(x_t) U + Z_t)`` with r = clip_{1/2}(g(.)/(2R)).

    ``feature_radius`` R: public bound used to scale feature rows (rows with ||g(x)|| > R are clipped,
    so ||r(x)|| <= 1/2 always and two rows differ by <= 1, Lemma 2's assumption).  ``None`` takes the
    extractor's public ``feature_bound`` (sqrt(d) for Sigmoid features: never clips).
    """

    private = True
    default_dp = ProjectionDP(num_projections=200, bound="bernstein")  # model.alignment.dp when none is given

    def __init__(self, weight: float = 0.05, dp: ProjectionDP | dict | None = None, power: float = 2.0,
                 feature_radius: float | None = None) -> None:
        super().__init__(weight)
        self.dp = as_projection_dp(dp, self.default_dp)  # k, bound, delta share
        if self.dp.directions != "random":
            raise ValueError("model.alignment.dp.directions: the DP-SWD adapter draws random directions only; "
                             "set model.alignment.dp.directions=random")
        self.k, self.power, self.bound = self.dp.num_projections, float(power), self.dp.bound
        self.feature_radius = feature_radius
        self.radius, self.batch_size, self.d = 1.0, 0, 0
        # privacy.convention=paper (set by DomainAdaptation): the released code's per-batch 2 max ||g(x)|| scaling
        self.convention: PaperConvention | None = None

    def noise_settings(self) -> NoiseSettings:
        """Calibrated; privacy.convention=paper: the paper's sigma against the sensitivity it assumes."""
        return NoiseSettings(private=True, paper_std=None if self.convention is None else self.convention.sigma)

    def setup(self, actx):
        g = actx.feature_extractor
        r = self.feature_radius if self.feature_radius is not None else getattr(g, "feature_bound", None)
        if r is None:
            raise ValueError(f"{type(g).__name__} has unbounded outputs: set model.alignment.feature_radius to a PUBLIC "
                             "bound on feature norms (rows above it are clipped), e.g. model.alignment.feature_radius=10")
        if not float(r) > 0:
            raise ValueError(f"model.alignment.feature_radius must be > 0, got {r}")
        self.radius, self.batch_size, self.d = float(r), actx.batch_size, int(g.out_dim)
        # sigma for the real feature dimension and the real number of private batches (DP-SWD paper, σ calibration,
        # corrected); privacy.convention=paper: the paper's sigma against the sensitivity it assumes (rows differ by <= 1)
        self.mechanism = GaussianProjectionRelease(
            actx.ledger, dim=self.d, steps=actx.private_steps, sample_rate=actx.sample_rate, noise=self.noise,
            n_private=actx.n_private, row_diameter=1.0, seed=actx.seed, device=actx.device,  # drawn on the device
            **self.dp.release_settings())
        m = self.mechanism
        return {"noise_std": m.noise_std, "noise_multiplier": m.noise_multiplier, "sensitivity": m.sensitivity,
                "sensitivity_bound": self.bound, "feature_dim": self.d, "num_projections": self.k,
                "feature_radius": self.radius, "guarantee": m.guarantee}

    @property
    def noise_std(self) -> float:
        return self.mechanism.noise_std

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.noise_multiplier

    @property
    def delta_per_step(self) -> float:
        return self.mechanism.beta

    def rows(self, f: torch.Tensor) -> torch.Tensor:
        """Lines 10-11 with a public constant: ``clip_{1/2}(f / (2R))``, ``(n, d) -> (n, d)``."""
        return scale_and_clip(f, self.radius)

    def _eval_features(self, g: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """g(x) in eval mode: a deterministic per-record map (no dropout; BatchNorm, if any, frozen)."""
        was = g.training
        g.eval()
        try:
            return g(x)
        finally:
            g.train(was)

    @property
    def fixed_rows(self) -> bool:
        """The step draws the private batch at its fixed size B (``PrivateSampler.fixed_batch``: no host sync)."""
        return self.convention is None

    @torch.no_grad()
    def _target_rows(self, g: nn.Module, x_t: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Private batch -> exactly B rows of norm <= 1/2 (the only use of x_t; see module docstring).
        ``valid``: the fixed-size batch's mask (``PrivateSampler.fixed_batch``), False rows become the zero row;
        without it, a variable-size batch is cut or padded by ``rows.fixed_size``."""
        rows = self.rows(self._eval_features(g, x_t))
        return fixed_size(rows, self.batch_size) if valid is None else torch.where(valid[:, None], rows, 0.0)

    def __call__(self, g, x_s, f_s, x_t, valid: torch.Tensor | None = None):
        if self.convention is not None:
            return self._paper_call(g, x_s, x_t)
        share = Share.rows(self.batch_size)  # several processes: this rank's rows of the B target rows
        if valid is None:  # a variable-size batch, cut or padded to B as a whole
            own = share.take(self._target_rows(g, x_t, None))
        else:
            own = self._target_rows(g, share.take(x_t), share.take(valid))          # lines 10-11, target
        u = self.mechanism.draw_directions(f_s.device)                              # fresh directions (DP-SWD paper, Alg. 1)
        p_t = self.mechanism.release_shard(own, u, self.batch_size)                 # P_t = r(x_t) U + Z_t
        # the source side through the same (eval-mode) map, smoothed with noise of the same std (line 12)
        rows_s = self.rows(self._eval_features(g, x_s))
        p_s = self._source_projections(rows_s, u)                                  # P_s = r(x_s) U + Z_s
        sw = sliced_wasserstein_projected(p_s, p_t, self.power)
        return AlignmentOutput(self.weight * 2.0 * self.radius * sw, value=sw.detach())


# --------------------------------------------------------------------------------------- dann
    def _source_projections(self, rows_s: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``P_s = r(x_s) U + Z_s`` of the whole source batch on every rank, from this rank's rows of it: one
        all-gather; gradients flow into this rank's rows only (Z_s from the method's public generator)."""
        share = Share.rows(self.batch_size)
        return share.gather(share.projected(rows_s, u, self.mechanism.noise_std, self.rng))

    def _paper_call(self, g, x_s, x_t):
        """The released code (DP-SWD paper, Alg. 2 step 3, unit-norm assumption), privacy.convention=paper ONLY:
        ``weight * 2m * SW_2(g(x_s)/(2m) U + Z_s, g(x_t)/(2m) U + Z_t)``, m = max_j ||g(x_t^j)|| of the private
        batch: un-noised and data-dependent (it scales the source rows and the loss), so no finite ε covers it."""
        with torch.no_grad():
            f_t = self._eval_features(g, x_t)
            _, m = batch_max_scale(f_t)                                              # lines 10-11 as released
            m = Share.largest(m)  # several processes: the max of the whole batch, not a rank's
            rows_t = fixed_size(f_t / (2.0 * m), self.batch_size)
        u = self.mechanism.draw_directions(rows_t.device)
        p_t = self.mechanism.release(rows_t, u)                                      # P_t = g(x_t)/(2m) U + Z_t
        rows_s = self._eval_features(g, x_s) / (2.0 * m)                             # the source scaled by the private m
        p_s = self._source_projections(rows_s, u)
        sw = sliced_wasserstein_projected(p_s, p_t, self.power)
        return AlignmentOutput(self.weight * 2.0 * m * sw, value=sw.detach())

    def convention_report(self) -> dict:
        """ε = ∞ (the scale m is released un-noised) and, beside it, the ε of the target projections alone
        when all B rows may move (Frobenius diameter sqrt(B), per-row union bound at beta / (partners B))."""
        mech, b = self.mechanism, self.batch_size
        s_rows = l2_sensitivity(self.k, self.d, mech.beta / (mech.partners(mech.relation) * b), self.bound,
                                batch_scaling_diameter(b))
        rows = true_epsilon(mech.noise_std, s_rows, sample_rate=mech.sample_rate, steps=mech.releases,
                            delta=mech.ledger.delta, sampling=mech.ledger.sampling, delta_per_step=mech.beta,
                            relation=mech.relation, calibrate_with=mech.ledger.calibrate_with)
        return {"convention": "paper", "paper_epsilon": self.convention.epsilon, "paper_sigma": self.convention.sigma,
                "sensitivity_stated": mech.sensitivity, "sensitivity_true": math.inf, "epsilon_true": math.inf,
                "epsilon_true_note": UNBOUNDED, "sensitivity_worst_case_rows": s_rows,
                "epsilon_worst_case_rows": rows["epsilon_true"]}


class _DomainPath(nn.Module):
    """x -> D(GRL(g(x))): the path of a target sample's domain loss (g and D in one module)."""

    def __init__(self, g: nn.Module, disc: nn.Module) -> None:
        super().__init__()
        self.g, self.disc = g, disc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.disc(grad_reverse(self.g(x)))


class DANNAlignment(Alignment):
    """``weight * (CE(D(GRL(g(x_s))), 1) + CE(D(GRL(g(x_t))), 0))`` (DP-SWD paper, domain-adaptation baselines, not private)."""

    def __init__(self, discriminator: Callable[..., nn.Module], weight: float = 0.05) -> None:
        super().__init__(weight)
        self.make_discriminator = discriminator
        self._mods = nn.ModuleDict()

    def setup(self, actx):
        self._mods["disc"] = self.make_discriminator(in_dim=actx.feature_extractor.out_dim).to(actx.device)
        return super().setup(actx)

    def modules(self):
        return self._mods

    def _domain_loss(self, f: torch.Tensor, label: int, batch: int) -> torch.Tensor:
        """The sum of the domain losses of the rows ``f`` divided by the whole ``batch``'s size: a rank's share of
        the batch's mean."""
        logits = self._mods["disc"](grad_reverse(f))
        target = torch.full((f.shape[0],), label, dtype=torch.long, device=f.device)
        return F.cross_entropy(logits, target, reduction="sum") / max(batch, 1)

    def __call__(self, g, x_s, f_s, x_t):
        self.mechanism.release()  # an un-noised access, recorded
        with own_draws():  # this rank's target samples (dropout)
            f_t = g(x_t)
        # several processes: this rank's shares of the two batch means (the target batch's size added over the ranks)
        dom = self._domain_loss(f_s, SOURCE_DOMAIN, self.batch_size) + \
            self._domain_loss(f_t, TARGET_DOMAIN, Share.of_batch(f_t.shape[0]).n)
        return AlignmentOutput(self.weight * dom, value=dom.detach(), shared=True)


class DPDANNAlignment(DANNAlignment):
    """DANN with DP-SGD on the target domain loss (DP-SWD paper, domain-adaptation baselines, dpgen's corrected DP-DANN).

    Private part: ``weight * (sum_i clip_C(grad_{g,D} CE(D(GRL(g(x_t^i))), 0)) + N(0, s^2)) / (qN)``
    with s = noise_multiplier * sensitivity (C add/remove, 2C replace-one) — joint clipping over g and
    D (the released code clips each tensor separately, which makes the real sensitivity
    C * sqrt(#tensors), and adds noise to each per-sample gradient).  Public part:
    ``weight * CE(D(GRL(g(x_s))), 1)`` by ordinary autograd.  ``noise_multiplier``: null = calibrated
    to accountant.epsilon; a number = fixed (noise std / sensitivity), the epsilon it gives is reported.
    """

    private = True

    def __init__(self, discriminator: Callable[..., nn.Module], weight: float = 0.05, clip_norm: float = 1.0,
                 noise_multiplier: float | None = None, per_sample: str = "auto") -> None:
        super().__init__(discriminator, weight)
        if not clip_norm > 0:
            raise ValueError(f"model.alignment.clip_norm must be > 0, got {clip_norm}")
        # the per-sample gradients' path, as DP-SGD's (privacy.per_sample): auto | unfold | ghost | vmap
        self.per_sample = check_rule(per_sample, "model.alignment.per_sample")
        self.clip_norm = float(clip_norm)
        # null: calibrated to accountant.epsilon; a number (e.g. the released baseline's sigma): its epsilon is reported
        self.fixed_multiplier = noise_multiplier

    def noise_settings(self) -> NoiseSettings:
        return NoiseSettings(private=True, noise_multiplier=self.fixed_multiplier, scope="alignment")

    def setup(self, actx):
        self._mods["disc"] = self.make_discriminator(in_dim=actx.feature_extractor.out_dim).to(actx.device)
        self._path = _DomainPath(actx.feature_extractor, self._mods["disc"])
        self.grads = PerSampleGradients(self._path, self._losses, resolve_rule(self.per_sample, self._path, actx.device))
        self.batch_size = actx.batch_size  # the source batch (public)
        led = actx.ledger
        self.mechanism = NoisyGradientSum(led, clip_norm=self.clip_norm, sample_rate=actx.sample_rate,
                                          expected_batch_size=actx.sample_rate * actx.n_private, noise=self.noise,
                                          steps=actx.private_steps, seed=actx.seed, device=actx.device)
        m = self.mechanism
        return {"noise_multiplier": m.noise_multiplier, "clip_norm": self.clip_norm, "noise_std_on_sum": m.noise_std,
                "sensitivity_on_sum": m.sensitivity, "neighbouring_relation": m.relation, "guarantee": m.guarantee}

    @property
    def noise_multiplier(self) -> float:
        return self.mechanism.noise_multiplier

    @property
    def expected_batch(self) -> float:
        return self.mechanism.expected_batch_size

    @staticmethod
    def _losses(logits: torch.Tensor) -> torch.Tensor:
        """``(b,)``: each target sample's domain loss CE(D(GRL(g(x))), target domain)."""
        labels = torch.full((logits.shape[0],), TARGET_DOMAIN, dtype=torch.long, device=logits.device)
        return F.cross_entropy(logits, labels, reduction="none")

    def _flat_target_grads(self, x_t: torch.Tensor, valid: torch.Tensor | None = None):
        """The per-target-sample gradients over every parameter of g and D as one chunk: ``(b, D)`` rows, or their
        norms and weighted sum under ``ghost`` (``privacy.per_sample``, the same machinery as DP-SGD's; ``valid``:
        the real rows of a padded batch)."""
        with own_draws():  # several processes: this rank's samples' dropout masks, the ranks kept in step
            return self.grads((x_t,), (), valid)

    def per_sample_target_grads(self, x_t: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{name: (b, *shape)}`` per-target-sample gradients over every parameter of g and D."""
        return self._flat_target_grads(x_t).as_dict()

    def _private_grads(self, x_t: torch.Tensor, valid: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """Lines 5-7: per-sample gradients -> the mechanism (joint clip, sum, noise, / qN) -> x weight.  ``valid`` (a
        padded batch): a padding row's gradient is zero (norm 0: it adds nothing to the clipped sum)."""
        noisy = self.mechanism.release([self._flat_target_grads(x_t, valid)])
        return {k: self.weight * v for k, v in noisy.items()}

    def __call__(self, g, x_s, f_s, x_t, valid: torch.Tensor | None = None):
        dom_s = self._domain_loss(f_s, SOURCE_DOMAIN, self.batch_size)  # several processes: this rank's share
        return AlignmentOutput(self.weight * dom_s, private_grads=self._private_grads(x_t, valid), value=dom_s.detach(),
                               shared=True)


# ------------------------------------------------------------------------------------- method
class DomainAdaptation(Method):
    """g + h trained on the public source, aligned to the private target by ``alignment``."""

    split = "rows"  # several processes: the source batch's rows (the mechanisms share the target's)

    release_name = "da_model.pt"

    def __init__(self, feature_extractor: Callable[..., nn.Module], classifier: Callable[..., nn.Module],
                 alignment: Alignment, *, lr: float, private: bool, batch_size: int = 128, epochs: int = 100,
                 start_align: int = 10, betas: tuple[float, float] = (0.5, 0.999),
                 convention: PaperConvention | dict | None = None) -> None:
        if not isinstance(alignment, Alignment):
            raise TypeError(f"model.alignment must instantiate an Alignment, got {type(alignment).__name__}")
        convention = as_convention(convention)
        if convention is not None:
            if not isinstance(alignment, DPSWDAlignment):
                raise ValueError("privacy.convention=paper (the DP-SWD batch scaling) needs the dpswd alignment; set "
                                 "privacy.convention=honest")
            alignment.convention = convention
        if bool(private) != alignment.private:
            raise ValueError(f"model.private={private} but {type(alignment).__name__} is "
                             f"{'private' if alignment.private else 'not private'}; set model.private="
                             f"{str(alignment.private).lower()}")
        if not epochs >= 1:
            raise ValueError(f"model.epochs must be >= 1, got {epochs}")
        if not start_align >= 0:
            raise ValueError(f"model.start_align must be >= 0 (warm-up epochs before alignment), got {start_align}")
        if start_align >= epochs:  # e.g. a preset's start_align with a short model.epochs override
            warnings.warn(f"model.start_align={start_align} >= model.epochs={epochs}: alignment would never run; "
                          f"using model.start_align={epochs - 1} (set model.start_align below model.epochs to choose)",
                          stacklevel=2)
            start_align = epochs - 1
        self.make_g, self.make_h, self.alignment = feature_extractor, classifier, alignment
        self.batch_size, self.epochs, self.start_align = int(batch_size), int(epochs), int(start_align)
        self.lr, self.betas, self.private = float(lr), tuple(betas), bool(private)
        self.name = f"DA/{type(alignment).__name__}"
        self.g: nn.Module | None = None
        self.h: nn.Module | None = None
        self.device, self.precision = torch.device("cpu"), "32"

    def schedule(self, n_private: int) -> tuple[int, int, int]:
        """``(steps per epoch, warm-up steps, total steps)``; private batches = total - warm-up."""
        spe = math.ceil(n_private / self.batch_size)
        return spe, self.start_align * spe, self.epochs * spe

    def noise_settings(self) -> NoiseSettings:
        return self.alignment.noise_settings()

    def noise_form(self, policy: NoisePolicy) -> NoisePolicy:
        """The run's policy is the alignment's (its mechanism is the method's one release)."""
        self.alignment.take_noise(policy)
        return self.alignment.noise

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        if data.public is None or not len(data.public):
            raise ValueError("domain adaptation needs a labelled source domain in data.public: use a DA dataset "
                             "(dataset=mnist_usps, usps_mnist, office31, visda or digits_shift)")
        self.device, self.num_classes, self.source = ctx.device, data.num_classes, data.public
        self.precision = ctx.precision
        in_shape = tuple(getattr(data, "input_shape", ()) or data.public.x.shape[1:])
        self.g = self.make_g(in_shape=in_shape).to(ctx.device)
        self.h = self.make_h(in_dim=self.g.out_dim, num_classes=data.num_classes).to(ctx.device)
        n_priv, n_src = len(data.private), len(data.public)
        if self.batch_size > n_src:
            raise ValueError(f"model.batch_size={self.batch_size} exceeds the {n_src} source records; lower it")
        # secret sampling, directions and noise (module docstring)
        self.sampler = PrivateSampler(data.private, self.batch_size, ledger.sampling, seed=secret_seed(ctx),
                                      device=ctx.device)  # the private target split on the run's device, once
        self.spe, self.warm, self.end = self.schedule(n_priv)
        self.report = self.alignment.setup(AlignmentContext(
            self.g, n_priv, self.sampler.sample_rate, self.end - self.warm, self.batch_size, ledger, ctx.device,
            seed=mechanism_seed(ctx)))
        self.mechanisms = {"alignment": self.alignment.mechanism}
        self.alignment.rng = self.rng  # the public smoothing noise: the method's public generator (checkpointed)
        self.extra = self.alignment.modules()
        # trainer.graph: DP-DANN's Poisson target batch padded to a public capacity (privacy.sampler.padded_batch)
        self.capacity = poisson_capacity(n_priv, self.sampler.sample_rate) if ctx.graph and \
            ledger.sampling == "poisson" and isinstance(self.alignment, DPDANNAlignment) else None
        # private gradients (DP-DANN) are keyed by the names of the alignment's g+D module
        self._path_params = dict(getattr(self.alignment, "_path", nn.Module()).named_parameters())
        self._params = params = [*self.g.parameters(), *self.h.parameters(), *self.extra.parameters()]
        # trainer.compile=on: the PUBLIC source forward (g, h) and the Adam step compiled (utils.compiling); the
        # alignment (the private target's rows or gradients, clipping, noise) runs eagerly on g itself
        self._g_source, self._h_source = (compile_module(m, ctx.compile, ctx.device) for m in (self.g, self.h))
        self.opt = ParallelOptimizer(adam(params, ctx.compile, ctx.device, ctx.graph, lr=self.lr, betas=self.betas),
                                     params)
        # source batches: public randomness, drawn on the device from the source split moved there once
        self.pub_gen = device_generator(ctx.seed + 2, ctx.device)
        self._source_xy = (data.public.x.to(ctx.device), data.public.y.to(ctx.device))
        self._signature = {"n_private": n_priv, "n_source": n_src, "dataset": data.name,
                           "batch_size": self.batch_size, "epochs": self.epochs, "start_align": self.start_align,
                           "alignment": type(self.alignment).__name__, "sampling": ledger.sampling}

    @property
    def total_steps(self) -> int:
        return self.end

    def capturable(self, t: int) -> bool:
        """The aligning steps (t >= the warm-up) are captured; the warm-up steps (no alignment) run eagerly, and so
        do the aligning steps of an alignment whose Poisson batch is not static (the non-private DANN and SWD)."""
        static = getattr(self.alignment, "fixed_rows", False) or self.capacity or self.sampler.sampling != "poisson"
        return t >= self.warm and bool(static)

    def step_mechanisms(self, t: int) -> list[Mechanism]:
        return [] if t < self.warm else [self.alignment.mechanism]

    def step(self, t: int) -> dict:
        """Domain adaptation, one step (DP-SWD Algorithm 2 for the dpswd alignment)::

            (x_s, y_s) public source batch;  L_c = CE(h(g(x_s)), y_s)                   (1-2, line 7)
            after warm-up: x_t ~ Poisson(q) private target batch,
                L = L_c + alignment(g, x_s, x_t)   (the release happens inside)         (3, lines 8-12)
            (g, h) <- Adam(grad L)                                                      (4, line 13)
        """
        self.g.train()
        self.h.train()
        idx = torch.randint(len(self.source), (self.batch_size,), generator=self.pub_gen,
                            device=self.pub_gen.device)                                      # 1. public batch
        share = Share.rows(self.batch_size)  # several processes: this rank's rows of the source batch
        x_s, y_s = (t[share.take(idx)] for t in self._source_xy)
        with autocast(self.device, self.precision), own_draws():  # bf16: the PUBLIC source forward only
            f_s = self._g_source(x_s)  # g and h, or their compiled views (the same parameters)
            logits_s = self._h_source(f_s)
        f_s = f_s.float()  # the alignment (rows, clipping, noise, private gradients) runs in float32
        loss_c = F.cross_entropy(logits_s.float(), y_s, reduction="sum") / self.batch_size  # 2. L_c (line 7)
        loss, out = loss_c, None
        if t >= self.warm:                                                                   # 3. align (8-12)
            if getattr(self.alignment, "fixed_rows", False):  # DP-SWD: B rows and their padding mask, no sync
                x_t, _, valid = self.sampler.fixed_batch(self.batch_size)  # labels are -1: unlabelled target
                out = self.alignment(self.g, x_s, f_s, x_t, valid=valid)  # the release happens in here
            elif self.capacity:  # DP-DANN, static shapes: the Poisson batch padded, padding rows weighted 0
                x_t, _, valid = self.sampler.padded_batch(self.capacity)
                out = self.alignment(self.g, x_s, f_s, x_t, valid=valid)  # the release happens in here
            else:
                x_t, _ = self.sampler.sample()  # labels are -1: the target is unlabelled
                out = self.alignment(self.g, x_s, f_s, x_t.to(self.device))  # the release happens in here
            loss = loss_c + out.loss
        self.opt.zero_grad(set_to_none=True)                                                 # 4. Adam (13)
        loss.backward()
        # several processes: the gradients added over the ranks (one all-reduce), the logged shares with them
        shares = [loss_c.detach()] + ([out.loss.detach(), torch.as_tensor(out.value, device=loss_c.device)]
                                      if out is not None and out.shared else [])
        whole = self.opt.reduce(also=torch.stack(shares))
        if out is not None and out.private_grads is not None:  # released: the whole batch's already
            for k, gr in out.private_grads.items():
                p = self._path_params[k]
                p.grad = gr.to(p.dtype) if p.grad is None else p.grad + gr.to(p.dtype)
        self.opt.step()
        # logged: the whole batch's values (public or released quantities only; no host sync)
        values = {"loss": whole[0], "loss_cls": whole[0], "aligning": float(out is not None)}
        if out is not None:
            align_loss, values["align"] = (whole[1], whole[2]) if out.shared else (out.loss.detach(), out.value)
            values["loss"] = whole[0] + align_loss
        return values

    def progress_info(self, values: dict) -> str:
        return f"L_c {values['loss_cls']:.3f}" + (f"  align {values['align']:.4f}" if "align" in values else "")

    # -- state ------------------------------------------------------------------------------
    def convention_report(self) -> dict | None:
        conv = getattr(self.alignment, "convention", None)
        return self.alignment.convention_report() if conv is not None else None

    def signature(self) -> dict:
        return self._signature

    def state_dict(self) -> dict:
        return {"g": self.g.state_dict(), "h": self.h.state_dict(), "alignment_modules": self.extra.state_dict(),
                "optimizer": self.opt.state_dict(), "public_generator": generator_state(self.pub_gen)}

    def load_state_dict(self, state: dict) -> None:
        self.g.load_state_dict(state["g"])
        self.h.load_state_dict(state["h"])
        self.extra.load_state_dict(state["alignment_modules"])
        self.opt.load_state_dict(state["optimizer"])
        resumed_generator(self.pub_gen, state["public_generator"])

    def release_state(self) -> dict:
        return {"g": self.g.state_dict(), "h": self.h.state_dict()}

    def train_summary(self) -> dict:
        return {"warmup_steps": self.warm, "steps_per_epoch": self.spe, "private_steps_planned": self.end - self.warm,
                "alignment": type(self.alignment).__name__, "private": self.private, **self.report}

    @torch.no_grad()
    def predict(self, x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
        """Class labels ``(n,)`` for inputs ``x: (n, *input_shape)`` (eval mode, on cpu)."""
        if self.g is None or self.h is None:
            raise RuntimeError("train the method first (methods.loop.train) or restore() a release before predict()")
        self.g.eval()
        self.h.eval()
        out = [self.h(self.g(x[i:i + batch_size].to(self.device))).argmax(1).cpu() for i in range(0, len(x), batch_size)]
        self.g.train()
        self.h.train()
        return torch.cat(out) if out else torch.empty(0, dtype=torch.long)
