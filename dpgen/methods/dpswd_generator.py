"""DP-SWD generator (Rakotomamonjy & Ralaivola, ICML 2021, §5.2; spec dpswd.md §3).

Privacy boundary: private images are touched only in ``_private_release``: a batch drawn by the
PrivateSampler is normalised by public constants, clipped to row norm <= 1/2 (so neighbouring
rows differ by <= 1, the assumption of Lemma 2), projected on k fresh unit directions and
released with Gaussian noise of the calibrated std (Algorithm 1).  Everything after that — the
sorted 1-D transport against generated samples, the generator's gradient — is post-processing.

Algorithm (one step, T = epochs * ceil(N / B) steps in all):
  1. private batch X_t ~ sampler (Poisson rate q = B/N, or B without replacement)
  2. rows r(x, y) = [ (x - c) / (2R) || lambda * onehot(y) ]  clipped to norm 1/2   (§1.5)
  3. U: k directions uniform on S^{D-1}                                               (§1.1)
  4. P_t = r(X_t) U + Z_t,  Z_t ~ N(0, sigma^2)       <- the only private release     (Alg. 1)
  5. P_s = r(G(z, y_g)) U + Z_s                                                        (Alg. 1)
  6. loss = SW_2(P_s, P_t) from sorted columns; Adam step on G                        (§1.2)

Class labels (the paper does not say how; ``label_mode``):
  * ``concat`` (default): a one-hot of the label scaled by ``label_weight`` is appended to the
    normalised image, as DP-Sinkhorn conditions its cost; generated rows carry the label they were
    generated for, so transport prefers same-class pairs and the conditional generator learns
    p(x | y).  The accounting uses the actual row dimension D = d + n_classes and the whole row
    (image and label part) is clipped, so the sensitivity assumption covers the labels.
  * ``none``: images only (d = 784 as in Table 4); the generator's label input is then ignored
    by the loss and downstream classifiers see meaningless labels.

Feature space (CelebA, spec §3.2): with ``feature_map`` set, rows are built from f(x) instead of
x, where f is the DSW discriminator trunk trained as a real/fake classifier on the *public* split
only (never on private images), and evaluated in eval mode (BatchNorm running statistics), so
that f is a fixed per-record function when it meets private images.

Poisson sampling releases a fixed number B of rows so the batch size itself is never released:
a Poisson batch larger than B keeps a uniform random subset of B rows, a smaller one is padded
with the public centre row (zero after normalisation).  Under add/remove of one record x the
released rows then differ in at most one row (a coupling argument), which is the assumption of
the subsampled-Gaussian accountants.  When the batch was cut down, x replaces a *random* kept
record y, so the sensitivity bound must hold for x - y for every possible partner y: the bound is
taken at beta / (N + 1) (``partners`` in ``privacy.dpswd``).  Without replacement the batch is B
rows by construction and the differing pair is fixed (``partners = 1``).

Randomness: the sampler, the directions and the noise must be secret for the guarantee to hold.
Unless ``trainer.deterministic=true`` (debugging and tests only), they are seeded from the OS
entropy pool, not from ``seed`` (which is logged).  ``checkpoints/last.pt`` holds the RNG states
needed to resume and is therefore as sensitive as the data; ``generator.pt`` (weights only) is the
artefact to publish.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..data import DataSplits
from ..ot import dp_sliced_wasserstein, random_directions
from ..privacy import PrivacyLedger, PrivateSampler, calibrate_dpswd
from ..utils import atomic_save, rng_state, set_rng_state
from .base import (
    GenerativeMethod,
    NonFiniteLossError,
    TrainContext,
    load_resume_checkpoint,
    secret_seed,
)


class RowMap:
    """Public, data-independent map from (image, label) to a row of norm <= 1/2.

    ``r(x, y) = clip_{1/2}( [ (x - center) / (2 * radius) || label_weight * onehot(y) ] )``.
    ``radius`` defaults to the largest possible ``||x - center||`` for images in ``value_range``,
    so in-range images are never clipped; a smaller public radius clips (and keeps the bound).
    """

    def __init__(self, dim: int, n_classes: int, value_range: tuple[float, float], center: float | None,
                 radius: float | None, label_mode: str, label_weight: float) -> None:
        if label_mode not in ("concat", "none"):
            raise ValueError(f"model.label_mode must be 'concat' or 'none', got {label_mode!r}")
        lo, hi = value_range
        self.center = (lo + hi) / 2.0 if center is None else float(center)
        worst = max(abs(lo - self.center), abs(hi - self.center)) * math.sqrt(dim)
        self.radius = worst if radius is None else float(radius)
        if self.radius <= 0:
            raise ValueError(f"model.radius must be > 0, got {radius}")
        self.label_mode, self.n_classes = label_mode, n_classes
        self.label_weight = float(label_weight)
        self.out_dim = dim + (n_classes if label_mode == "concat" else 0)

    def __call__(self, x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        """``x: (n, C, H, W)``, ``y: (n,)`` -> rows ``(n, D)`` with norm <= 1/2."""
        r = (x.flatten(1) - self.center) / (2.0 * self.radius)
        if self.label_mode == "concat":
            # the label part is scaled so that an in-range image plus label stays within norm 1/2
            lab = F.one_hot(y, self.n_classes).to(r.dtype) * (0.5 * self.label_weight)
            r = torch.cat([r, lab], dim=1) / math.sqrt(1.0 + self.label_weight**2)
        return clip_rows(r, 0.5)


def clip_rows(r: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale each row to norm <= max_norm (rows already inside are unchanged)."""
    norms = r.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return r * (max_norm / norms).clamp(max=1.0)


def fixed_size(rows: torch.Tensor, size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Exactly ``size`` rows: a uniform random subset if there are more, zero rows appended if fewer."""
    n = rows.shape[0]
    if n > size:
        return rows[torch.randperm(n, generator=generator)[:size].to(rows.device)]
    if n < size:
        return torch.cat([rows, rows.new_zeros(size - n, rows.shape[1])], dim=0)
    return rows


class DPSWDGenerator(GenerativeMethod):
    """Generator trained with the DP-SWD loss against private samples."""

    def __init__(self, generator: Callable[..., torch.nn.Module], num_projections: int = 1000, power: float = 2.0,
                 bound: str = "bernstein", batch_size: int = 100, epochs: int = 100, lr: float = 1e-4,
                 betas: tuple[float, float] = (0.9, 0.999), label_mode: str = "concat", label_weight: float = 1.0,
                 center: float | None = None, radius: float | None = None, private: bool = True,
                 sensitivity_fraction: float = 0.5, feature_map: Callable[..., torch.nn.Module] | None = None,
                 feature_lr: float = 5e-4) -> None:
        self.make_generator = generator
        self.k, self.power, self.bound = int(num_projections), float(power), bound
        self.batch_size, self.epochs, self.lr, self.betas = int(batch_size), int(epochs), float(lr), tuple(betas)
        self.label_mode, self.label_weight = label_mode, float(label_weight)
        self.center, self.radius, self.private = center, radius, bool(private)
        self.sensitivity_fraction = float(sensitivity_fraction)
        if not 0.0 < self.sensitivity_fraction < 1.0:
            raise ValueError(f"model.sensitivity_fraction must be in (0, 1), got {sensitivity_fraction}")
        if bound not in ("bernstein", "bernstein_code", "clt", "chernoff"):
            raise ValueError(f"model.bound={bound!r} is unknown; choose bernstein, bernstein_code, clt or chernoff")
        self.make_feature_map, self.feature_lr = feature_map, float(feature_lr)
        self.fmap: torch.nn.Module | None = None
        self.G: torch.nn.Module | None = None
        self.noise = None
        self.device = torch.device("cpu")

    # ------------------------------------------------------------------------------------
    def steps_planned(self, n_private: int) -> int:
        """Number of private batches the schedule draws: ``epochs * ceil(N / B)``."""
        return self.epochs * math.ceil(n_private / self.batch_size)

    def fit(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
        self.device = ctx.device
        self.num_classes = data.num_classes
        self.G = self.make_generator(image_shape=data.image_shape, n_labels=data.num_classes
                                     if self.label_mode == "concat" else 0).to(ctx.device)
        if self.label_mode == "concat" and not getattr(self.G, "conditional", False):
            raise ValueError(f"model.label_mode=concat needs a conditional generator, but {type(self.G).__name__} "
                             "ignores labels; set model.label_mode=none")
        if self.make_feature_map is not None:
            if data.public is None:
                raise ValueError("model.feature_map is trained on public images only: set dataset.public_fraction > 0 "
                                 "(e.g. dataset.public_fraction=0.1)")
            c, h, _ = data.image_shape
            self.fmap = self.make_feature_map(in_channels=c, image_size=h).to(ctx.device)
            rowmap = RowMap(self.fmap.out_dim, data.num_classes, (-1.0, 1.0), 0.0, self.radius, self.label_mode,
                            self.label_weight)  # tanh features lie in [-1, 1]
        else:
            rowmap = RowMap(data.dim, data.num_classes, data.value_range, self.center, self.radius, self.label_mode,
                            self.label_weight)
        self._rowmap = rowmap
        n_priv = len(data.private)
        sampler_seed = secret_seed(ctx)  # secret sampling, directions and noise (module docstring)
        sampler = PrivateSampler(data.private, self.batch_size, ledger.sampling, seed=sampler_seed)
        steps = self.steps_planned(n_priv)
        signature = {"n_private": n_priv, "n_public": 0 if data.public is None else len(data.public),
                     "dataset": data.name, "batch_size": self.batch_size, "epochs": self.epochs, "k": self.k,
                     "bound": self.bound, "label_mode": self.label_mode, "sampling": ledger.sampling}

        # sigma from accountant.epsilon before training (spec §1.6; union-bound delta split)
        if self.private and self.bound == "clt":
            warnings.warn("model.bound=clt is an asymptotic approximation, not a rigorous bound: the reported "
                          "(epsilon, delta) is not a DP guarantee (use bernstein or chernoff for one)", stacklevel=2)
        if self.private:
            if ledger.target_epsilon is None:
                raise ValueError("model.private=true needs accountant.epsilon (use a non-private preset such as "
                                 "mnist_swd for sigma = 0)")
            self.noise = calibrate_dpswd(ledger.target_epsilon, ledger.delta, d=rowmap.out_dim, k=self.k,
                                         sample_rate=sampler.sample_rate, steps=steps, bound=self.bound,
                                         sampling=ledger.sampling, delta_split="union",
                                         sensitivity_fraction=self.sensitivity_fraction,
                                         partners=n_priv + 1 if ledger.sampling == "poisson" else 1)
            sigma, mult, beta = self.noise.noise_std, self.noise.noise_multiplier, self.noise.delta_sensitivity_per_step
        else:
            sigma, mult, beta = 0.0, 0.0, 0.0

        opt = torch.optim.Adam(self.G.parameters(), lr=self.lr, betas=self.betas)
        opt_f = torch.optim.Adam(self.fmap.parameters(), lr=self.feature_lr, betas=(0.5, 0.999)) if self.fmap is not None else None
        pub_gen = torch.Generator().manual_seed(ctx.seed + 2)
        start = 0
        if ctx.resume_from is not None:
            ck = load_resume_checkpoint(ctx.resume_from, signature)
            self.G.load_state_dict(ck["generator"])
            opt.load_state_dict(ck["optimizer"])
            if self.fmap is not None:
                self.fmap.load_state_dict(ck["feature_map"])
                opt_f.load_state_dict(ck["feature_optimizer"])
                pub_gen.set_state(ck["public_generator"])
            sampler.load_state_dict(ck["sampler"])
            ledger.load_state_dict(ck["ledger"])
            set_rng_state(ck["rng"])
            start = int(ck["step"])
        end = steps if ctx.max_steps is None else min(steps, ctx.max_steps)

        def save(step: int) -> None:
            atomic_save({"step": step, "signature": signature, "generator": self.G.state_dict(), "optimizer": opt.state_dict(),
                         "sampler": sampler.state_dict(), "ledger": ledger.state_dict(), "rng": rng_state(),
                         "noise": None if self.noise is None else self.noise.asdict(),
                         **({"feature_map": self.fmap.state_dict(), "feature_optimizer": opt_f.state_dict(),
                             "public_generator": pub_gen.get_state()} if self.fmap is not None else {})},
                        ctx.checkpoint_path)

        stopped_by_budget = False
        allowance = ledger.allowance(mult, sampler.sample_rate, beta) if self.private else None
        used_since = 0
        t0, loss_val, step = time.time(), float("nan"), start
        self.G.train()
        progress = Progress(TextColumn("[bold]DP-SWD[/] {task.completed}/{task.total}"), BarColumn(),
                            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                            disable=not ctx.progress, transient=False)
        with progress:
            task = progress.add_task("train", total=end, completed=start, info="")
            for step in range(start, end):
                if self.private and used_since >= allowance:
                    stopped_by_budget = True
                    break
                if self.fmap is not None:
                    self._feature_step(data, opt_f, pub_gen)
                p_t_rows = self._private_rows(sampler)
                b = p_t_rows.shape[0]
                y_g = torch.randint(data.num_classes, (b,), device=ctx.device)
                x_g = self.G(torch.randn(b, self.G.d_code, device=ctx.device), y_g)
                loss = dp_sliced_wasserstein(self._rows(x_g, y_g), p_t_rows, sigma, k=self.k, q=self.power,
                                             directions=random_directions(rowmap.out_dim, self.k, device=ctx.device))
                # the release of step 4 happened inside dp_sliced_wasserstein: record it now
                ledger.record(mult, sampler.sample_rate, 1, beta)
                used_since += 1
                if not torch.isfinite(loss):
                    raise NonFiniteLossError(step)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                loss_val = float(loss.detach())
                done = step + 1
                if done % ctx.log_every == 0 or done == end:
                    eps = ledger.epsilon(accountant="rdp")
                    ctx.logger.log_metrics({"loss": loss_val, "epsilon_rdp": eps, "steps_per_s":
                                            (done - start) / max(time.time() - t0, 1e-9)}, step=done)
                    progress.update(task, info=f"loss {loss_val:.4f}  eps(RDP) {eps:.3f}")
                if done % ctx.checkpoint_every == 0:
                    save(done)
                progress.update(task, completed=done)
            else:
                step = end
        final_step = step if stopped_by_budget else end
        save(final_step)
        atomic_save({"generator": self.G.state_dict(), "signature": signature}, ctx.run_dir / "generator.pt")
        return {"train_steps": final_step, "train_loss": loss_val, "stopped_by_budget": stopped_by_budget,
                "steps_planned": steps, "train_time_s": time.time() - t0,
                "noise_std": sigma, "noise_multiplier": mult, "sensitivity": None if self.noise is None else
                self.noise.sensitivity, "sensitivity_bound": self.bound if self.private else None,
                "guarantee": ("none (non-private)" if not self.private else
                              "asymptotic CLT bound: NOT a rigorous DP guarantee" if self.bound == "clt" else
                              "rigorous"), "row_dim": rowmap.out_dim, "num_projections": self.k}

    def _rows(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Rows of norm <= 1/2: ``rowmap(x)`` or ``rowmap(f(x))`` with f in eval mode (a per-record map)."""
        if self.fmap is None:
            return self._rowmap(x, y)
        self.fmap.eval()
        return self._rowmap(self.fmap.features(x), y)

    def _private_rows(self, sampler: PrivateSampler) -> torch.Tensor:
        """Private batch -> B normalised, clipped rows on the device (never leaves this method
        except through the noisy projection)."""
        x_t, y_t = sampler.sample()
        with torch.no_grad():
            rows = self._rows(x_t.to(self.device), y_t.to(self.device))
        return fixed_size(rows, self.batch_size)

    def _feature_step(self, data: DataSplits, opt_f: torch.optim.Optimizer, pub_gen: torch.Generator) -> None:
        """One real/fake BCE step of the feature map on PUBLIC images vs generated ones (spec §3.2)."""
        n = min(self.batch_size, len(data.public))
        idx = torch.randint(len(data.public), (n,), generator=pub_gen)
        real = data.public.x[idx].to(self.device)
        with torch.no_grad():
            y = torch.randint(max(self.num_classes, 1), (n,), device=self.device)
            fake = self.G(torch.randn(n, self.G.d_code, device=self.device), y)
        self.fmap.train()
        logits = self.fmap.logits(torch.cat([real, fake]))
        target = torch.cat([torch.ones(n), torch.zeros(n)]).to(self.device)
        loss = F.binary_cross_entropy_with_logits(logits, target)
        opt_f.zero_grad(set_to_none=True)
        loss.backward()
        opt_f.step()

    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        if self.G is None:
            raise RuntimeError("call fit() before sample()")
        self.G.eval()
        if labels is None:
            labels = torch.arange(n) % self.num_classes
        xs = []
        for i in range(0, n, batch_size):
            y = labels[i:i + batch_size].to(self.device)
            z = torch.randn(y.shape[0], self.G.d_code, device=self.device)
            xs.append(self.G(z, y).cpu())
        self.G.train()
        return torch.cat(xs), labels.cpu()
