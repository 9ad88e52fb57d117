"""DP-Sinkhorn (Cao et al., NeurIPS 2021; spec dpsinkhorn.md): a generator trained with the
semi-debiased Sinkhorn loss, made private by sanitising the gradient w.r.t. the generated images.

Privacy boundary: private images are read only in ``_step`` through the PrivateSampler (Poisson
sampling at rate q = B/N, the accountant's assumption).  They enter the loss only through the
term 2·W(X[0:n], Y); the only quantity that depends on them and leaves the loss is the gradient
of the loss w.r.t. the first n generated images (the "cross" group), which a backward hook on the
generator output replaces by its sanitised version before it reaches the generator:

    G̃ = clip(G) + N(0, (2Cσ)² I)                                      (spec §2.1)

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

Loss (spec §1): features ``[x ‖ 15·onehot(y)]`` with images in [−1, 1]; cost ‖x−y‖² + m‖x−y‖₁;
entropic OT with λ = ``reg`` via GeomLoss (:mod:`dpgen.ot.sinkhorn`); semi-debiased estimator
2·W(X[0:n], Y) − W(X[0:n], X[n':n+n']), n' = floor(p·n).  The generated batch size n is fixed
(= the expected private batch size B); the reference code uses the drawn size instead, which does
not change privacy.

Schedule: σ fixed (``noise_multiplier``) and training runs until the next step would exceed the
target ε (``ledger.allowance``) or ``steps`` (if set), whichever comes first.  With
``noise_multiplier: null`` σ is calibrated so that exactly ``steps`` steps spend the target ε
(used for shortened CPU schedules at the paper's (ε, δ)).

Randomness: sampling and noise are seeded from the OS entropy pool unless
``trainer.deterministic=true``; ``checkpoints/last.pt`` holds the RNG states (sensitive),
``generator.pt`` (weights only) is the artefact to publish.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..data import DataSplits
from ..ot.sinkhorn import COSTS, DEBIAS, EntropicOT, embed, extra_rows, sinkhorn_generator_loss
from ..privacy import PrivacyLedger, PrivateSampler, RDPAccountant
from ..privacy.image_gradient import (
    CLIP_MODES,
    clip_whole,
    effective_noise_multiplier,
    sanitize,
    sensitivity,
)
from ..utils import atomic_save, rng_state, set_rng_state
from .base import (
    GenerativeMethod,
    NonFiniteLossError,
    TrainContext,
    load_resume_checkpoint,
    secret_seed,
)


class DPSinkhorn(GenerativeMethod):
    """Generator trained with the (semi-debiased) Sinkhorn loss; private through the image gradient."""

    def __init__(self, generator: Callable[..., torch.nn.Module], batch_size: int = 50, steps: int | None = None,
                 lr: float = 1e-5, weight_decay: float = 1e-5, betas: tuple[float, float] = (0.9, 0.999),
                 cost: str = "l1+l2", m: float = 1.0, reg: float = 0.05, scaling: float = 0.9,
                 debias: str = "semi", debias_ratio: float = 0.4, embed_multiplier: float = 15.0,
                 clip_norm: float = 0.5, noise_multiplier: float | None = 1.1, clip: str = "whole",
                 private: bool = True) -> None:
        if cost not in COSTS:
            raise ValueError(f"model.cost={cost!r} is unknown; choose one of {COSTS}")
        if debias not in DEBIAS:
            raise ValueError(f"model.debias={debias!r} is unknown; choose one of {DEBIAS}")
        if clip not in CLIP_MODES:
            raise ValueError(f"model.clip={clip!r} is unknown; choose one of {CLIP_MODES}")
        if clip_norm <= 0:
            raise ValueError(f"model.clip_norm (C) must be > 0, got {clip_norm}")
        if noise_multiplier is not None and noise_multiplier <= 0 and private:
            raise ValueError(f"model.noise_multiplier must be > 0 for a private run, got {noise_multiplier} "
                             "(use model.private=false, e.g. experiment=mnist_sinkhorn, for a non-private run)")
        if steps is not None and int(steps) < 1:
            raise ValueError(f"model.steps must be >= 1 or null (until the target epsilon), got {steps}")
        extra_rows(1, debias_ratio)  # validates p
        self.make_generator = generator
        self.batch_size, self.steps = int(batch_size), None if steps is None else int(steps)
        self.lr, self.weight_decay, self.betas = float(lr), float(weight_decay), tuple(betas)
        self.ot = EntropicOT(reg=reg, cost=cost, m=m, scaling=scaling)
        self.debias, self.ratio, self.embed_multiplier = debias, float(debias_ratio), float(embed_multiplier)
        self.clip_norm, self.sigma, self.clip, self.private = float(clip_norm), noise_multiplier, clip, bool(private)
        self.G: torch.nn.Module | None = None
        self.device = torch.device("cpu")
        self.num_classes = 0

    # ------------------------------------------------------------------------------------
    def _schedule(self, ledger: PrivacyLedger, q: float) -> tuple[float, float]:
        """(σ, noise multiplier recorded in the ledger); σ calibrated when ``noise_multiplier`` is null."""
        n = self.batch_size
        if not self.private:
            return 0.0, 0.0
        if ledger.target_epsilon is None and self.steps is None:
            raise ValueError("a private DP-Sinkhorn run needs accountant.epsilon (train until it is spent) or "
                             "model.steps")
        if self.sigma is None:
            if self.steps is None or ledger.target_epsilon is None:
                raise ValueError("model.noise_multiplier=null calibrates sigma to spend accountant.epsilon in exactly "
                                 "model.steps steps: set both")
            mult = RDPAccountant(ledger.sampling).calibrate(ledger.target_epsilon, ledger.delta, q, self.steps)
            sigma = mult / effective_noise_multiplier(1.0, n, self.clip)
        else:
            sigma = float(self.sigma)
        return sigma, effective_noise_multiplier(sigma, n, self.clip)

    def _allowance(self, ledger: PrivacyLedger, mult: float, q: float, start: int) -> int:
        """Steps that keep RDP epsilon <= target: the planned rest if it fits (one accountant call),
        else the ledger's search."""
        if not self.private or ledger.target_epsilon is None:
            return 2**62
        if self.steps is not None and self.steps > start:
            trial = PrivacyLedger.from_state_dict(ledger.state_dict())
            trial.record(mult, q, self.steps - start)
            eps = trial.epsilon(accountant="rdp")
            if eps is not None and eps <= ledger.target_epsilon:
                return self.steps - start
        return ledger.allowance(mult, q)

    def fit(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
        self.device, self.num_classes = ctx.device, data.num_classes
        self.G = self.make_generator(image_shape=data.image_shape, n_labels=data.num_classes).to(ctx.device)
        sampler_seed = secret_seed(ctx)  # secret sampling, directions and noise (module docstring)
        sampler = PrivateSampler(data.private, self.batch_size, ledger.sampling, seed=sampler_seed)
        q = sampler.sample_rate
        sigma, mult = self._schedule(ledger, q)
        self._sigma_used = sigma
        lo, hi = data.value_range
        self._to_pm1 = lambda x: (x - lo) / (hi - lo) * 2.0 - 1.0  # data range -> [-1, 1] (public constants)
        signature = {"n_private": len(data.private), "dataset": data.name, "batch_size": self.batch_size,
                     "steps": self.steps, "sigma": sigma, "clip": self.clip, "clip_norm": self.clip_norm,
                     "cost": self.ot.cost, "m": self.ot.m, "reg": self.ot.reg, "debias": self.debias,
                     "ratio": self.ratio, "sampling": ledger.sampling, "private": self.private}
        opt = torch.optim.Adam(self.G.parameters(), lr=self.lr, betas=self.betas, weight_decay=self.weight_decay)
        start = 0
        if ctx.resume_from is not None:
            ck = load_resume_checkpoint(ctx.resume_from, signature)
            self.G.load_state_dict(ck["generator"])
            opt.load_state_dict(ck["optimizer"])
            sampler.load_state_dict(ck["sampler"])
            ledger.load_state_dict(ck["ledger"])
            set_rng_state(ck["rng"])
            start = int(ck["step"])

        allowance = self._allowance(ledger, mult, q, start)
        if not self.private and self.steps is None:
            raise ValueError("a non-private run (model.private=false) needs model.steps")
        budget_end = start + allowance  # the last step that keeps RDP epsilon <= target
        end = budget_end if self.steps is None else min(self.steps, budget_end)
        if ctx.max_steps is not None:
            end = min(end, int(ctx.max_steps))
        stopped_by_budget = self.private and end == budget_end and (self.steps is None or budget_end < self.steps)

        def save(step: int) -> None:
            atomic_save({"step": step, "signature": signature, "generator": self.G.state_dict(),
                         "optimizer": opt.state_dict(), "sampler": sampler.state_dict(), "ledger": ledger.state_dict(),
                         "rng": rng_state()}, ctx.checkpoint_path)

        t0, loss_val, done = time.time(), float("nan"), start
        self.G.train()
        progress = Progress(TextColumn("[bold]DP-Sinkhorn[/] {task.completed}/{task.total}"), BarColumn(),
                            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                            disable=not ctx.progress, transient=False)
        with progress:
            task = progress.add_task("train", total=end, completed=start, info="")
            for step in range(start, end):
                loss_val, grad_norm = self._step(sampler, opt, sigma, step)
                # the sanitised gradient of this step was released (non-private: an un-noised access, eps = inf)
                ledger.record(mult if self.private else 0.0, q, 1)
                done = step + 1
                if done % ctx.log_every == 0 or done == end:
                    eps = ledger.epsilon(accountant="rdp")
                    # the loss value 2 W(X, Y) - ... is an un-noised function of the private batch: it is
                    # logged for non-private runs only; private runs log the released gradient's norm
                    row = {"epsilon_rdp": eps, "released_grad_norm": grad_norm,
                           "steps_per_s": (done - start) / max(time.time() - t0, 1e-9)}
                    if not self.private:
                        row = {"loss": loss_val, **row}
                    ctx.logger.log_metrics(row, step=done)
                    progress.update(task, info=(f"loss {loss_val:.4f}" if not self.private else
                                                f"|released grad| {grad_norm:.3f}") + f"  eps(RDP) {eps:.3f}")
                if done % ctx.checkpoint_every == 0:
                    save(done)
                progress.update(task, completed=done)
        save(done)
        atomic_save({"generator": self.G.state_dict(), "signature": signature}, ctx.run_dir / "generator.pt")
        return {"train_steps": done, "train_loss": None if self.private else loss_val, "stopped_by_budget": bool(stopped_by_budget and done == end),
                "steps_planned": self.steps, "train_time_s": time.time() - t0, "noise_multiplier": sigma,
                "noise_multiplier_accounted": mult, "noise_std": 2 * self.clip_norm * sigma, "clip": self.clip,
                "clip_norm": self.clip_norm, "sensitivity": sensitivity(self.clip_norm, self.batch_size, self.clip),
                "sigma_calibrated": self.private and self.sigma is None, "cost": self.ot.cost, "m": self.ot.m,
                "reg": self.ot.reg, "debias": self.debias, "debias_ratio": self.ratio,
                "guarantee": "rigorous" if self.private else "none (non-private)"}

    # ------------------------------------------------------------------------------------
    def _step(self, sampler: PrivateSampler, opt: torch.optim.Optimizer, sigma: float, step: int) -> tuple[float, float]:
        """One generator update (Alg. 1); returns (loss, ‖G‖ of the cross group before clipping)."""
        n, k, dev = self.batch_size, self.num_classes, self.device
        n_extra = extra_rows(n, self.ratio) if self.debias == "semi" else 0
        y_g = torch.randint(max(k, 1), (n,), device=dev)
        y_all = torch.cat([y_g, y_g[:n_extra]])  # the n' extra samples reuse the first n' labels, fresh z
        x_all = self.G(self.G.latent(n + n_extra, device=dev), y_all)
        x_cross, x_debias = x_all[:n], x_all[n:]
        raw_norm = {}

        def cross_hook(g: torch.Tensor) -> torch.Tensor:  # the private release (spec §2.1)
            out = sanitize(g, self.clip_norm, sigma, self.clip) if self.private else g
            # only the norm of the *released* (sanitised) gradient may be logged: the raw norm is an
            # un-noised function of the private batch
            raw_norm["v"] = float(out.norm())
            return out

        x_cross.register_hook(cross_hook)
        if n_extra and self.private:
            x_debias.register_hook(lambda g: clip_whole(g, self.clip_norm))  # no data dependence: clip, no noise
        x_t, y_t = sampler.sample()  # private batch (Poisson)
        rows_real = embed(self._to_pm1(x_t.to(dev)), y_t.to(dev), k, self.embed_multiplier)
        rows_gen = embed(torch.cat([x_cross, x_debias]), y_all, k, self.embed_multiplier)
        if rows_real.shape[0] > 0:
            loss = sinkhorn_generator_loss(self.ot, rows_gen, rows_real, n, self.debias, self.ratio)
        elif n_extra:  # empty draw: the cross term is 0 (module docstring)
            loss = -self.ot(rows_gen[:n], rows_gen[n_extra:n + n_extra])
        else:
            loss = (rows_gen[:n] * 0.0).sum()
        if not torch.isfinite(loss):
            raise NonFiniteLossError(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach()), raw_norm.get("v", 0.0)

    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        """``n`` images ``(n, C, H, W)`` in [0, 1] (generator output (x+1)/2), BN in eval mode."""
        if self.G is None:
            raise RuntimeError("call fit() before sample()")
        self.G.eval()
        if labels is None:
            labels = torch.arange(n) % max(self.num_classes, 1)
        xs = []
        for i in range(0, n, batch_size):
            y = labels[i:i + batch_size].to(self.device)
            xs.append(((self.G(self.G.latent(y.shape[0], device=self.device), y) + 1) / 2).clamp(0, 1).cpu())
        self.G.train()
        return torch.cat(xs), labels.cpu()


def planned_steps(epsilon: float, delta: float, sigma: float, sample_rate: float, sampling: str = "poisson") -> int:
    """Steps until the RDP ε of a σ-Gaussian at rate q first exceeds ``epsilon`` minus one (planning helper)."""
    ledger = PrivacyLedger(epsilon, delta, sampling)
    return ledger.allowance(sigma, sample_rate)

