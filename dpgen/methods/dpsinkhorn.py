"""DP-Sinkhorn (Cao et al., NeurIPS 2021; DP-Sinkhorn paper): a generator trained with the
semi-debiased Sinkhorn loss, made private by sanitising the gradient w.r.t. the generated images.

Privacy boundary: private images are read only in ``step`` through the PrivateSampler (Poisson
sampling at rate q = B/N, the accountant's assumption).  They enter the loss only through the
term 2·W(X[0:n], Y); the only quantity that depends on them and leaves the loss is the gradient
of the loss w.r.t. the first n generated images (the "cross" group), which a backward hook on the
generator output replaces by its sanitised version before it reaches the generator:

    G̃ = clip(G) + N(0, (2Cσ)² I)                                      (DP-Sinkhorn paper, the released code's sanitisation)

(``privacy.mechanisms.ImageGradientSanitiser``: it clips, draws the noise from its own generator
and records the release in the ledger in the same call.)  Non-finite entries of G are set to 0
before the clip, so a non-finite un-noised loss never stops or changes the run by itself (it
would be a one-bit release of private data); the loop checks released and public values only.

* ``clip=whole`` (default; the released code ``src/rdp/privacy.py``): one clipping of the whole
  (n × D) gradient to Frobenius norm C; sensitivity 2C for any add/remove of a record, noise
  multiplier σ; the ledger records σ at rate q per step.
* ``clip=per_row`` (the paper's Alg. 1): every row clipped to C; since every row depends on the
  whole real batch through the transport plan, the sensitivity is 2C√n and the ledger records the
  effective noise multiplier σ/√n (Thm. 4.1's n·α/(2σ²) per step).
  Paper vs code: Alg. 1 / Thm. 4.1 describe per-row clipping, but the published ε values were
  computed by the code's whole-batch mechanism with the per-step RDP of a multiplier-σ Gaussian.
  dpgen runs the mechanism that is configured and accounts for exactly that one.
* The n' debiasing rows X[n:n+n'] get a gradient that does not depend on real data (the term
  W(X[0:n], X[n':n+n']) involves generated samples only); it is clipped to C (as in the code) but
  not noised.  Everything after the hooks (back-propagation through G, Adam) is post-processing.
* Logs: the loss value and the raw cross-group gradient norm are un-noised functions of the private
  batch, so a private run logs neither (only ε and the norm of the *released* gradient); the loss
  curve is logged for non-private runs only.
* An empty Poisson draw (probability ≈ e^{-B}) releases the noised gradient of the debiasing term
  alone (the cross term is taken as 0, which lies inside the C-ball), so every step is a release
  of the same mechanism and is recorded.

Loss (DP-Sinkhorn paper, semi-debiased Sinkhorn loss): features ``[x ‖ 15·onehot(y)]`` with images in [−1, 1]; cost ‖x−y‖² + m‖x−y‖₁;
entropic OT with λ = ``reg`` by GeomLoss' Sinkhorn iteration, both terms in one batched solve
(:mod:`dpgen.ot.sinkhorn`); semi-debiased estimator
2·W(X[0:n], Y) − W(X[0:n], X[n':n+n']), n' = floor(p·n).  The generated batch size n is fixed
(= the expected private batch size B); the reference code uses the drawn size instead, which does
not change privacy.

Representation (``model.representation``; dpgen's option, not in the paper): ``null`` (default)
is the paper's pixel features.  ``{kind: dct, n_components: K}`` replaces ``flatten(x)`` in the
features of BOTH the private and the generated images by the codes ``x_flat V`` of a FIXED linear
map ``V: (D, K)`` with orthonormal columns (the K lowest 2-D DCT frequencies of
:mod:`dpgen.data.representations`, images in [−1, 1], centre 0), so the cost works on
``[x_flat V ‖ 15·onehot(y)]``.  ``V`` is a public constant: it depends on the image shape and K
only, never on the private data (``kind: pca`` is the PCA of the PUBLIC split, refused without
one).  Privacy is unchanged: the released quantity is still the clipped + noised gradient w.r.t.
the generated images X[0:n] (``ImageGradientSanitiser``); its sensitivity 2C (whole) / 2C√n
(per_row) comes from the clip alone and holds for ANY loss, including one computed on codes
(the chain rule through the fixed V happens before the hook, inside the clipped quantity).

Several processes (split by ``rows``: ``methods.parallel``): the generated batch is split, the release is not.  Every rank
draws the whole Poisson batch Y (``PrivateSampler(split=False)``: the transport plan couples it) and the
codes and labels of all n + n' generated samples from identically seeded generators; it runs the generator
forward and backward on its contiguous share of the n + n' rows only (BatchNorm normalising by the whole
batch: ``parallel.GeneratedSide``).  One all-gather of the generated images gives every rank the whole X, so
every rank computes the same loss and the hook sees the WHOLE dL/dX[0:n]: the release (one clip of the
whole matrix, one noise draw from the sanitiser's generator, seeded alike on every rank) is the
single-process release, noised once and recorded once.  The gradient then flows into each rank's own rows,
and the generator's parameter gradients (each rank's partial sum) are added in one all-reduce by the
optimiser's step (``parallel.ParallelOptimizer``).  What crosses between the processes each step: the generated images and BatchNorm's batch sums
(functions of public codes and of the model), and on the way back BatchNorm's statistic gradients and the
parameter gradients' partial sums, computed from G~ (the hook runs on every rank before the backward
reaches the gather) and the debiasing rows' clipped, data-independent gradient: post-processing of the
release, never the un-noised dL/dX.  The seeds of the sampler and of the noise generator are shared once
at the start, as for every family (the interconnect is inside the run's trust boundary).  One process: the
share is everything and the gather is the identity (bit for bit the single-process step).

Schedule: σ fixed (``noise_multiplier``) and training runs until the next step would exceed the
target ε (``ledger.allowance``) or ``steps`` (if set), whichever comes first.  With
``noise_multiplier: null`` σ is calibrated so that exactly ``steps`` steps spend the target ε
(used for shortened CPU schedules at the paper's (ε, δ)).

Randomness: sampling and noise are seeded from the OS entropy pool unless
``trainer.deterministic=true``; ``checkpoints/last.pt`` holds the RNG states (sensitive),
``generator.pt`` (weights only) is the artefact to publish.  The training loop, checkpoints and the
budget stop are ``methods.loop``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..data import DataSplits
from ..data.representations import build_representation
from ..errors import ConfigError
from ..ot.sinkhorn import DEBIAS, EntropicOT, embed, extra_rows, max_cost, sinkhorn_generator_loss
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.dpsgd import poisson_capacity
from ..privacy.image_gradient import CLIP_MODES, clip_whole
from ..privacy.mechanisms import ImageGradientSanitiser
from ..privacy.noise import FixedMultiplier, FixedStd, NoisePolicy, NoiseSettings
from ..privacy.sampler import device_generator, generator_state, resumed_generator
from ..utils import autocast
from ..utils.misc import on_gpu
from .base import GenerativeMethod, TrainContext, mechanism_seed, secret_seed, settle
from .parallel import GeneratedSide, ParallelOptimizer, Share
from .warm_start import WarmTarget, as_warm_start


@dataclass(frozen=True)
class SinkhornLoss:
    """The semi-debiased Sinkhorn loss (``model.cost``, ``m``, ``reg``, ``scaling``, ``debias``, ``debias_ratio``,
    ``embed_multiplier``, ``sinkhorn_backend``)."""

    cost: str = "l1+l2"
    m: float = 1.0
    reg: float = 0.05
    scaling: float = 0.9
    debias: str = "semi"
    debias_ratio: float = 0.4
    embed_multiplier: float = 15.0
    backend: str = "tensorized"

    def __post_init__(self) -> None:
        if self.debias not in DEBIAS:
            raise ValueError(f"model.debias={self.debias!r} is unknown; choose one of {DEBIAS}")
        extra_rows(1, self.debias_ratio)  # validates p
        ot = self.entropic_ot()  # checks cost, m, reg, scaling and the backend
        settle(self, m=ot.m, reg=ot.reg, scaling=ot.scaling, debias_ratio=float(self.debias_ratio),
               embed_multiplier=float(self.embed_multiplier))

    def entropic_ot(self) -> EntropicOT:
        """``W_{c,λ}`` of these settings (:class:`dpgen.ot.sinkhorn.EntropicOT`)."""
        return EntropicOT(reg=self.reg, cost=self.cost, m=self.m, scaling=self.scaling, backend=self.backend)

    def n_extra(self, n: int) -> int:
        """``n'``: the generated rows of the debiasing term (0 unless ``debias=semi``)."""
        return extra_rows(n, self.debias_ratio) if self.debias == "semi" else 0


@dataclass(frozen=True)
class ImageGradientRelease:
    """The release of the image gradient (``model.clip_norm``, ``noise_multiplier``, ``clip``, ``private``):
    ``noise_multiplier=None`` calibrates sigma to the target epsilon."""

    clip_norm: float = 0.5
    noise_multiplier: float | None = 1.1
    clip: str = "whole"
    private: bool = True

    def __post_init__(self) -> None:
        if self.clip not in CLIP_MODES:
            raise ValueError(f"model.clip={self.clip!r} is unknown; choose one of {CLIP_MODES}")
        if self.clip_norm <= 0:
            raise ValueError(f"model.clip_norm (C) must be > 0, got {self.clip_norm}")
        settle(self, clip_norm=float(self.clip_norm), private=bool(self.private))


@dataclass(frozen=True)
class AdamSettings:
    """The generator's optimiser (``model.lr``, ``weight_decay``, ``betas``): Adam."""

    lr: float = 1e-5
    weight_decay: float = 1e-5
    betas: tuple[float, float] = (0.9, 0.999)

    def __post_init__(self) -> None:
        settle(self, lr=float(self.lr), weight_decay=float(self.weight_decay), betas=tuple(self.betas))


@dataclass(frozen=True)
class Schedule:
    """``model.batch_size`` (B: the expected Poisson batch and the generated batch n) and ``model.steps`` (None:
    until the target epsilon would be exceeded)."""

    batch_size: int = 50
    steps: int | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and int(self.steps) < 1:
            raise ValueError(f"model.steps must be >= 1 or null (until the target epsilon), got {self.steps}")
        settle(self, batch_size=int(self.batch_size), steps=None if self.steps is None else int(self.steps))


class DPSinkhorn(GenerativeMethod):
    """Generator trained with the (semi-debiased) Sinkhorn loss; private through the image gradient.

    The flat ``model.*`` settings are grouped as the algorithm reads them: ``self.loss``
    (:class:`SinkhornLoss`), ``self.release`` (:class:`ImageGradientRelease`), ``self.optimiser``
    (:class:`AdamSettings`) and ``self.schedule`` (:class:`Schedule`)."""

    split = "rows"  # several processes: the generated batch's rows (the private batch and the release whole)

    name = "DP-Sinkhorn"
    release_name = "generator.pt"

    def __init__(self, generator: Callable[..., torch.nn.Module], batch_size: int = 50, steps: int | None = None,
                 lr: float = 1e-5, weight_decay: float = 1e-5, betas: tuple[float, float] = (0.9, 0.999),
                 cost: str = "l1+l2", m: float = 1.0, reg: float = 0.05, scaling: float = 0.9,
                 debias: str = "semi", debias_ratio: float = 0.4, embed_multiplier: float = 15.0,
                 clip_norm: float = 0.5, noise_multiplier: float | None = 1.1, clip: str = "whole",
                 private: bool = True, representation: dict | None = None,
                 sinkhorn_backend: str = "tensorized", warm_start: dict | None = None) -> None:
        self.warm_start = as_warm_start(warm_start)  # methods.warm_start: run by the loop
        if self.warm_start is not None and not private:
            raise ConfigError("model.warm_start spends a share of a private budget: drop model.private=false")
        self.loss = SinkhornLoss(cost=cost, m=m, reg=reg, scaling=scaling, debias=debias, debias_ratio=debias_ratio,
                                 embed_multiplier=embed_multiplier, backend=sinkhorn_backend)
        self.ot = self.loss.entropic_ot()  # its diameter is set in setup (the features' public box)
        self.release = ImageGradientRelease(clip_norm=clip_norm, noise_multiplier=noise_multiplier, clip=clip,
                                            private=private)
        self.optimiser = AdamSettings(lr=lr, weight_decay=weight_decay, betas=betas)
        self.schedule = Schedule(batch_size=batch_size, steps=steps)
        if not private and steps is None:
            raise ValueError("a non-private run (model.private=false) needs model.steps")
        if private and noise_multiplier is None and steps is None:
            raise ValueError("model.noise_multiplier=null calibrates sigma to spend accountant.epsilon in exactly "
                             "model.steps steps: set model.steps (or a fixed model.noise_multiplier)")
        self.rep_cfg = None if representation is None else dict(representation)
        if self.rep_cfg is not None:
            kind = self.rep_cfg.get("kind", "dct")
            if kind not in ("dct", "pca"):
                raise ValueError(f"model.representation.kind={kind!r} is unknown for DP-Sinkhorn; choose dct (fixed) "
                                 "or pca (PUBLIC split), or model.representation=null (pixels)")
            extra = set(self.rep_cfg) - {"kind", "n_components"}
            if extra:
                raise ValueError(f"model.representation accepts kind and n_components only, got {sorted(extra)}")
        self.make_generator = generator
        self.G: torch.nn.Module | None = None
        self.device, self.precision = torch.device("cpu"), "32"
        self.num_classes = 0
        self.basis: torch.Tensor | None = None  # (D, K) public linear map, or None (pixels)
        self.center: torch.Tensor | None = None  # (D,) public centre

    # ------------------------------------------------------------------------------------
    def noise_settings(self) -> NoiseSettings:
        r = self.release
        return NoiseSettings(private=r.private, noise_multiplier=r.noise_multiplier, history=self.warm_start is not None)

    def noise_form(self, policy: NoisePolicy) -> NoisePolicy:
        """The paper's sigma fixed: noise std 2 C sigma (multiplier sigma for the whole-batch clip, sigma / sqrt(n) per row)."""
        if isinstance(policy, FixedMultiplier):
            return FixedStd(2.0 * self.release.clip_norm * policy.multiplier)
        return policy

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self.device, self.num_classes, self.precision = ctx.device, data.num_classes, ctx.precision
        self.G = self.make_generator(image_shape=data.image_shape, n_labels=data.num_classes).to(ctx.device)
        self.generated = GeneratedSide(self.G)  # several processes: each rank generates its rows of the batch
        # the released gradient couples the whole batch: several processes read the whole batch (split=False)
        release, schedule = self.release, self.schedule
        self.sampler = PrivateSampler(data.private, schedule.batch_size, ledger.sampling, seed=secret_seed(ctx),
                                      split=False, device=ctx.device)  # on an accelerator: sampler.poisson_indices
        self.sanitiser = ImageGradientSanitiser(ledger, clip_norm=release.clip_norm, n_rows=schedule.batch_size,
                                                sample_rate=self.sampler.sample_rate, clip=release.clip,
                                                noise=self.noise, steps=schedule.steps, seed=mechanism_seed(ctx),
                                                device=ctx.device)
        self.mechanisms = {"image_gradient": self.sanitiser}
        # trainer.graph: static shapes, the Poisson batch padded to a public capacity (privacy.sampler.padded_batch)
        # (the semi-debiased loss on the tensorized backend weighs the padding 0; another loss keeps the exact batch
        # and its steps run eagerly: capturable)
        static = ctx.graph and ledger.sampling == "poisson" and self.loss.debias == "semi" \
            and extra_rows(schedule.batch_size, self.loss.debias_ratio) > 0 and self.ot.backend == "tensorized"
        self.capacity = poisson_capacity(len(data.private), self.sampler.sample_rate) if static else None
        # the generated side's codes and labels: public randomness from a generator of the method's (checkpointed)
        self.pub_gen = device_generator(ctx.seed + 5, ctx.device)
        lo, hi = data.value_range
        self._range = (lo, hi)  # data range -> [-1, 1] (public constants)
        if self.rep_cfg is not None:
            self.basis, self.center = sinkhorn_representation(self.rep_cfg, data, ctx.device)
        # ε-scaling starts at the largest cost the features can have (public: their declared box), so the
        # Sinkhorn schedule is fixed before the step and nothing is read back from the device
        self.ot.diameter = max(max_cost(self.ot.cost, self.ot.m, *self.feature_box(data.image_shape)), 10 * self.ot.reg)
        loss = self.loss
        self._signature = {"n_private": len(data.private), "dataset": data.name, "batch_size": schedule.batch_size,
                           "steps": schedule.steps, "sigma": self.sanitiser.sigma, "clip": release.clip,
                           "clip_norm": release.clip_norm, "cost": loss.cost, "m": loss.m, "reg": loss.reg,
                           "debias": loss.debias, "ratio": loss.debias_ratio, "sampling": ledger.sampling,
                           "private": release.private}
        if self.rep_cfg is not None:  # (absent for pixels: pixel-mode checkpoints keep their signature)
            self._signature["representation"] = dict(self.rep_cfg)
        # capturable on a GPU: Adam's step counts live on the device (no host read per step); foreach: one
        # multi-tensor kernel per update term for all the parameters (PyTorch's default on a GPU, asked for
        # everywhere so that a CPU run takes the same path)
        adam = self.optimiser
        self.opt = ParallelOptimizer(torch.optim.Adam(self.G.parameters(), lr=adam.lr, betas=adam.betas,
                                                      weight_decay=adam.weight_decay, capturable=on_gpu(ctx.device),
                                                      foreach=True), self.G.parameters())
        self.G.train()

    @property
    def total_steps(self) -> int | None:
        return self.schedule.steps  # None: until the budget is spent (the loop's allowance)

    def step(self, t: int) -> dict:
        """DP-Sinkhorn, one generator update (Alg. 1)::

            X = G(z) (n + n' samples), Y ~ Poisson(q) private batch
            L = 2 W_eps(X[0:n], Y) - W_eps(X[0:n], X[n:n+n'])     (semi-debiased)
            G~ = clip_C(dL/dX[0:n]) + N(0, (2 C sigma)^2)          (THE release, in the backward hook)
            theta <- Adam(theta, G~ dX/dtheta)                      (post-processing)

        Several processes: each rank generates its share of X and back-propagates into it; the loss, the
        hook and the release are computed on the gathered whole X on every rank (module docstring).
        """
        n, k, dev, objective, release = self.schedule.batch_size, self.num_classes, self.device, self.loss, self.release
        n_extra = objective.n_extra(n)
        y_g = torch.randint(max(k, 1), (n,), device=dev, generator=self.pub_gen)
        y_all = torch.cat([y_g, y_g[:n_extra]])  # the n' extra samples reuse the first n' labels, fresh z
        # several processes: each rank generates its rows of the n + n' samples (the same codes and labels as one
        # process: every rank draws them all), then ONE all-gather gives every rank the whole X; the backward
        # keeps this rank's rows
        share = Share.rows(n + n_extra)
        z = self.G.latent(n + n_extra, device=dev, generator=self.pub_gen)
        with autocast(dev, self.precision):  # trainer.precision=bf16: the generator forward only
            x_part = self.generated(z, y_all, share)                              # X = G(z), this rank's rows
        x_all = share.gather(x_part.float())  # (n + n', C, H, W); the released dL/dX is float32
        x_cross, x_debias = x_all[:n], x_all[n:]
        released = {}

        def cross_hook(g: torch.Tensor) -> torch.Tensor:  # G~ = clip(dL/dX[0:n]) + N(0, (2C sigma)^2): THE release
            released["g"] = self.sanitiser.release(g)
            return released["g"]

        x_cross.register_hook(cross_hook)
        if n_extra and release.private:
            x_debias.register_hook(lambda g: clip_whole(g, release.clip_norm))  # no data dependence: clip, no noise
        if self.capacity:  # static shapes: the same Poisson batch in `capacity` rows, padding rows weighted 0
            x_t, y_t, valid = self.sampler.padded_batch(self.capacity)
        else:
            (x_t, y_t), valid = self.sampler.sample(), None                          # Y ~ Poisson(q) private batch
        lo, hi = self._range  # public value range: a non-finite or out-of-range pixel cannot crash the loss
        x_t = torch.nan_to_num(x_t.to(dev), nan=lo, posinf=hi, neginf=lo).clamp(lo, hi)
        rows_real = embed(self._features((x_t - lo) / (hi - lo) * 2.0 - 1.0), y_t.to(dev), k, objective.embed_multiplier)
        rows_gen = embed(self._features(torch.cat([x_cross, x_debias])), y_all, k, objective.embed_multiplier)
        if valid is not None and valid.shape[0] == self.capacity:  # the padded batch (a draw above it: exact below)
            loss = sinkhorn_generator_loss(self.ot, rows_gen, rows_real, n, objective.debias, objective.debias_ratio,
                                           valid)
        elif rows_real.shape[0] > 0:  # L = 2 W(X[0:n], Y) - W(X[0:n], X[n':n+n'])  (semi-debiased, DP-Sinkhorn paper, semi-debiased Sinkhorn loss)
            loss = sinkhorn_generator_loss(self.ot, rows_gen, rows_real, n, objective.debias, objective.debias_ratio)
        elif n_extra:  # empty draw: the cross term is 0 (module docstring)
            loss = -self.ot(rows_gen[:n], rows_gen[n_extra:n + n_extra])
        else:
            loss = (rows_gen[:n] * 0.0).sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()  # the hook releases G~; back-propagation through G is post-processing
        self.opt.step()  # several processes: each rank's rows' part of dtheta added first, in one all-reduce
        # only the norm of the RELEASED gradient may be logged by a private run; the loss value is an
        # un-noised function of the private batch (logged for non-private runs only)
        out = {"released_grad_norm": released["g"].norm()}  # 0-d tensors: the loop syncs at its log cadence
        return out if release.private else {"loss": loss.detach(), **out}

    def capturable(self, t: int) -> bool:
        """A Poisson batch is static only when padded (the semi-debiased loss): otherwise the step runs eagerly."""
        return self.capacity is not None or self.sampler.sampling != "poisson"

    def feature_box(self, image_shape: tuple[int, ...]) -> tuple[float, float]:
        """``(largest squared L2, largest L1)`` distance between two feature rows ``[features(x) ‖ e·onehot(y)]``
        of images in [−1, 1] (public constants).  Codes ``(x − c) V`` (orthonormal V) are no farther apart in L2
        than the images (≤ 2√D), so their L1 distance is ≤ 2√(K D)."""
        d = math.prod(image_shape)
        sq, l1 = 4.0 * d, (2.0 * d if self.basis is None else 2.0 * math.sqrt(self.basis.shape[1] * d))
        if self.num_classes:
            sq, l1 = sq + 2.0 * self.loss.embed_multiplier ** 2, l1 + 2.0 * self.loss.embed_multiplier
        return sq, l1

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        """Images in [−1, 1] ``(n, C, H, W)`` -> pixels (unchanged) or codes ``(x_flat − c) V: (n, K)``."""
        if self.basis is None:
            return x
        return (x.flatten(1) - self.center) @ self.basis

    def warm_target(self) -> WarmTarget:
        """The warm-up fits ``G`` on images in [−1, 1] (the generator's output scale; public value range)."""
        lo, hi = self._range

        def rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return ((x - lo) / (hi - lo) * 2.0 - 1.0).flatten(1)

        def generate(y: torch.Tensor, share: Share) -> torch.Tensor:
            z = self.G.latent(y.shape[0], device=self.device)  # all the codes, as one process draws them
            return self.generated(z, y, share).float().flatten(1)
        return WarmTarget(rows=rows, device=self.device, generate=generate, parameters=self.G.parameters())

    def progress_info(self, values: dict) -> str:
        return f"loss {values['loss']:.4f}" if "loss" in values else f"|released grad| {values['released_grad_norm']:.3f}"

    # -- state ----------------------------------------------------------------------------
    def signature(self) -> dict:
        return self._signature

    def state_dict(self) -> dict:
        return {"generator": self.G.state_dict(), "optimizer": self.opt.state_dict(),
                "public_generator": generator_state(self.pub_gen)}

    def load_state_dict(self, state: dict) -> None:
        self.G.load_state_dict(state["generator"])
        self.opt.load_state_dict(state["optimizer"])
        if "public_generator" in state:
            resumed_generator(self.pub_gen, state["public_generator"])

    def release_state(self) -> dict:
        return {"generator": self.G.state_dict()}

    def train_summary(self) -> dict:
        s, loss, release = self.sanitiser, self.loss, self.release
        # one spelling: noise_multiplier = noise_std / sensitivity (accounted); sigma = the paper's (std 2 C sigma)
        return {"sigma": s.sigma, "noise_multiplier": s.noise_multiplier, "noise_std": s.noise_std,
                "clip": release.clip, "clip_norm": release.clip_norm, "sensitivity": s.sensitivity_under(s.relation),
                "sigma_calibrated": release.private and release.noise_multiplier is None,
                "cost": loss.cost, "m": loss.m, "reg": loss.reg, "debias": loss.debias,
                "debias_ratio": loss.debias_ratio, "sinkhorn_backend": loss.backend, "guarantee": s.guarantee,
                "representation": None if self.rep_cfg is None else
                f"{self.rep_cfg.get('kind', 'dct')}-{self.basis.shape[1]}"}

    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        """``n`` images ``(n, C, H, W)`` in [0, 1] (generator output (x+1)/2), BN in eval mode."""
        if self.G is None:
            raise RuntimeError("train the method first (methods.loop.train) or restore() a release before sample()")
        self.G.eval()
        if labels is None:
            labels = torch.arange(n) % max(self.num_classes, 1)
        xs = []
        for i in range(0, n, batch_size):
            y = labels[i:i + batch_size].to(self.device)
            xs.append(((self.G(self.G.latent(y.shape[0], device=self.device), y) + 1) / 2).clamp(0, 1).cpu())
        self.G.train()
        return torch.cat(xs), labels.cpu()


def sinkhorn_representation(cfg: dict, data: DataSplits, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The public linear map of ``model.representation`` for images scaled to [−1, 1]:
    ``(V: (D, K) float32, c: (D,) float32)``.  ``dct``: the fixed DCT basis, centre 0 (no data);
    ``pca``: PCA of the PUBLIC split (mapped to [−1, 1]) centred at its mean.  Never reads ``data.private``."""
    cfg = dict(cfg)
    kind, k = cfg.get("kind", "dct"), cfg.get("n_components")
    lo, hi = data.value_range
    public_x = None
    if kind == "pca":
        if data.public is None:
            raise ValueError("model.representation.kind=pca is fitted on the PUBLIC split: set "
                             "dataset.public_fraction > 0, or use kind=dct (fixed, no data)")
        public_x = (data.public.x - lo) / (hi - lo) * 2.0 - 1.0
    rep = build_representation(kind, data.image_shape, (-1.0, 1.0), n_components=k,
                               center=0.0 if kind == "dct" else None, public_x=public_x)
    return rep.basis.float().to(device), rep.center.float().to(device)
