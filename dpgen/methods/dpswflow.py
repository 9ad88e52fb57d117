"""DPSWflow-r and DPSWflow (Sebag et al., TMLR): particles transported by a sliced-Wasserstein flow
toward noisy projections of the private latent rows (latent space: :mod:`dpgen.methods.latent`).

Private releases (what the ledger records):

* DPSWflow-r (Algorithm 1): at every step a fresh Poisson batch (released at the fixed size B,
  public zero rows pad a short batch, a long one is cut to a random subset) is projected on
  ``num_projections`` FRESH directions and noised: ``A_t = Y_t U_t + Z_t``.  One subsampled
  Gaussian release per step, q = B/N, T = epochs * ceil(N/B) (or ``steps``) releases.
* DPSWflow (Algorithm 2): ``num_projections`` directions are drawn ONCE, the projections of the
  whole private set are noised ONCE (one Gaussian mechanism, sample rate 1, N public: replace-one
  neighbours, recorded once at step 0; a resume never repeats it) and its quantile function is
  computed once; each step subsamples ``projections_per_step`` of these directions (fresh, without
  replacement; the released code reuses one multinomial draw) and re-noises only the particles.
  Nothing private is touched after the release ("free" steps).  The released code re-noises the
  private projections at every step; that is not covered by the one-shot analysis and is not done here.

Labels: with ``label_mode=partition`` each class's particles (particle i has class i mod C) are
transported toward their own block of the release only, so the label enters at first order.
Per-step releases (DPSWflow-r): blocks of ``ceil(B / C)`` rows, add/remove under Poisson (refused
under ``without_replacement``), one row of one block changes: the calibration of an unpartitioned
batch.  DPSWflow's one-shot release: blocks of ``ceil(block_slack N / C)`` rows, replace-one (N
public), two rows of two blocks change: sensitivity times sqrt(2)
(``OneShotProjectionRelease(class_blocks=True)``).

Generation (``sample``): the decoded final particles.  For ``n`` larger than the particle count,
particles are drawn with replacement (among those of the requested class) and perturbed by
``sample_jitter`` Gaussian noise in latent space; the image part of every latent is put back on the
unit sphere (the decoder's training domain) before decoding.

Several processes: the release is the single-process one (the whole released batch on every rank, noised
once); each rank computes the particle flow on its contiguous part of the step's directions (the quantile
functions, sorts and lookups: nearly all of a step) and the parts of the drift are added in one all-reduce,
so every rank moves every particle alike (``_ParticleFlow._own_directions``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..data import DataSplits
from ..errors import ConfigError
from ..logging.plots import particles_scatter
from ..ot.flows import (
    empirical_quantiles,
    euler_maruyama_step,
    quantile_levels,
    sliced_flow_drift,
    smoothed_projections,
)
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.accountants import analytic_gaussian_epsilon
from ..privacy.mechanisms import OneShotProjectionRelease
from ..privacy.projection import ProjectionDP
from ..privacy.rows import class_blocks
from .base import TrainContext, mechanism_seed, settle
from .latent import LatentMethod
from .parallel import Share
from .warm_start import WarmTarget


@dataclass(frozen=True)
class FlowSettings:
    """The particle flow (``model.n_particles``, ``step_size`` (h), ``reg`` (lambda: the entropy of the
    Euler-Maruyama step), ``num_percentiles`` (M quantile levels))."""

    n_particles: int = 10000
    step_size: float = 3.0
    reg: float = 0.0
    num_percentiles: int = 30000

    def __post_init__(self) -> None:
        if int(self.n_particles) < 2:
            raise ValueError(f"model.n_particles must be >= 2, got {self.n_particles}")
        if float(self.step_size) <= 0 or float(self.reg) < 0:
            raise ValueError(f"model.step_size must be > 0 and model.reg >= 0, got {self.step_size}, {self.reg}")
        settle(self, n_particles=int(self.n_particles), step_size=float(self.step_size), reg=float(self.reg),
               num_percentiles=int(self.num_percentiles))


@dataclass(frozen=True)
class OneShotSettings:
    """DPSWflow's one release (``model.projections_per_step`` (M_theta), ``calibration``, ``block_slack``);
    ``projections_per_step`` is checked against ``num_projections`` by the method."""

    projections_per_step: int = 25
    calibration: str = "rdp"
    block_slack: float = 1.0

    def __post_init__(self) -> None:
        if not float(self.block_slack) > 0:
            raise ValueError(f"model.block_slack must be > 0 (block size m = ceil(block_slack * N / C)), got "
                             f"{self.block_slack}")
        if self.calibration not in ("rdp", "analytic"):
            raise ValueError(f"model.calibration={self.calibration!r}: choose rdp (the ledger's accountant) or "
                             "analytic (exact Gaussian mechanism); the paper's classic formula is not a valid bound "
                             "at eps = 10 (dpgen/reproduce/dpswflow_sigma_table.py)")
        settle(self, projections_per_step=int(self.projections_per_step), block_slack=float(self.block_slack))


class _ParticleFlow(LatentMethod):
    """Particles, their update and the sampling of decoded particles (shared by both flows)."""

    split = "directions"  # several processes: a part of each step's directions

    # the target a step hands to :meth:`_move`: its quantiles at the M levels (False) or its released
    # projections, whose quantiles the transport map reads only where it needs them (True)
    target_sample = False

    def _start_flow(self) -> None:
        """The flow's state before ``setup`` (no particles yet; the public generator that draws from them)."""
        self.X: torch.Tensor | None = None
        self._pool_gen = torch.Generator().manual_seed(0)

    def _restore_state(self, state: dict) -> None:
        self.X = state["particles"].to(self.device)
        self.particle_labels = (torch.arange(self.X.shape[0]) % self.space.n_classes
                                if self.latent.label_mode == "partition" else None)

    def _init_particles(self, data: DataSplits) -> None:
        """``X_0 ~ mu_0 = N(0, I_D)`` (DPSWflow paper, the particle flow; not put on the sphere); quantile levels; the public test set
        for the toy's plot."""
        self.levels = quantile_levels(self.flow.num_percentiles, device=self.device)
        self.X = torch.randn(self.flow.n_particles, self.space.dim, device=self.device)
        if self.latent.label_mode == "partition" and self.flow.n_particles < self.space.n_classes:
            raise ValueError(f"model.label_mode=partition needs model.n_particles >= {self.space.n_classes} (classes)")
        # partition: particle i belongs to class i mod C for the whole run (public, fixed)
        self.particle_labels = (torch.arange(self.flow.n_particles) % self.space.n_classes
                                if self.latent.label_mode == "partition" else None)
        # the particles of each class (public indices, found once on the host: no sync in the steps)
        self._class_idx = [torch.arange(c, self.flow.n_particles, self.space.n_classes, device=self.device)
                           for c in range(self.space.n_classes)] if self.latent.label_mode == "partition" else None
        self._test_x = data.test.x

    @staticmethod
    def _own_directions(k: int) -> slice:
        """This rank's contiguous part of the ``k`` directions of a step (all of them on one process).

        Several processes split the particle flow by DIRECTION: every 1-D problem (the target's and the
        particles' quantile functions at the M levels, the sort, the lookups) belongs to one direction, and
        these are nearly all of a step's work at any particle count, while the particle CDF of a direction
        needs every particle's projection on it (a split by particle would exchange all projections and
        still sort them all).  Each rank computes its directions' part of the drift sum (Eq. 20); the parts
        are added over the ranks (one all-reduce of ``(n, D)``) and every rank moves every particle alike,
        so the particles stay the same on every rank.  The public draws (directions, smoothing and
        diffusion noise) are made in full on every rank from generators in the same state, so one and N
        processes draw the same numbers; the private release is the single-process one."""
        return Share.directions(k).slice

    def _drift(self, proj: torch.Tensor, tq: torch.Tensor, u: torch.Tensor, own: slice) -> torch.Tensor:
        """Eq. 20 from this rank's directions ``own`` of ``u``, the ranks' parts added: each part summed in float64
        and the sum rounded once, so N processes give one process's drift (not another order of float32 sums)."""
        part = sliced_flow_drift(proj, tq, self.levels, u[:, own], u.shape[1], sum_dtype=torch.float64,
                                 target_sample=self.target_sample)
        return Share.total(part).to(proj.dtype)

    def _move(self, u: torch.Tensor, tq: torch.Tensor, sigma: float, step: int,
              idx: torch.Tensor | None = None) -> torch.Tensor:
        """Particle update (Algorithms 1-2, last lines) of all particles or of ``idx``; ``tq``: the target
        on this rank's directions (:meth:`_own_directions` of ``u``'s columns): its quantiles, or its projections
        (:attr:`target_sample`).  Returns the mean
        drift norm (0-d tensor, NaN when a moved particle is not finite: the loop raises at its next check)."""
        x = self.X if idx is None else self.X[idx]
        own = self._own_directions(u.shape[1])
        proj = smoothed_projections(x, u, sigma, self.rng)[own]  # X U + Z (particles re-noised, public: drawn in full)
        v = self._drift(proj, tq, u, own)                                   # Eq. 20
        x_new = euler_maruyama_step(x, v, self.flow.step_size, self.flow.reg, self.rng)  # X - h v + sqrt(2 lambda h) Z
        if idx is None:
            self.X.copy_(x_new)  # in place: a captured step (trainer.graph) updates the particles it reads
        else:
            self.X[idx] = x_new
        # particles are public (post-processing of the releases); no host sync here: a non-finite
        # particle turns the drift value into NaN, which the loop's non-finite check reports
        finite = torch.isfinite(x_new).all()
        return torch.where(finite, v.norm(dim=1).mean(), torch.full((), float("nan"), device=v.device))

    def _move_classes(self, u: torch.Tensor, tq: torch.Tensor, sigma: float) -> torch.Tensor:
        """:meth:`_move` of every class at once (``n`` divisible by C; particle i is of class ``i mod C``):
        ``tq: (C, k_r, M)`` the target quantiles of each block on this rank's directions (:meth:`_own_directions`;
        ``(C, k_r, m)`` its projections with :attr:`target_sample`);
        returns the mean over classes of the mean drift norm, NaN when a particle is not finite.  The same update
        as C calls of :meth:`_move` (the smoothing and diffusion noise are public draws of the same law)."""
        c_n, d = tq.shape[0], self.X.shape[1]
        own = self._own_directions(u.shape[1])
        x = self.X.view(-1, c_n, d).transpose(0, 1)                        # (C, n / C, D)
        proj = smoothed_projections(x, u, sigma, self.rng)[:, own]                   # (C, k_r, n / C)
        v = self._drift(proj, tq, u, own)                                   # Eq. 20
        x_new = euler_maruyama_step(x, v, self.flow.step_size, self.flow.reg, self.rng)
        self.X.copy_(x_new.transpose(0, 1).reshape(-1, d))  # in place (a captured step reads and updates it)
        finite = torch.isfinite(x_new).all()
        drift = v.norm(dim=-1).mean(dim=-1).mean()
        return torch.where(finite, drift, torch.full((), float("nan"), device=v.device))

    def state_dict(self) -> dict:
        return {"particles": self.X.cpu(), **self._ae_state()}

    def load_state_dict(self, state: dict) -> None:
        self.X = state["particles"].to(self.device)

    def release_state(self) -> dict:
        """Final particles (post-processing of the releases) and the public AE: what ``sample`` needs."""
        return {"particles": self.X.cpu(), **self._ae_state()}

    def progress_info(self, values: dict) -> str:
        return f"|v| {values['drift_norm']:.4f}"

    def finish(self, ctx: TrainContext) -> None:
        """2-D latent without autoencoder (the toy): ``particles.png``, particles over the public test set."""
        if self.space.ae is None and self.space.d == 2:
            particles_scatter(ctx.run_dir / "particles.png", self._test_x.flatten(1),
                              self.space.decode(self.X).flatten(1))

    def train_summary(self) -> dict:
        out = {**self._summary(self._main_mechanism()), "n_particles": self.flow.n_particles}
        if math.isfinite(float(self._last_drift)):  # absent when this process ran no flow step (e.g. max_steps=0)
            out["final_drift_norm"] = float(self._last_drift)
        if self.space.labels(self.X) is not None:
            counts = torch.bincount(self.space.labels(self.X).cpu(), minlength=self.space.n_classes)
            out["particle_label_fractions"] = (counts.float() / counts.sum()).tolist()
        return out

    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        if self.X is None:
            raise RuntimeError("train the method first (methods.loop.train) or restore() a release before sample()")
        k = self.space.n_classes
        if labels is None:
            labels = torch.arange(n) % k
        pool_labels = self.space.labels(self.X) if getattr(self, "particle_labels", None) is None \
            else self.particle_labels
        idx = torch.empty(n, dtype=torch.long)
        if pool_labels is None:
            idx = torch.randint(self.X.shape[0], (n,), generator=self._pool_gen)
        else:
            pool_labels = pool_labels.cpu()
            # partition: padding rows put mass at the zero latent; prefer particles away from it (public)
            away = (self.X[:, :self.space.d].norm(dim=1) >= 0.5).cpu() \
                if self.latent.label_mode == "partition" and self.space.ae is not None \
                else torch.ones(self.X.shape[0], dtype=torch.bool)  # (unit latents: no record sits at 0)
            for c in labels.unique().tolist():
                want = (labels == c).nonzero().flatten()
                have = ((pool_labels == c) & away).nonzero().flatten()
                if have.numel() == 0:
                    have = (pool_labels == c).nonzero().flatten()
                if have.numel() == 0:  # no particle of this class: any particle (its label is then wrong)
                    have = torch.arange(self.X.shape[0])
                idx[want] = have[torch.randint(have.numel(), (want.numel(),), generator=self._pool_gen)]
        z = self.X[idx.to(self.X.device)]
        if self.latent.sample_jitter > 0 and n > self.X.shape[0]:
            z = z + self.latent.sample_jitter * torch.randn(z.shape, generator=self._pool_gen).to(z.device)
        return self.space.decode(z, batch_size), labels.cpu()


# ---------------------------------------------------------------------------------------------
class DPSWFlowR(_ParticleFlow):
    """DPSWflow-r (Algorithm 1): fresh directions and a fresh private batch every step."""

    name = "DPSWflow-r"
    target_sample = True  # the step's released projections (their M-level quantiles are never built)

    def __init__(self, n_particles: int = 10000, step_size: float = 3.0, reg: float = 0.0,
                 num_percentiles: int = 30000, **latent) -> None:
        LatentMethod.__init__(self, **latent)  # the autoencoder, privacy and schedule settings (LatentMethod)
        self.flow = FlowSettings(n_particles=n_particles, step_size=step_size, reg=reg,
                                 num_percentiles=num_percentiles)
        self._start_flow()

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self._setup_latent(data, ledger, ctx)
        self._secret_seed(ctx)
        self._per_step_release(data, ledger, ctx)
        self._init_particles(data)
        self._last_drift = float("nan")

    def step(self, t: int) -> dict:
        """DPSWflow-r, Algorithm 1, one step::

            Y_t ~ Poisson(q) private latent rows (norm <= 1), U_t fresh directions
            A_t = Y_t U_t + Z_t                       (THE release)
            F_t^{-1} = quantiles of A_t per direction (Eq. 21)
            v = drift of X U_t + Z' toward F_t^{-1}   (Eq. 20)
            X <- X - h v + sqrt(2 lambda h) xi        (Euler-Maruyama)
        """
        if self.latent.label_mode == "partition":
            return self._partition_step(t)
        with torch.no_grad():
            rows = self._private_rows()                                       # Y_t: (B, D), norm <= 1
            u = self.projection.draw_directions(self.device)  # U_t: fresh directions (random or orthonormal)
            a = self.projection.release(rows, u)                             # A_t = Y_t U_t + Z_t (recorded)
            own = self._own_directions(self.k)  # this rank's directions (all on one process)
            tq = a.transpose(0, 1)[own]  # the target: its inverse CDF at the levels (Eq. 21), read where needed
            self._last_drift = self._move(u, tq, self.projection.noise_std, t)
        return {"drift_norm": self._last_drift}

    @torch.no_grad()
    def _partition_step(self, t: int) -> dict:
        """Class-partitioned Algorithm 1: the Poisson batch split by label into C blocks of
        m = ceil(B / C) latent rows (``rows.class_blocks``), released as ONE stacked (C m, D) projection;
        the particles of class c flow toward block c's noisy quantiles.  Add/remove changes one row of one
        block by <= 2 (unit latents): the calibration of an unpartitioned batch of C m rows applies."""
        c_n = self.space.n_classes
        m = math.ceil(self.schedule.batch_size / c_n)
        blocks = self._private_blocks(c_n, m)                               # (C m, D), norm <= 1, on the device
        u = self.projection.draw_directions(self.device)
        a = self.projection.release(blocks, u)                              # THE release of the step (recorded)
        own = self._own_directions(self.k)  # this rank's directions (all on one process)
        if self.flow.n_particles % c_n == 0:  # every class has n / C particles (i mod C): all classes in one set of ops
            tq = a.view(c_n, m, -1).transpose(1, 2)[:, own]  # (C, k_r, m): each block's inverse CDF (Eq. 21)
            self._last_drift = self._move_classes(u, tq, self.projection.noise_std)
            return {"drift_norm": self._last_drift}
        drifts = []
        for c in range(c_n):
            tq = a[c * m:(c + 1) * m].transpose(0, 1)[own]
            drifts.append(self._move(u, tq, self.projection.noise_std, t, self._class_idx[c]))
        self._last_drift = torch.stack(drifts).mean()
        return {"drift_norm": self._last_drift}

    def train_summary(self) -> dict:
        return {**super().train_summary(), "sample_rate": self.projection.sample_rate}

    def warm_target(self) -> WarmTarget:
        """The warm-up puts the particles on latent rows of samples of the released class Gaussians (one sample
        per particle, of the particle's class; balanced labels without partition)."""
        labels = (self.particle_labels if self.particle_labels is not None
                  else torch.arange(self.flow.n_particles) % self.space.n_classes)

        def place(rows: torch.Tensor) -> None:
            self.X = rows.to(self.device)
        return WarmTarget(rows=self.space.rows, device=self.device, labels=labels, place=place)


# ---------------------------------------------------------------------------------------------
class DPSWFlow(_ParticleFlow):
    """DPSWflow (Algorithm 2): directions and the noisy private quantiles ONCE; free particle steps.

    ``label_mode=partition`` (default): the ONE release is the whole private set split by label
    into C blocks of the PUBLIC size ``m = ceil(block_slack * N / C)`` (N public, as for every one-shot
    release), ``rows.class_blocks`` (cut to a uniform random subset / padded with the zero row), stacked
    ``(C m, D)``, projected on the N_theta directions and noised once: ``A = [B_1; ...; B_C] U + Z``.
    Relation: replace-one (N public).  Sensitivity: at most two rows change (one in block y, one in block
    y'), each by <= 2 (unit latents): ``sqrt(2) * 2 sqrt(ceil(k/D))`` with orthogonal directions, or the
    probabilistic bound at ``beta / (2 (N + 1))`` times sqrt(2) with random ones
    (``OneShotProjectionRelease(class_blocks=True)``).  Any sampler setting is fine (the relation is
    replace-one by construction; nothing is subsampled).  Post-processing: the quantiles of each block
    ``(C, k, M)``; particle i belongs to class ``i mod C`` and flows toward its block's quantiles only.
    Padding rows put a point mass at the zero latent (fraction ``1 - n_c / m`` of block c: up to ~10 %
    for MNIST's smallest class with ``block_slack = 1``; larger classes are cut instead); ``sample`` draws, per class, from the particles
    whose latent norm is >= 1/2 when there are any (autoencoder latents only, where every record has
    norm 1; post-processing of public particles).
    """

    name = "DPSWflow"
    default_dp = ProjectionDP(num_projections=31, bound="chernoff")

    def __init__(self, n_particles: int = 10000, step_size: float = 3.0, reg: float = 0.0,
                 num_percentiles: int = 30000, projections_per_step: int = 25, calibration: str = "rdp",
                 block_slack: float = 1.0, steps: int | None = 1500, **latent) -> None:
        LatentMethod.__init__(self, steps=steps, **latent)  # the autoencoder, privacy and schedule settings
        self.flow = FlowSettings(n_particles=n_particles, step_size=step_size, reg=reg,
                                 num_percentiles=num_percentiles)
        if self.warm_start is not None:
            raise ConfigError("model.warm_start is for DPSWflow-r and DPSWgen: DPSWflow's one release of the whole "
                              "set is replace-one (N public) and cannot be composed with the add/remove moment "
                              "release in one ledger; use experiment=<dataset>_dpswflow_r, or model/warm_start=null")
        self.one_shot_settings = OneShotSettings(projections_per_step=projections_per_step, calibration=calibration,
                                                 block_slack=block_slack)
        if not 1 <= self.one_shot_settings.projections_per_step <= self.k:
            raise ValueError(f"model.projections_per_step must be in [1, num_projections={self.k}], got "
                             f"{projections_per_step}")
        self._start_flow()
        self.u_all: torch.Tensor | None = None
        self.tq_all: torch.Tensor | None = None

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self._setup_latent(data, ledger, ctx)
        self._secret_seed(ctx)
        self._signature.update({"m_theta": self.one_shot_settings.projections_per_step, "calibration": self.one_shot_settings.calibration,
                                "block_slack": self.one_shot_settings.block_slack})
        self._steps = self.steps_planned(len(data.private))
        n_priv, c_n = len(data.private), data.num_classes
        self.block_rows = (math.ceil(self.one_shot_settings.block_slack * n_priv / c_n)
                           if self.latent.label_mode == "partition" else None)
        self.one_shot = OneShotProjectionRelease(ledger, dim=self.space.dim, calibration=self.one_shot_settings.calibration,
                                                 noise=self.noise, seed=mechanism_seed(ctx),
                                                 class_blocks=self.latent.label_mode == "partition", n_private=n_priv,
                                                 device=ctx.device,  # noise and directions drawn on the device
                                                 **self.privacy.dp.release_settings())
        self.mechanisms = {"one_shot": self.one_shot}
        released = ctx.resume_state is not None and ctx.resume_state.get("quantiles") is not None
        self._encoded = None if released else self._encode_private(data, self._seed)  # read, not released
        self._init_particles(data)
        self._last_drift = float("nan")

    def _main_mechanism(self):
        return self.one_shot

    def step_mechanisms(self, t: int) -> list:
        return [self.one_shot] if t == 0 else []  # Alg. 2: the private set is released once, at the start

    def _one_shot_release(self) -> None:
        """Alg. 2 lines 1-3: U once; ``A = Y U + Z`` on ALL private rows, ONCE; its quantiles once.

        partition: ``Y`` is the C class blocks of m rows (``(C m, D)``), ``tq_all: (C, k, M)``; else
        ``Y: (N, D)``, ``tq_all: (k, M)``."""
        rows, y = PrivateSampler(self._encoded, len(self._encoded), "without_replacement",
                                 seed=self._seed).sample()  # q = 1: every private latent row
        self._encoded = None
        rows = rows.to(self.device)
        if self.latent.label_mode == "partition":
            rows = class_blocks(rows, y, self.space.n_classes, self.block_rows)  # (C m, D): public sizes
        self.u_all = self.one_shot.draw_directions(self.device)  # drawn once (random or orthonormal)
        a = self.one_shot.release(rows, self.u_all)  # THE private release (recorded)
        if self.latent.label_mode == "partition":
            c_n = self.space.n_classes  # every block's quantiles at once: (C, k, M)
            self.tq_all = empirical_quantiles(a.view(c_n, self.block_rows, -1).transpose(1, 2).contiguous(), self.levels)
        else:
            self.tq_all = empirical_quantiles(a.transpose(0, 1).contiguous(), self.levels)  # (k, M), once

    def step(self, t: int) -> dict:
        """Algorithm 2: the release at t = 0, then free steps on M_theta of the N_theta released directions
        (partition: the particles of class c toward block c's quantiles, the same directions for all)."""
        with torch.no_grad():
            if t == 0:
                self._one_shot_release()
            idx = torch.randperm(self.k, device=self.device, generator=self.rng)[:self.one_shot_settings.projections_per_step]  # M_theta of the N_theta directions
            u, sigma = self.u_all[:, idx], self.one_shot.noise_std
            own = idx[self._own_directions(idx.shape[0])]  # this rank's directions of the step (all on one process)
            if self.latent.label_mode != "partition":
                self._last_drift = self._move(u, self.tq_all[own], sigma, t)
            elif self.flow.n_particles % self.space.n_classes == 0:  # every class at once (DPSWFlowR._partition_step)
                self._last_drift = self._move_classes(u, self.tq_all[:, own], sigma)
            else:
                drifts = [self._move(u, self.tq_all[c][own], sigma, t, self._class_idx[c])
                          for c in range(self.space.n_classes)]
                self._last_drift = torch.stack(drifts).mean()
        return {"drift_norm": self._last_drift}

    def state_dict(self) -> dict:
        released = self.tq_all is not None  # None only if the run stopped before its release
        return {**super().state_dict(), "directions": self.u_all.cpu() if released else None,
                "quantiles": self.tq_all.cpu() if released else None}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        if state["quantiles"] is not None:
            self.u_all, self.tq_all = state["directions"].to(self.device), state["quantiles"].to(self.device)

    def train_summary(self) -> dict:
        out = super().train_summary()
        if self.privacy.private:
            o = self.one_shot
            out.update({"one_shot_epsilon_exact": analytic_gaussian_epsilon(
                o.noise_multiplier, o.ledger.delta - o.beta), "one_shot_calibration": self.one_shot_settings.calibration})
        return out

