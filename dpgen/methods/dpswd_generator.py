"""DP-SWD generator (Rakotomamonjy & Ralaivola, ICML 2021, §5.2; DP-SWD paper, generative experiments).

Privacy boundary: private images are touched only in ``step`` (``_private_rows``): a batch drawn by the
PrivateSampler is normalised by public constants, clipped to row norm <= 1/2 (so neighbouring
rows differ by <= 1, the assumption of Lemma 2), projected on k fresh unit directions and
released with Gaussian noise of the calibrated std (Algorithm 1).  Everything after that — the
sorted 1-D transport against generated samples, the generator's gradient — is post-processing.

Algorithm (one step, T = epochs * ceil(N / B) steps in all):
  1. private batch X_t ~ sampler (Poisson rate q = B/N, or B without replacement)
  2. rows r(x, y) = [ (x - c) / (2R) || lambda * onehot(y) ]  clipped to norm 1/2   (DP-SWD paper, unit-norm assumption)
  3. U: k directions uniform on S^{D-1}                                               (DP-SWD paper, Alg. 1)
  4. P_t = r(X_t) U + Z_t,  Z_t ~ N(0, sigma^2)       <- the only private release     (Alg. 1)
                                                         (``GaussianProjectionRelease``, recorded)
  5. P_s = r(G(z, y_g)) U + Z_s                                                        (Alg. 1)
  6. loss = SW_2(P_s, P_t) from sorted columns; Adam step on G                        (DP-SWD paper, Alg. 1)

Class labels (the paper does not say how; ``label_mode``):
  * ``partition`` (default): each private batch is split by label into C blocks of the public
    size m = ceil(B / C) (``rows.fixed_size`` per class: a uniform random subset when the class has more
    rows, zero (centre) rows appended when fewer); the generated side is m rows of each label; the loss is
    ``(mean_c SW_2^2(G(z, c) U + Z_s, block_c U + Z_t))^{1/2}`` (``ot.sliced_wasserstein_blocks``).  The
    released matrix is the C m stacked rows, projected and noised as ONE ``GaussianProjectionRelease``.
    Privacy: under add/remove of (x, y) only block y changes, and in one row: a padding row becomes x
    (distance <= 1/2) or, when block y was cut, x takes the place of a random kept record (distance <= 1,
    the same coupling and partners argument as the fixed-size batch below); under replace-one (fixed-size
    sampling) one record leaves block y and another enters block y': the blocks are rebuilt by the same
    rule, so at most one row of each of two blocks changes when y != y' -- we therefore support partition
    only under ``accountant.sampling=poisson`` (add/remove), where the row-level argument is exact, and
    the calibration is the same as for an unpartitioned batch of C m rows.  The label information enters
    at first order (which block a row is transported within), not through a one-hot inside the row.
  * ``concat``: a one-hot of the label scaled by ``label_weight`` is appended to the
    normalised image, as DP-Sinkhorn conditions its cost; generated rows carry the label they were
    generated for, so transport prefers same-class pairs and the conditional generator learns
    p(x | y).  The accounting uses the actual row dimension D = d + n_classes and the whole row
    (image and label part) is clipped, so the sensitivity assumption covers the labels.
  * ``none``: images only (d = 784 as in Table 4); the generator's label input is then ignored
    by the loss and downstream classifiers see meaningless labels.

Feature space (CelebA, DP-SWD paper, CelebA generator): with ``feature_map`` set, rows are built from f(x) instead of
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
artefact to publish.  The training loop, checkpoints and budget stop are ``methods.loop``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..data import DataSplits
from ..errors import ConfigError
from ..ot.sliced import sliced_cost_blocks
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.conventions import (
    PaperConvention,
    RawPixelRows,
    as_convention,
    raw_pixel_diameter,
    true_epsilon,
)
from ..privacy.mechanisms import GaussianProjectionRelease
from ..privacy.noise import NoiseSettings
from ..privacy.projection import ProjectionDP, as_projection_dp
from ..privacy.rows import RowMap
from ..utils import autocast
from ..utils.compiling import adam, compile_function, compile_module
from ..utils.misc import on_gpu
from .base import GenerativeMethod, TrainContext, mechanism_seed, secret_seed
from .parallel import GeneratedSide, ParallelOptimizer, Share
from .warm_start import WarmTarget, as_warm_start


def released_sliced_cost(projection: GaussianProjectionRelease, rows_t: torch.Tensor, u: torch.Tensor,
                         p_s: torch.Tensor, n_blocks: int, share: Share, q: float,
                         cost: Callable = sliced_cost_blocks) -> torch.Tensor:
    """Steps 4 and 6 of a DP-SWD step: the release ``P_t = rows_t U + Z_t`` and the sum of
    ``|sort(P_s) − sort(P_t)|^q`` within the ``n_blocks`` class blocks (``SW_q`` is its mean to the power 1/q,
    :func:`sliced_wasserstein_step`), where ``p_s`` holds this process's ``share`` of the rows of ``P_s``.

    A share of whole blocks (``share.shared``) takes its rows of the release and returns its blocks' share of
    the cost (the shares add up over the processes).  A share of rows (fewer blocks than processes): the whole
    ``P_s`` is gathered (one all-gather; gradients flow into this process's rows) and every process returns the
    whole cost.  One process: the whole release and the whole cost either way."""
    b = rows_t.shape[0]
    if share.shared:
        p_t = projection.release(rows_t, u, part=share.bounds)
        return cost(p_s, p_t, n_blocks * share.size // b, q)
    p_t = projection.release(rows_t, u)
    return cost(share.gather(p_s), p_t, n_blocks, q)


def sliced_wasserstein_step(cost: torch.Tensor, share: Share, n_terms: int, q: float,
                            opt: ParallelOptimizer) -> torch.Tensor:
    """``SW_q = (cost / n_terms)^(1/q)`` (``n_terms = b k``: rows times directions) and its gradient in the
    parameters' ``.grad``, added over the processes in ONE all-reduce (``opt.step``): the cost of a share of whole
    blocks travels with the gradients (:meth:`ParallelOptimizer.backward_of_sum`), a whole cost is the same on
    every process."""
    def sw(total: torch.Tensor) -> torch.Tensor:
        return (total / n_terms).pow(1.0 / q)
    if share.shared:
        return opt.backward_of_sum(cost, sw)
    loss = sw(cost)
    loss.backward()
    return loss.detach()


class DPSWDGenerator(GenerativeMethod):
    """Generator trained with the DP-SWD loss against private samples."""

    split = "blocks"  # several processes: whole class blocks of the generated and released rows
    # measured (dpgen bench --only distributed, docs/benchmarks.md), said by a run on several CPU processes
    cpu_split_note = ("every process runs the generator's head (both BatchNorm layers) on the whole batch and draws "
                      "all the step's directions, and the gradient all-reduce waits on the slower process: 2 processes "
                      "ran 0.63x the steady steps/s of one at digits_dpswd and 1.25x at mnist_dpswd; below about 1.5x "
                      "the set-up both processes repeat can eat the gain of a short run; one process (or GPUs) may be faster")

    name = "DP-SWD"
    default_dp = ProjectionDP(num_projections=1000, bound="bernstein")  # model.dp when none is given
    release_name = "generator.pt"

    def __init__(self, generator: Callable[..., torch.nn.Module], dp: ProjectionDP | dict | None = None,
                 power: float = 2.0, batch_size: int = 100, epochs: int = 100, lr: float = 1e-4,
                 betas: tuple[float, float] = (0.9, 0.999), label_mode: str = "partition", label_weight: float = 1.0,
                 center: float | None = None, radius: float | None = None, private: bool = True,
                 feature_map: Callable[..., torch.nn.Module] | None = None, feature_lr: float = 5e-4,
                 convention: PaperConvention | None = None, warm_start: dict | None = None) -> None:
        self.convention = convention = as_convention(convention)
        self.warm_start = as_warm_start(warm_start)  # methods.warm_start: run by the loop
        if self.warm_start is not None and (convention is not None or feature_map is not None or not private):
            raise ConfigError("model.warm_start needs an honest private run on pixel rows: drop model.feature_map, "
                              "privacy.convention=paper and model.private=false, or model/warm_start=null")
        if convention is not None and (label_mode == "concat" or feature_map is not None or not private):
            raise ValueError("privacy.convention=paper (raw pixel rows) needs model.label_mode=partition or none, no "
                             "model.feature_map and model.private=true; set privacy.convention=honest otherwise")
        self.make_generator = generator
        self.dp = as_projection_dp(dp, self.default_dp)  # k, bound, directions, delta share
        self.k, self.power = self.dp.num_projections, float(power)
        self.batch_size, self.epochs, self.lr, self.betas = int(batch_size), int(epochs), float(lr), tuple(betas)
        self.label_mode, self.label_weight = label_mode, float(label_weight)
        self.center, self.radius, self.private = center, radius, bool(private)
        if label_mode not in ("partition", "concat", "none"):
            raise ValueError(f"model.label_mode must be 'partition', 'concat' or 'none', got {label_mode!r}")
        self.make_feature_map, self.feature_lr = feature_map, float(feature_lr)
        self.fmap: torch.nn.Module | None = None
        self.G: torch.nn.Module | None = None
        self.device, self.precision = torch.device("cpu"), "32"

    # ------------------------------------------------------------------------------------
    def steps_planned(self, n_private: int) -> int:
        """Number of private batches the schedule draws: ``epochs * ceil(N / B)``."""
        return self.epochs * math.ceil(n_private / self.batch_size)

    def noise_settings(self) -> NoiseSettings:
        """The projection's noise: calibrated to accountant.epsilon, none (private=false), or the paper's sigma."""
        return NoiseSettings(private=self.private, paper_std=None if self.convention is None else self.convention.sigma,
                             history=self.warm_start is not None)

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self.device, self.num_classes, self.public = ctx.device, data.num_classes, data.public
        self.precision = ctx.precision
        self.G = self.make_generator(image_shape=data.image_shape, n_labels=data.num_classes
                                     if self.label_mode != "none" else 0).to(ctx.device)
        if self.label_mode != "none" and not getattr(self.G, "conditional", False):
            raise ValueError(f"model.label_mode={self.label_mode} needs a conditional generator, but "
                             f"{type(self.G).__name__} ignores labels; set model.label_mode=none")
        if self.label_mode == "partition" and ledger.sampling != "poisson":
            raise ValueError("model.label_mode=partition is accounted under add/remove neighbours: use "
                             "accountant.sampling=poisson (or model.label_mode=concat)")
        row_labels = "concat" if self.label_mode == "concat" else "none"  # partition: image-only rows
        if self.make_feature_map is not None:
            if data.public is None:
                raise ValueError("model.feature_map is trained on public images only: set dataset.public_fraction > 0 "
                                 "(e.g. dataset.public_fraction=0.1)")
            c, h, _ = data.image_shape
            self.fmap = self.make_feature_map(in_channels=c, image_size=h).to(ctx.device)
            self._rowmap = RowMap(self.fmap.out_dim, data.num_classes, (-1.0, 1.0), 0.0, self.radius, row_labels,
                                  self.label_weight)  # tanh features lie in [-1, 1]
        elif self.convention is not None:  # the paper convention: raw pixels, NO ||x - x'|| <= 1 bound
            self._rowmap = RawPixelRows(data.dim)
            self._true_diameter = raw_pixel_diameter(data.dim, data.value_range)
        else:
            self._rowmap = RowMap(data.dim, data.num_classes, data.value_range, self.center, self.radius,
                                  row_labels, self.label_weight)
        # partition: C blocks of m = ceil(B / C) rows (public sizes); otherwise one block of B rows
        self.n_blocks = data.num_classes if self.label_mode == "partition" else 1
        self.block_rows = math.ceil(self.batch_size / self.n_blocks)
        n_priv = len(data.private)
        # the private split on the run's device, once; batches drawn there (privacy.sampler)
        self.sampler = PrivateSampler(data.private, self.batch_size, ledger.sampling, seed=secret_seed(ctx),
                                      device=ctx.device)
        self._steps = self.steps_planned(n_priv)
        self._signature = {"n_private": n_priv, "n_public": 0 if data.public is None else len(data.public),
                           "dataset": data.name, "batch_size": self.batch_size, "epochs": self.epochs, "k": self.k,
                           "bound": self.dp.bound, "label_mode": self.label_mode, "sampling": ledger.sampling,
                           "directions": self.dp.directions}
        # the one private release per step (Alg. 1), sigma from accountant.epsilon before training (DP-SWD paper, σ calibration)
        self.projection = GaussianProjectionRelease(
            ledger, dim=self._rowmap.out_dim, steps=self._steps,
            sample_rate=self.sampler.sample_rate, n_private=n_priv, row_diameter=1.0, noise=self.noise,
            seed=mechanism_seed(ctx), device=ctx.device,  # noise and directions drawn on the run's device
            **self.dp.release_settings())  # a paper's sigma: against diameter 1 (stated)
        self.mechanisms = {"projection": self.projection}
        # trainer.compile=on: the generator's forward, the loss and the Adam step compiled (utils.compiling); the
        # release (sampler, directions, noise) stays eager
        self.generated = GeneratedSide(self.G, lambda g: compile_module(g, ctx.compile, ctx.device))
        self._cost = compile_function(sliced_cost_blocks, ctx.compile, ctx.device)
        self.opt = ParallelOptimizer(adam(self.G.parameters(), ctx.compile, ctx.device, ctx.graph, lr=self.lr,
                                          betas=self.betas), self.G.parameters())
        self.opt_f = torch.optim.Adam(self.fmap.parameters(), lr=self.feature_lr, betas=(0.5, 0.999),
                                      capturable=ctx.graph and on_gpu(ctx.device), foreach=True) \
            if self.fmap is not None else None
        self.pub_gen = torch.Generator().manual_seed(ctx.seed + 2)
        # partition: the generated side's labels, m of each class (public, the same every step)
        self._block_labels = torch.arange(self.num_classes, device=ctx.device).repeat_interleave(self.block_rows)
        self.G.train()

    @property
    def total_steps(self) -> int:
        return self._steps

    def capturable(self, t: int) -> bool:
        """The CelebA feature map's step draws its public batch on the host: such a run's steps are eager."""
        return self.fmap is None

    def step(self, t: int) -> dict:
        """DP-SWD, Algorithm 1, one step::

            X_t ~ Poisson(q) private batch, rows r(X_t) of norm <= 1/2    (1-2)
            U_t: (D, k) fresh unit (or orthonormal) directions            (3)
            P_t = r(X_t) U_t + Z_t,   Z_t ~ N(0, s^2)   (THE release)     (4)
            P_s = r(G(z)) U_t + Z_s   (public smoothing, same s)          (5)
            theta <- Adam(theta, grad SW_2(P_s, P_t))                     (6)
        """
        if self.fmap is not None:
            self._feature_step()                                               # DP-SWD paper, CelebA generator, public images only
        rows_t = self._private_rows()                                          # 1-2. r(X_t): (B, D) or (C m, D)
        b = rows_t.shape[0]
        if self.label_mode == "partition":                                     # m generated rows of each label
            y_g = self._block_labels
        else:
            y_g = torch.randint(self.num_classes, (b,), device=self.device, generator=self.rng)
        codes = torch.randn(b, self.G.d_code, device=self.device, generator=self.rng)
        # several processes: this rank's whole class blocks (its rows when the blocks are fewer than the ranks);
        # every rank draws all codes and labels, as one process draws them
        share = Share.blocks(self.n_blocks, self.block_rows)
        with autocast(self.device, self.precision):  # trainer.precision=bf16: the generator forward only
            x_g = self.generated(codes, y_g, share)                            # G(z), this rank's rows
        x_g, y_g = x_g.float(), share.take(y_g)  # rows, projections and noise stay float32
        u = self.projection.draw_directions(self.device)                       # 3. U: (D, k), random or orthonormal
        p_s = share.projected(self.rows(x_g, y_g), u, self.projection.noise_std, self.rng)  # 5. P_s = r(G) U + Z_s
        # 4. P_t = r(X_t) U + Z_t (THE release, recorded), 6. SW_q within blocks
        cost = released_sliced_cost(self.projection, rows_t, u, p_s, self.n_blocks, share, self.power, self._cost)
        self.opt.zero_grad(set_to_none=True)
        loss = sliced_wasserstein_step(cost, share, b * u.shape[1], self.power, self.opt)
        self.opt.step()                                                        # the gradients added over the ranks
        return {"loss": loss}  # a function of the release P_t and public P_s (synced at log cadence)

    def rows(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The rows the projection release sees, of norm <= 1/2 (so neighbours differ by at most 1):
        ``rowmap(x)`` or ``rowmap(f(x))`` with the feature map f in eval mode (a fixed per-record public map;
        ``setup`` builds it).  Generated images go through the same map."""
        if self.fmap is None:
            return self._rowmap(x, y)
        self.fmap.eval()
        return self._rowmap(self.fmap.features(x), y)

    def _private_rows(self) -> torch.Tensor:
        """Private batch -> B normalised, clipped rows on the device (never leaves this method
        except through the projection release).  The fixed-size layout (B rows, or C blocks of m) is formed
        on the device by the sampler (``PrivateSampler.fixed_batch`` / ``class_batch``: the law of
        ``rows.fixed_size`` / ``class_blocks``, rows shuffled); padding rows are the zero row (the public centre)."""
        if self.label_mode == "partition":
            x_t, y_t, valid = self.sampler.class_batch(self.num_classes, self.block_rows)  # C blocks of size m
        else:
            x_t, y_t, valid = self.sampler.fixed_batch(self.batch_size)
        with torch.no_grad():
            return torch.where(valid[:, None], self.rows(x_t, y_t), 0.0)

    def _feature_step(self) -> None:
        """One real/fake BCE step of the feature map on PUBLIC images vs generated ones (DP-SWD paper, CelebA generator)."""
        pub = self.public
        n = min(self.batch_size, len(pub))
        idx = torch.randint(len(pub), (n,), generator=self.pub_gen)
        real = pub.x[idx].to(self.device)
        with torch.no_grad():
            y = torch.randint(max(self.num_classes, 1), (n,), device=self.device)
            fake = self.G(torch.randn(n, self.G.d_code, device=self.device), y)
        self.fmap.train()
        logits = self.fmap.logits(torch.cat([real, fake]))
        target = torch.cat([torch.ones(n, device=self.device), torch.zeros(n, device=self.device)])
        loss = F.binary_cross_entropy_with_logits(logits, target)
        self.opt_f.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_f.step()

    def warm_target(self) -> WarmTarget:
        """The warm-up fits ``G`` in the rows of the release (``_rows``: public normalisation)."""
        def generate(y: torch.Tensor, share: Share) -> torch.Tensor:
            z = torch.randn(y.shape[0], self.G.d_code, device=self.device)  # all the codes, as one process draws them
            return self.rows(self.generated(z, y, share, compiled=False).float(), share.take(y))
        return WarmTarget(rows=self.rows, device=self.device, generate=generate, parameters=self.G.parameters())

    # -- state ------------------------------------------------------------------------------
    def signature(self) -> dict:
        return self._signature

    def state_dict(self) -> dict:
        out = {"generator": self.G.state_dict(), "optimizer": self.opt.state_dict()}
        if self.fmap is not None:
            out.update({"feature_map": self.fmap.state_dict(), "feature_optimizer": self.opt_f.state_dict(),
                        "public_generator": self.pub_gen.get_state()})
        return out

    def load_state_dict(self, state: dict) -> None:
        self.G.load_state_dict(state["generator"])
        self.opt.load_state_dict(state["optimizer"])
        if self.fmap is not None:
            self.fmap.load_state_dict(state["feature_map"])
            self.opt_f.load_state_dict(state["feature_optimizer"])
            self.pub_gen.set_state(state["public_generator"])

    def release_state(self) -> dict:
        return {"generator": self.G.state_dict()}

    def train_summary(self) -> dict:
        p = self.projection
        return {"noise_std": p.noise_std, "noise_multiplier": p.noise_multiplier, "sensitivity": p.sensitivity,
                "sensitivity_bound": p.bound if self.private else None, "guarantee": p.guarantee,
                "row_dim": self._rowmap.out_dim, "num_projections": self.k, "label_mode": self.label_mode,
                "directions": self.dp.directions, "released_rows": self.n_blocks * self.block_rows}

    def convention_report(self) -> dict | None:
        """``privacy.convention=paper``: the ε of the releases that ran under the rows' TRUE diameter
        ``(hi - lo) sqrt(d)`` (Lemma 2's bound is linear in the row diameter), beside the stated one."""
        if self.convention is None:
            return None
        p = self.projection
        true = true_epsilon(p.noise_std, p.sensitivity * self._true_diameter, sample_rate=p.sample_rate,
                            steps=p.releases, delta=p.ledger.delta, sampling=p.ledger.sampling,
                            delta_per_step=p.beta, relation=p.relation, calibrate_with=p.ledger.calibrate_with)
        return {"convention": "paper", "paper_epsilon": self.convention.epsilon, "paper_sigma": self.convention.sigma,
                "sensitivity_stated": p.sensitivity, "row_diameter_stated": 1.0,
                "row_diameter_true": self._true_diameter, **true,
                "epsilon_true_note": f"raw pixel rows differ by up to {self._true_diameter:.4g}, not 1: the same "
                                     "noise and schedule under the true sensitivity"}

    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        if self.G is None:
            raise RuntimeError("train the method first (methods.loop.train) or restore() a release before sample()")
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
