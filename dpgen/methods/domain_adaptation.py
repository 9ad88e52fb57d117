"""Unsupervised domain adaptation with a private target domain (spec dpswd.md §2).

One method, :class:`DomainAdaptation`, trains a feature extractor g and a classifier h on the
labelled public *source* (``data.public``) and aligns g's features of the source with those of the
unlabelled private *target* (``data.private``).  The alignment term is a Hydra-instantiated
component (``model.alignment._target_``), one class per variant:

* :class:`SWDAlignment`     — ``swd``: plain SW_2 between g(x_s) and g(x_t) (Lee et al. 2019); not private.
* :class:`DPSWDAlignment`   — ``dpswd``: Algorithm 2, the target side through the DP-SWD mechanism.
* :class:`DANNAlignment`    — ``dann``: gradient reversal + domain discriminator (Ganin et al.); not private.
* :class:`DPDANNAlignment`  — ``dp_dann``: DANN whose target-dependent gradients go through DP-SGD.

Training loop (Alg. 2, one step; T = epochs * ceil(N_t / B) steps, an epoch being one expected pass
over the private target set — the step count the paper's accountant assumed):
  1. source batch (x_s, y_s): B public records, uniformly at random (public randomness)
  2. L_c = CE(h(g(x_s)), y_s)                                                       (Alg. 2 line 7)
  3. from epoch ``start_align`` on: private target batch x_t ~ PrivateSampler(rate B/N_t),
     L = L_c + alignment(g, g(x_s), x_t)                                           (lines 8-12)
  4. Adam step on g, h (and the discriminator)                                      (line 13)
Warm-up steps (epochs < start_align) never touch the private data.

Privacy boundary (the private variants):
* ``dpswd``: the target batch enters only ``DPSWDAlignment._target_rows`` -> the Gaussian release
  ``P_t = r(x_t) U + Z_t``.  r(x) = clip_{1/2}(g(x) / (2R)) with g in *eval* mode, under
  ``no_grad``: a fixed per-record map (no dropout randomness, no BatchNorm statistics, no autograd
  path from x_t to any weight); R is a PUBLIC constant (``feature_radius`` or the extractor's public
  bound, sqrt(320) for the Sigmoid digits features), never the un-noised batch maximum the released
  code uses (§1.5).  The loss gradient reaches g only through the *source* rows, so the update is a
  function of (P_t, U, public data, current weights): post-processing of the releases.  (A gradient
  through g(x_t) would be an un-noised function of the target records, not covered by the analysis,
  so dpgen never builds one.)
  Accounting: d = g.out_dim (320 for digits, not 784), the number of private batches actually drawn.
* ``dp_dann``: the target batch enters only ``DPDANNAlignment._private_grads``: per-sample gradients
  of the target domain loss CE(D(GRL(g(x_t))), 0) w.r.t. *all* parameters of g and D jointly (D
  directly, g through the gradient-reversal layer) are clipped to a joint L2 norm C, summed, noised
  with N(0, sigma^2 C^2) and divided by the public expected batch size qN (DP-SGD, Abadi et al.).
  Everything else (source CE, source domain loss) is public.  sigma is calibrated to
  ``accountant.epsilon`` with the RDP accountant for the planned number of private steps.
Both record every private release in the ledger, use the ledger's sampling for the sampler, stop
before the target epsilon would be exceeded (``ledger.allowance``), and draw sampling / directions /
noise from OS entropy unless ``trainer.deterministic=true``.  The non-private variants record their
target accesses with noise multiplier 0, so the run reports epsilon = inf.
"""

from __future__ import annotations

import math
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from torch import nn

from ..data import DataSplits
from ..models.da import grad_reverse
from ..ot import dp_sliced_wasserstein, random_directions, sliced_wasserstein
from ..privacy import PrivacyLedger, PrivateSampler, RDPAccountant, calibrate_dpswd
from ..privacy.dpsgd import clip_per_sample, noisy_mean, per_sample_grads
from ..privacy.rows import clip_rows, fixed_size
from ..utils import atomic_save, rng_state, set_rng_state
from .base import Method, NonFiniteLossError, TrainContext, load_resume_checkpoint, secret_seed

SOURCE_DOMAIN, TARGET_DOMAIN = 1, 0  # DANN domain labels (§2.4)


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


@dataclass
class AlignmentOutput:
    loss: torch.Tensor  # public-autograd part, added to L_c before backward
    private_grads: dict[str, torch.Tensor] | None = None  # {param name in `modules()`: grad}, added after backward
    value: float = float("nan")  # for logging


class Alignment(ABC):
    """The alignment term of one DA variant."""

    private: bool = False

    def __init__(self, weight: float = 1.0) -> None:
        self.weight = float(weight)
        self.noise_multiplier = 0.0
        self.delta_per_step = 0.0

    def setup(self, actx: AlignmentContext) -> dict:
        """Build extra networks, calibrate the noise; return what to report in the results."""
        return {}

    def modules(self) -> nn.ModuleDict:
        """Extra trainable networks (the discriminator); part of the optimiser and checkpoints."""
        return nn.ModuleDict()

    @abstractmethod
    def __call__(self, g: nn.Module, x_s: torch.Tensor, f_s: torch.Tensor, x_t: torch.Tensor) -> AlignmentOutput:
        """``x_s: (B, *input)`` public source batch, ``f_s = g(x_s): (B, d)`` (train mode, with grad);
        ``x_t: (b, *input)`` the private batch."""

    def record(self, ledger: PrivacyLedger, sample_rate: float) -> None:
        """One access to a private batch: record it (noise 0 = not private -> epsilon inf)."""
        ledger.record(self.noise_multiplier, sample_rate, 1, self.delta_per_step)


# ---------------------------------------------------------------------------------------- swd
class SWDAlignment(Alignment):
    """``weight * SW_2(g(x_s), g(x_t))`` on raw features, k fresh directions (§2.4, not private)."""

    def __init__(self, weight: float = 0.05, num_projections: int = 200, power: float = 2.0) -> None:
        super().__init__(weight)
        self.k, self.power = int(num_projections), float(power)

    def __call__(self, g, x_s, f_s, x_t):
        f_t = g(x_t)
        sw = sliced_wasserstein(f_s, f_t, k=self.k, q=self.power)
        return AlignmentOutput(self.weight * sw, value=float(sw.detach()))


# -------------------------------------------------------------------------------------- dpswd
class DPSWDAlignment(Alignment):
    """Algorithm 2: ``weight * 2R * DPSWD_sigma(r(x_s), r(x_t))`` with r = clip_{1/2}(g(.)/(2R)).

    ``feature_radius`` R: public bound used to scale feature rows (rows with ||g(x)|| > R are clipped,
    so ||r(x)|| <= 1/2 always and two rows differ by <= 1, Lemma 2's assumption).  ``None`` takes the
    extractor's public ``feature_bound`` (sqrt(d) for Sigmoid features: never clips).
    """

    private = True

    def __init__(self, weight: float = 0.05, num_projections: int = 200, power: float = 2.0, bound: str = "bernstein",
                 feature_radius: float | None = None, sensitivity_fraction: float = 0.5) -> None:
        super().__init__(weight)
        if bound not in ("bernstein", "bernstein_code", "clt", "chernoff"):
            raise ValueError(f"model.alignment.bound={bound!r} is unknown; choose bernstein, bernstein_code, clt or "
                             "chernoff")
        self.k, self.power, self.bound = int(num_projections), float(power), bound
        self.feature_radius, self.sensitivity_fraction = feature_radius, float(sensitivity_fraction)
        self.noise_std, self.radius, self.batch_size, self.d = 0.0, 1.0, 0, 0

    def setup(self, actx):
        g = actx.feature_extractor
        r = self.feature_radius if self.feature_radius is not None else getattr(g, "feature_bound", None)
        if r is None:
            raise ValueError(f"{type(g).__name__} has unbounded outputs: set model.alignment.feature_radius to a PUBLIC "
                             "bound on feature norms (rows above it are clipped), e.g. model.alignment.feature_radius=10")
        if not float(r) > 0:
            raise ValueError(f"model.alignment.feature_radius must be > 0, got {r}")
        self.radius, self.batch_size, self.d = float(r), actx.batch_size, int(g.out_dim)
        led = actx.ledger
        if led.target_epsilon is None:
            raise ValueError("the dpswd alignment needs accountant.epsilon (use the swd preset for no privacy)")
        if self.bound == "clt":
            warnings.warn("model.alignment.bound=clt is an asymptotic approximation, not a rigorous bound: the "
                          "reported (epsilon, delta) is not a DP guarantee", stacklevel=2)
        # sigma for the real feature dimension and the real number of private batches (spec §1.6, corrected)
        noise = calibrate_dpswd(led.target_epsilon, led.delta, d=self.d, k=self.k, sample_rate=actx.sample_rate,
                                steps=actx.private_steps, bound=self.bound, sampling=led.sampling, delta_split="union",
                                sensitivity_fraction=self.sensitivity_fraction,
                                partners=actx.n_private + 1 if led.sampling == "poisson" else 1)
        self.noise_std, self.noise_multiplier = noise.noise_std, noise.noise_multiplier
        self.delta_per_step = noise.delta_sensitivity_per_step
        return {"noise_std": self.noise_std, "noise_multiplier": self.noise_multiplier, "sensitivity": noise.sensitivity,
                "sensitivity_bound": self.bound, "feature_dim": self.d, "num_projections": self.k,
                "feature_radius": self.radius,
                "guarantee": "asymptotic CLT bound: NOT a rigorous DP guarantee" if self.bound == "clt" else "rigorous"}

    def rows(self, f: torch.Tensor) -> torch.Tensor:
        """Lines 10-11 with a public constant: ``clip_{1/2}(f / (2R))``, ``(n, d) -> (n, d)``."""
        return clip_rows(f / (2.0 * self.radius), 0.5)

    def _eval_features(self, g: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """g(x) in eval mode: a deterministic per-record map (no dropout; BatchNorm, if any, frozen)."""
        was = g.training
        g.eval()
        try:
            return g(x)
        finally:
            g.train(was)

    @torch.no_grad()
    def _target_rows(self, g: nn.Module, x_t: torch.Tensor) -> torch.Tensor:
        """Private batch -> exactly B rows of norm <= 1/2 (the only use of x_t; see module docstring)."""
        return fixed_size(self.rows(self._eval_features(g, x_t)), self.batch_size)

    def __call__(self, g, x_s, f_s, x_t):
        rows_t = self._target_rows(g, x_t)
        u = random_directions(self.d, self.k, device=f_s.device, dtype=f_s.dtype)  # fresh directions (§1.1)
        # the source side through the same (eval-mode) map as the target, so both sides are comparable
        rows_s = self.rows(self._eval_features(g, x_s))
        # P_t = rows_t U + Z_t is released inside; gradients flow through the source rows only (line 12)
        dpswd = dp_sliced_wasserstein(rows_s, rows_t, self.noise_std, q=self.power, directions=u)
        return AlignmentOutput(self.weight * 2.0 * self.radius * dpswd, value=float(dpswd.detach()))


# --------------------------------------------------------------------------------------- dann
class _DomainPath(nn.Module):
    """x -> D(GRL(g(x))): the path of a target sample's domain loss (g and D in one module)."""

    def __init__(self, g: nn.Module, disc: nn.Module) -> None:
        super().__init__()
        self.g, self.disc = g, disc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.disc(grad_reverse(self.g(x)))


class DANNAlignment(Alignment):
    """``weight * (CE(D(GRL(g(x_s))), 1) + CE(D(GRL(g(x_t))), 0))`` (§2.4, not private)."""

    def __init__(self, discriminator: Callable[..., nn.Module], weight: float = 0.05) -> None:
        super().__init__(weight)
        self.make_discriminator = discriminator
        self._mods = nn.ModuleDict()

    def setup(self, actx):
        self._mods["disc"] = self.make_discriminator(in_dim=actx.feature_extractor.out_dim).to(actx.device)
        return {}

    def modules(self):
        return self._mods

    def _domain_loss(self, f: torch.Tensor, label: int) -> torch.Tensor:
        logits = self._mods["disc"](grad_reverse(f))
        return F.cross_entropy(logits, torch.full((f.shape[0],), label, dtype=torch.long, device=f.device))

    def __call__(self, g, x_s, f_s, x_t):
        dom = self._domain_loss(f_s, SOURCE_DOMAIN) + self._domain_loss(g(x_t), TARGET_DOMAIN)
        return AlignmentOutput(self.weight * dom, value=float(dom.detach()))


class DPDANNAlignment(DANNAlignment):
    """DANN with DP-SGD on the target domain loss (spec §2.4, dpgen's corrected DP-DANN).

    Private part: ``weight * (sum_i clip_C(grad_{g,D} CE(D(GRL(g(x_t^i))), 0)) + N(0, sigma^2 C^2)) / (qN)``
    — joint clipping over g and D (the released code clips each tensor separately, which makes the
    real sensitivity C * sqrt(#tensors), and adds noise to each per-sample gradient).  Public part:
    ``weight * CE(D(GRL(g(x_s))), 1)`` by ordinary autograd.
    """

    private = True

    def __init__(self, discriminator: Callable[..., nn.Module], weight: float = 0.05, clip_norm: float = 1.0,
                 noise_multiplier: float | None = None) -> None:
        super().__init__(discriminator, weight)
        if not clip_norm > 0:
            raise ValueError(f"model.alignment.clip_norm must be > 0, got {clip_norm}")
        self.clip_norm = float(clip_norm)
        self.fixed_multiplier = noise_multiplier
        self.expected_batch = 1.0
        self.generator: torch.Generator | None = None  # None: the (secretly seeded) global RNG

    def setup(self, actx):
        super().setup(actx)
        self._path = _DomainPath(actx.feature_extractor, self._mods["disc"])
        led = actx.ledger
        self.expected_batch = actx.sample_rate * actx.n_private
        if self.fixed_multiplier is not None:  # e.g. the released baseline's sigma: report the epsilon it gives
            self.noise_multiplier = float(self.fixed_multiplier)
        else:
            if led.target_epsilon is None:
                raise ValueError("the dp_dann alignment needs accountant.epsilon (or model.alignment.noise_multiplier)")
            self.noise_multiplier = RDPAccountant(led.sampling).calibrate(led.target_epsilon, led.delta, actx.sample_rate,
                                                                          actx.private_steps)
        return {"noise_multiplier": self.noise_multiplier, "clip_norm": self.clip_norm,
                "noise_std_on_sum": self.noise_multiplier * self.clip_norm, "guarantee": "rigorous"}

    @staticmethod
    def _one_loss(out_fn, x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out_fn(x), torch.full((1,), TARGET_DOMAIN, dtype=torch.long, device=x.device))

    def per_sample_target_grads(self, x_t: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{name: (b, *shape)}`` per-target-sample gradients over every parameter of g and D."""
        params = {k: v.detach() for k, v in self._path.named_parameters() if v.requires_grad}
        if x_t.shape[0] == 0:
            return {k: v.new_zeros((0, *v.shape)) for k, v in params.items()}
        return per_sample_grads(self._path, self._one_loss, x_t, params=params)

    def _private_grads(self, x_t: torch.Tensor) -> dict[str, torch.Tensor]:
        grads = self.per_sample_target_grads(x_t)
        clipped, _ = clip_per_sample(grads, self.clip_norm)  # joint clip over g and D (line 6)
        noisy = noisy_mean(clipped, self.clip_norm, self.noise_multiplier, self.expected_batch, self.generator)  # line 7
        return {k: self.weight * v for k, v in noisy.items()}

    def __call__(self, g, x_s, f_s, x_t):
        dom_s = self._domain_loss(f_s, SOURCE_DOMAIN)
        return AlignmentOutput(self.weight * dom_s, private_grads=self._private_grads(x_t), value=float(dom_s.detach()))


# ------------------------------------------------------------------------------------- method
class DomainAdaptation(Method):
    """g + h trained on the public source, aligned to the private target by ``alignment``."""

    def __init__(self, feature_extractor: Callable[..., nn.Module], classifier: Callable[..., nn.Module],
                 alignment: Alignment, batch_size: int = 128, epochs: int = 100, start_align: int = 10,
                 lr: float = 5e-4, betas: tuple[float, float] = (0.5, 0.999), private: bool = True) -> None:
        if not isinstance(alignment, Alignment):
            raise TypeError(f"model.alignment must instantiate an Alignment, got {type(alignment).__name__}")
        if bool(private) != alignment.private:
            raise ValueError(f"model.private={private} but {type(alignment).__name__} is "
                             f"{'private' if alignment.private else 'not private'}; set model.private="
                             f"{str(alignment.private).lower()}")
        if not 0 <= start_align < epochs:
            raise ValueError(f"model.start_align must be in [0, model.epochs={epochs}), got {start_align}")
        self.make_g, self.make_h, self.alignment = feature_extractor, classifier, alignment
        self.batch_size, self.epochs, self.start_align = int(batch_size), int(epochs), int(start_align)
        self.lr, self.betas, self.private = float(lr), tuple(betas), bool(private)
        self.g: nn.Module | None = None
        self.h: nn.Module | None = None
        self.device = torch.device("cpu")

    def schedule(self, n_private: int) -> tuple[int, int, int]:
        """``(steps per epoch, warm-up steps, total steps)``; private batches = total - warm-up."""
        spe = math.ceil(n_private / self.batch_size)
        return spe, self.start_align * spe, self.epochs * spe

    def fit(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
        if data.public is None or not len(data.public):
            raise ValueError("domain adaptation needs a labelled source domain in data.public: use a DA dataset "
                             "(dataset=mnist_usps, usps_mnist, office31, visda or digits_shift)")
        self.device = ctx.device
        self.num_classes = data.num_classes
        in_shape = tuple(getattr(data, "input_shape", ()) or data.public.x.shape[1:])
        self.g = self.make_g(in_shape=in_shape).to(ctx.device)
        self.h = self.make_h(in_dim=self.g.out_dim, num_classes=data.num_classes).to(ctx.device)
        n_priv, n_src = len(data.private), len(data.public)
        if self.batch_size > n_src:
            raise ValueError(f"model.batch_size={self.batch_size} exceeds the {n_src} source records; lower it")
        sampler_seed = secret_seed(ctx)  # secret sampling, directions and noise (module docstring)
        sampler = PrivateSampler(data.private, self.batch_size, ledger.sampling, seed=sampler_seed)
        spe, warm, end_planned = self.schedule(n_priv)
        private_steps = end_planned - warm
        report = self.alignment.setup(AlignmentContext(self.g, n_priv, sampler.sample_rate, private_steps,
                                                       self.batch_size, ledger, ctx.device))
        extra = self.alignment.modules()
        params = [*self.g.parameters(), *self.h.parameters(), *extra.parameters()]
        opt = torch.optim.Adam(params, lr=self.lr, betas=self.betas)
        pub_gen = torch.Generator().manual_seed(ctx.seed + 2)  # source batches: public randomness
        signature = {"n_private": n_priv, "n_source": n_src, "dataset": data.name, "batch_size": self.batch_size,
                     "epochs": self.epochs, "start_align": self.start_align, "alignment": type(self.alignment).__name__,
                     "sampling": ledger.sampling}
        start = 0
        if ctx.resume_from is not None:
            ck = load_resume_checkpoint(ctx.resume_from, signature)
            self.g.load_state_dict(ck["g"])
            self.h.load_state_dict(ck["h"])
            extra.load_state_dict(ck["alignment_modules"])
            opt.load_state_dict(ck["optimizer"])
            sampler.load_state_dict(ck["sampler"])
            ledger.load_state_dict(ck["ledger"])
            pub_gen.set_state(ck["public_generator"])
            set_rng_state(ck["rng"])
            start = int(ck["step"])
        end = end_planned if ctx.max_steps is None else min(end_planned, ctx.max_steps)

        def save(step: int) -> None:
            atomic_save({"step": step, "signature": signature, "g": self.g.state_dict(), "h": self.h.state_dict(),
                         "alignment_modules": extra.state_dict(), "optimizer": opt.state_dict(),
                         "sampler": sampler.state_dict(), "ledger": ledger.state_dict(), "rng": rng_state(),
                         "public_generator": pub_gen.get_state(), "report": report}, ctx.checkpoint_path)

        q = sampler.sample_rate
        allowance = ledger.allowance(self.alignment.noise_multiplier, q, self.alignment.delta_per_step) \
            if self.private else None
        used_since, stopped_by_budget = 0, False
        # private gradients are keyed by the names of the g+D module of the alignment (DP-DANN)
        path_params = dict(getattr(self.alignment, "_path", nn.Module()).named_parameters())
        t0, step = time.time(), start
        last = {"loss_cls": float("nan"), "align": float("nan")}
        progress = Progress(TextColumn(f"[bold]DA/{type(self.alignment).__name__}[/] {{task.completed}}/{{task.total}}"),
                            BarColumn(), TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                            disable=not ctx.progress, transient=False)
        with progress:
            task = progress.add_task("train", total=end, completed=start, info="")
            for step in range(start, end):
                align_now = step >= warm
                if align_now and self.private and used_since >= allowance:
                    stopped_by_budget = True
                    break
                self.g.train()
                self.h.train()
                idx = torch.randint(n_src, (self.batch_size,), generator=pub_gen)
                x_s, y_s = data.public.x[idx].to(ctx.device), data.public.y[idx].to(ctx.device)
                f_s = self.g(x_s)
                loss_c = F.cross_entropy(self.h(f_s), y_s)  # line 7
                loss, out = loss_c, None
                if align_now:
                    x_t, _ = sampler.sample()  # labels are -1: the target is unlabelled
                    out = self.alignment(self.g, x_s, f_s, x_t.to(ctx.device))
                    self.alignment.record(ledger, q)  # the release of this step
                    used_since += 1
                    loss = loss_c + out.loss
                if not torch.isfinite(loss):
                    raise NonFiniteLossError(step)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if out is not None and out.private_grads is not None:
                    for k, gr in out.private_grads.items():
                        p = path_params[k]
                        p.grad = gr.to(p.dtype) if p.grad is None else p.grad + gr.to(p.dtype)
                opt.step()
                last = {"loss_cls": float(loss_c.detach()), "align": out.value if out is not None else float("nan")}
                done = step + 1
                if done % ctx.log_every == 0 or done == end:
                    eps = ledger.epsilon(accountant="rdp")
                    ctx.logger.log_metrics({**last, "epsilon_rdp": eps, "aligning": int(align_now),
                                            "steps_per_s": (done - start) / max(time.time() - t0, 1e-9)}, step=done)
                    progress.update(task, info=f"L_c {last['loss_cls']:.3f}  align {last['align']:.4f}  eps {eps:.3g}")
                if done % ctx.checkpoint_every == 0:
                    save(done)
                progress.update(task, completed=done)
            else:
                step = end
        final_step = step if stopped_by_budget else end
        save(final_step)
        atomic_save({"g": self.g.state_dict(), "h": self.h.state_dict(), "signature": signature},
                    ctx.run_dir / "da_model.pt")
        return {"train_steps": final_step, "steps_planned": end_planned, "warmup_steps": warm,
                "steps_per_epoch": spe, "private_steps_planned": private_steps, "stopped_by_budget": stopped_by_budget,
                "train_time_s": time.time() - t0, "train_loss_cls": last["loss_cls"], "train_align": last["align"],
                "alignment": type(self.alignment).__name__, "private": self.private, **report}

    @torch.no_grad()
    def predict(self, x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
        """Class predictions ``(n,)`` for inputs ``x: (n, *input_shape)`` (eval mode, on cpu)."""
        if self.g is None or self.h is None:
            raise RuntimeError("call fit() before predict()")
        self.g.eval()
        self.h.eval()
        out = [self.h(self.g(x[i:i + batch_size].to(self.device))).argmax(1).cpu() for i in range(0, len(x), batch_size)]
        self.g.train()
        self.h.train()
        return torch.cat(out) if out else torch.empty(0, dtype=torch.long)
