"""DPSWflow-r, DPSWflow and the DPSWgen baseline (Sebag et al., TMLR; DPSWflow paper).

All three work in the latent space of an autoencoder trained on the PUBLIC split only
(``dataset.public_fraction``, 0.5 in the presets); the AE is then frozen and applied in eval mode.

Privacy boundary: private images are touched only in ``_LatentMethod._encode_private`` (every record
mapped once to its latent row, nothing released), ``_LatentMethod._private_rows`` (a batch from the
PrivateSampler) and ``DPSWFlow._one_shot_release`` (the whole private set, read once through a
PrivateSampler with q = 1).  There each record is mapped by public functions to a row of norm <= 1
(``LatentSpace.rows``: frozen encoder -> unit normalisation (enforced: ``clip_rows``, not assumed)
-> optional scaled one-hot label), so two rows differ by at most 2 (the factor 2 of DPSWflow paper, sensitivity);
the rows are projected on unit directions and released once with Gaussian noise through a
``privacy.mechanisms.GaussianProjectionRelease`` (per step) or ``OneShotProjectionRelease`` (once),
which add the noise from their own generator and record the release in the ledger.  Everything after — quantiles, drift, particle
updates, generator gradients, decoding — is post-processing.

Per-step private releases (what the ledger records):

* DPSWflow-r (Algorithm 1): at every step a fresh Poisson batch (released at the fixed size B,
  public zero rows pad a short batch, a long one is cut to a random subset) is projected on
  ``num_projections`` FRESH directions and noised: ``A_t = Y_t U_t + Z_t``.  One subsampled
  Gaussian release per step, q = B/N, T = epochs * ceil(N/B) (or ``steps``) releases.
* DPSWflow (Algorithm 2): ``num_projections`` directions are drawn ONCE, the projections of the
  whole private set are noised ONCE (one Gaussian mechanism, sample rate 1, N public: replace-one
  neighbours, recorded once at step 0 — a resume never repeats it) and
  its quantile function is computed once; each step subsamples ``projections_per_step`` of these
  directions (fresh, without replacement — the released code reuses one multinomial draw) and
  re-noises only the particles.  Nothing private is touched after the release ("free" steps).
  The released code re-noises the private projections at every step; that is not covered by
  the one-shot analysis and is not done here.
* DPSWgen (DPSWflow paper, DPSWgen baseline): DP-SWD between a private latent batch and generated latents at every step, as
  ``DPSWDGenerator`` does in pixel space; accounting as DPSWflow-r.

Noise: with ``private=true`` the std is calibrated for ``accountant.epsilon`` (union-bound delta
split; ``privacy.dpswflow``).  ``private=false`` gives epsilon = infinity; ``noise_std`` then only
smooths (the toy of Fig. 1, sigma in {0, 0.5, 1}).

Labels (``label_mode``): ``partition`` (default of all three) releases the private rows split
by label into C blocks of a PUBLIC size (``rows.class_blocks``: cut to a random subset / padded with the
zero row) stacked as ONE release; each class's particles (or the conditional generator's rows of that
label) are transported toward their own block only, so the label enters at first order.  Per-step
releases (DPSWflow-r, DPSWgen): blocks of ``ceil(B / C)`` rows, add/remove under Poisson (refused under
``without_replacement``), one row of one block changes: the calibration of an unpartitioned batch.
DPSWflow's one-shot release: blocks of ``ceil(block_slack N / C)`` rows, replace-one (N public), two
rows of two blocks change: sensitivity times sqrt(2) (``OneShotProjectionRelease(class_blocks=True)``).
``concat`` appends ``label_weight * onehot(y)`` to the unit
latent and rescales the row to norm 1, so one flow transports labelled rows (as DP-SWD's
``label_mode=concat``); a synthetic sample's label is the argmax of its label part.  ``none``
flows the latents only (the paper's d = 8; unlabelled data such as CelebA); labels are then
meaningless for downstream accuracy.

Generation (``sample``): the flows return decoded final particles.  For ``n`` larger than the
particle count, particles are drawn with replacement (among those whose label part has the
requested argmax) and perturbed by ``sample_jitter`` Gaussian noise in latent space; the
image part of every latent is put back on the unit sphere (the decoder's training domain) before
decoding.  DPSWgen draws fresh generator samples and keeps those of the requested label.

Randomness: sampling, directions and noise are seeded from OS entropy unless
``trainer.deterministic=true``; checkpoints hold RNG states and are as sensitive as the data.
``release.pt`` (weights-only artefact: final particles or the latent generator, and the public AE)
is what may be published; ``restore`` rebuilds a sampler from it.  The training loop is ``methods.loop``.
The autoencoder is trained from ``seed`` on public data (cacheable in ``autoencoder_cache``).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data import DataSplits, PrivateSplit
from ..data.representations import build_representation
from ..ot.flows import (
    empirical_quantiles,
    euler_maruyama_step,
    quantile_levels,
    sliced_flow_drift,
    smoothed_projections,
)
from ..ot.sliced import gaussian_projection_release, sliced_wasserstein_blocks
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.conventions import PaperConvention, as_convention, true_epsilon
from ..privacy.dpswflow import (
    ROW_DIAMETER,
    analytic_gaussian_epsilon,
    paper_flow_noise_std,
    paper_one_shot_sigma,
)
from ..privacy.mechanisms import GaussianProjectionRelease, OneShotProjectionRelease
from ..privacy.rows import class_blocks, clip_rows, fixed_size, unit_normalise
from ..privacy.sensitivity import l2_sensitivity
from ..utils import autocast, load_checkpoint
from .base import GenerativeMethod, NonFiniteLossError, TrainContext, mechanism_seed, secret_seed
from .loop import progress_bar, save_public_artifact


# ---------------------------------------------------------------------------------------------
class LatentSpace:
    """Public map records <-> latent rows in the unit ball of R^D (D = d, or d + K with labels).

    ``rows(x, y) = clip_1( [ a * e(x) || b * onehot(y) ] )``, ``e(x)`` = frozen encoder output
    normalised to norm 1 (or, with a linear ``Representation`` ``rep`` (PCA of the PUBLIC
    split or a fixed DCT basis), ``rep.encode(x) / rep.radius``: codes clipped to the public radius r,
    so norm <= 1; or ``flatten(x) / latent_scale`` without either, e.g. the 2-D toy),
    ``a = 1 / sqrt(1 + w^2)``, ``b = w a`` (``w = label_weight``).  ``clip=False`` (allowed only
    for non-private runs without autoencoder: the toy flows in data units) skips the final clip.
    """

    def __init__(self, ae: torch.nn.Module | None, image_shape: tuple[int, ...], n_classes: int, label_mode: str,
                 label_weight: float, latent_scale: float, clip: bool = True, rep=None) -> None:
        if label_mode not in ("concat", "none"):
            raise ValueError(f"model.label_mode must be 'concat' or 'none', got {label_mode!r}")
        if latent_scale <= 0:
            raise ValueError(f"model.latent_scale must be > 0, got {latent_scale}")
        self.ae, self.image_shape, self.n_classes = ae, tuple(image_shape), int(n_classes)
        self.label_mode, self.w, self.latent_scale = label_mode, float(label_weight), float(latent_scale)
        self.rep = rep
        self.d = ae.latent_dim if ae is not None else rep.dim if rep is not None else int(torch.tensor(image_shape).prod())
        self.dim = self.d + (self.n_classes if label_mode == "concat" else 0)
        self.a = 1.0 / math.sqrt(1.0 + self.w**2) if label_mode == "concat" else 1.0
        self.clip = bool(clip)  # False only for non-private runs without AE (the toy in data units)

    @torch.no_grad()
    def latents(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (n, C, H, W)`` -> ``(n, d)`` of norm <= 1 (exactly 1 with an autoencoder)."""
        if self.rep is not None:  # clip_r((x - c) V) / r: norm <= 1, a fixed public per-record map
            return clip_rows(self.rep.encode(x).to(torch.float32) / self.rep.radius, 1.0)
        if self.ae is None:
            z = x.flatten(1) / self.latent_scale
            return clip_rows(z, 1.0) if self.clip else z
        self.ae.eval()  # BatchNorm running statistics: a fixed per-record map
        return unit_normalise(self.ae.encode(x))

    @torch.no_grad()
    def rows(self, x: torch.Tensor, y: torch.Tensor | None) -> torch.Tensor:
        """``(n, D)`` rows of norm <= 1 (the sensitivity assumption, enforced by the final clip)."""
        z = self.latents(x)
        if self.label_mode == "concat":
            z = torch.cat([self.a * z, (self.w * self.a) * F.one_hot(y, self.n_classes).to(z.dtype)], dim=1)
        return clip_rows(z, 1.0) if self.clip else z

    def labels(self, rows: torch.Tensor) -> torch.Tensor | None:
        """Argmax of the label part (``None`` with ``label_mode=none``)."""
        if self.label_mode != "concat":
            return None
        return rows[:, self.d:].argmax(dim=1)

    @torch.no_grad()
    def decode(self, rows: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
        """Latent rows ``(n, D)`` -> images ``(n, *image_shape)`` (cpu)."""
        z = rows[:, :self.d]
        if self.rep is not None:
            return self.rep.decode((z * self.rep.radius).cpu())
        if self.ae is None:
            return (z * self.latent_scale).reshape(-1, *self.image_shape).cpu()
        self.ae.eval()
        z = unit_normalise(z)  # back onto the decoder's training domain (the image part only)
        return torch.cat([self.ae.decode(z[i:i + batch_size]).cpu() for i in range(0, z.shape[0], batch_size)])


def train_autoencoder(ae: torch.nn.Module, x_public: torch.Tensor, *, steps: int, batch_size: int, lr: float,
                      device: torch.device, seed: int, ctx: TrainContext) -> float:
    """MSE autoencoder training on PUBLIC images only (DPSWflow paper, autoencoder: Adam, no weight decay).  Returns the
    mean loss over the last 50 steps."""
    g = torch.Generator().manual_seed(seed + 17)
    opt = torch.optim.Adam(ae.parameters(), lr=lr)
    ae.train()
    losses: list[float] = []
    with progress_bar("autoencoder (public)", ctx) as bar:
        task = bar.add_task("ae", total=steps, info="")
        for step in range(steps):
            idx = torch.randint(x_public.shape[0], (min(batch_size, x_public.shape[0]),), generator=g)
            x = x_public[idx].to(device)
            loss = F.mse_loss(ae(x), x)
            if not torch.isfinite(loss):  # public data: a plain check
                raise NonFiniteLossError(step, "autoencoder loss")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
            if (step + 1) % 50 == 0 or step + 1 == steps:
                bar.update(task, completed=step + 1, info=f"mse {sum(losses[-50:]) / len(losses[-50:]):.4f}")
    ae.eval()
    return sum(losses[-50:]) / max(len(losses[-50:]), 1)


# ---------------------------------------------------------------------------------------------
class _LatentMethod(GenerativeMethod):
    """Autoencoder set-up, latent rows, private batches, the per-step release and sampling shared by all three."""

    kind = "latent"

    def __init__(self, autoencoder: Callable[..., torch.nn.Module] | None = None, ae_steps: int = 5000,
                 ae_batch_size: int = 250, ae_lr: float = 1e-3, autoencoder_cache: str | None = None,
                 num_projections: int = 70, batch_size: int = 250, epochs: int = 35, steps: int | None = None,
                 bound: str = "chernoff", private: bool = True, noise_std: float = 0.0,
                 sensitivity_fraction: float = 0.5, label_mode: str = "partition", label_weight: float = 1.0,
                 latent_scale: float = 1.0, sample_jitter: float = 0.02, directions: str = "random",
                 representation: dict | None = None, convention: PaperConvention | dict | None = None) -> None:
        # privacy.convention=paper: the released code's noise (CLT sensitivity at delta/2), labelled, epsilon_true
        self.convention = as_convention(convention)
        if self.convention is not None and not private:
            raise ValueError("privacy.convention=paper reproduces a private run: drop model.private=false")
        if directions not in ("random", "orthogonal"):
            raise ValueError(f"model.directions must be 'random' or 'orthogonal', got {directions!r}")
        self.directions = directions  # orthogonal: exact sensitivity 2 sqrt(ceil(k/d)), no beta
        self.make_ae = autoencoder
        if representation is not None and autoencoder is not None:
            raise ValueError("model.representation (a public linear map: pca / dct) replaces the autoencoder: set "
                             "model.autoencoder=null")
        self.rep_cfg = None if representation is None else dict(representation)
        self.ae_steps, self.ae_batch_size, self.ae_lr = int(ae_steps), int(ae_batch_size), float(ae_lr)
        self.ae_cache = autoencoder_cache
        self.k, self.batch_size, self.epochs = int(num_projections), int(batch_size), int(epochs)
        self.steps = None if steps is None else int(steps)
        if bound not in ("bernstein", "bernstein_code", "clt", "chernoff"):
            raise ValueError(f"model.bound={bound!r} is unknown; choose bernstein, bernstein_code, clt or chernoff")
        self.bound, self.private, self.noise_std_arg = bound, bool(private), float(noise_std)
        if self.private and self.noise_std_arg != 0.0:
            raise ValueError("model.noise_std is the smoothing of a NON-private run (model.private=false); a private "
                             "run calibrates the noise from accountant.epsilon: drop model.noise_std")
        if self.noise_std_arg < 0:
            raise ValueError(f"model.noise_std must be >= 0, got {noise_std}")
        self.sensitivity_fraction = float(sensitivity_fraction)
        if label_mode not in ("partition", "concat", "none"):
            raise ValueError(f"model.label_mode must be 'partition', 'concat' or 'none', got {label_mode!r}")
        self.label_mode, self.label_weight, self.latent_scale = label_mode, float(label_weight), float(latent_scale)
        self.sample_jitter = float(sample_jitter)
        self.space: LatentSpace | None = None
        self.device, self.precision = torch.device("cpu"), "32"
        self.ae_info: dict = {}

    # -- schedule ------------------------------------------------------------------------
    def steps_planned(self, n_private: int) -> int:
        """``steps`` if given, else ``epochs * ceil(N / B)`` private batches."""
        return self.steps if self.steps is not None else self.epochs * math.ceil(n_private / self.batch_size)

    @property
    def total_steps(self) -> int:
        return self._steps

    # -- autoencoder ---------------------------------------------------------------------
    def _ae_key(self, data: DataSplits, ae: torch.nn.Module, seed: int) -> str:
        pub = data.public
        fp = (data.name, len(pub), round(float(pub.x.double().sum()), 4), repr(ae), self.ae_steps, self.ae_batch_size,
              self.ae_lr, seed)
        return hashlib.sha1(repr(fp).encode()).hexdigest()[:16]

    def _setup_latent(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        """The frozen public AE (trained, cached, or from the resume checkpoint) and the latent space."""
        self.device, self.precision = ctx.device, ctx.precision
        self._signature = {"n_private": len(data.private), "dataset": data.name,
                           "n_public": 0 if data.public is None else len(data.public), "batch_size": self.batch_size,
                           "k": self.k, "steps": self.steps_planned(len(data.private)), "bound": self.bound,
                           "label_mode": self.label_mode, "sampling": ledger.sampling, "private": self.private}
        ae_state = (ctx.resume_state or {}).get("autoencoder")
        ae = None
        if self.make_ae is not None:
            if data.public is None:
                raise ValueError("the autoencoder is trained on public images only: set dataset.public_fraction > 0 "
                                 "(the DPSWflow presets use dataset.public_fraction=0.5)")
            torch.manual_seed(ctx.seed)  # public data, public seed: a reproducible AE (init and training)
            ae = self.make_ae(image_shape=data.image_shape).to(ctx.device)
            if ae_state is not None:  # resume: the same frozen AE
                ae.load_state_dict(ae_state)
                self.ae_info = {"ae_source": "checkpoint"}
            else:
                key = self._ae_key(data, ae, ctx.seed)
                cache = Path(self.ae_cache) / f"ae_{data.name}_{key}.pt" if self.ae_cache else None
                if cache is not None and cache.exists():
                    ck = load_checkpoint(cache)
                    ae.load_state_dict(ck["state_dict"])
                    self.ae_info = {"ae_source": f"cache {cache}", "ae_mse": ck["mse"], "ae_steps": ck["steps"]}
                else:
                    t0 = time.time()
                    mse = train_autoencoder(ae, data.public.x, steps=self.ae_steps, batch_size=self.ae_batch_size,
                                            lr=self.ae_lr, device=ctx.device, seed=ctx.seed, ctx=ctx)
                    self.ae_info = {"ae_source": "trained", "ae_mse": mse, "ae_steps": self.ae_steps,
                                    "ae_train_time_s": time.time() - t0}
                    if cache is not None:
                        save_public_artifact({"state_dict": ae.state_dict(), "mse": mse, "steps": self.ae_steps},
                                             cache)
            ae.eval()
            for p in ae.parameters():
                p.requires_grad_(False)
            with torch.no_grad():  # public reconstructions, for a person to look at
                xp = data.public.x[:16].to(ctx.device)
                ctx.logger.log_images("autoencoder_public_reconstructions", torch.cat([xp, ae(xp)]).cpu(), nrow=16)
                self.ae_info["ae_test_mse"] = float(F.mse_loss(ae(data.test.x[:1000].to(ctx.device)),
                                                               data.test.x[:1000].to(ctx.device)))
        self.space = LatentSpace(ae, data.image_shape, data.num_classes, self._row_label_mode(), self.label_weight,
                                 self.latent_scale, clip=self.private or ae is not None, rep=self._representation(data))

    def _representation(self, data: DataSplits):
        """The public linear representation (``model.representation``), built from the PUBLIC split only."""
        if self.rep_cfg is None:
            return None
        cfg = dict(self.rep_cfg)
        rep = build_representation(cfg.pop("kind", "dct"), data.image_shape, data.value_range,
                                   public_x=None if data.public is None else data.public.x, **cfg)
        self.ae_info = {**self.ae_info, "representation": rep.kind, "code_dim": rep.dim, "code_radius": rep.radius}
        return rep

    def _row_label_mode(self) -> str:
        """Rows carry no label with ``partition`` (the label decides the block instead)."""
        return "none" if self.label_mode == "partition" else self.label_mode

    def _secret_seed(self, ctx: TrainContext) -> None:
        if ctx.deterministic:
            torch.manual_seed(ctx.seed + 3)
        self._seed = secret_seed(ctx)  # secret sampler seed; reseeds torch (directions, noise) unless deterministic

    def restore(self, data: DataSplits, artefact: str | Path, device: torch.device | str = "cpu") -> None:
        """Rebuild a trained model for ``sample`` from a run's ``release.pt`` (or ``checkpoints/last.pt``);
        no private data is read."""
        self.device = torch.device(device)
        ck = load_checkpoint(artefact)
        state = ck.get("method", ck)
        ae = None
        if self.make_ae is not None:
            ae = self.make_ae(image_shape=data.image_shape).to(self.device)
            ae.load_state_dict(state["autoencoder"])
            ae.eval()
        self.space = LatentSpace(ae, data.image_shape, data.num_classes, self._row_label_mode(), self.label_weight,
                                 self.latent_scale, clip=self.private or ae is not None, rep=self._representation(data))
        self._restore_state(state)

    def _restore_state(self, state: dict) -> None:
        raise NotImplementedError

    def _ae_state(self) -> dict:
        return {"autoencoder": None if self.space.ae is None else self.space.ae.state_dict()}

    # -- private data --------------------------------------------------------------------
    def _encode_private(self, data: DataSplits, seed: int, chunk: int = 1000) -> PrivateSplit:
        """Every private record -> its latent row, once (the paper's ``train_set_encoding.pt``, kept in memory).

        The encoder is a fixed per-record public map, so encoding the whole set and then sampling rows is the
        same mechanism as sampling records and then encoding them.  The records are read through a
        PrivateSampler with q = 1 (this reads, it releases nothing); the result is again a PrivateSplit,
        readable only through a PrivateSampler.
        """
        n = len(data.private)
        x, y = PrivateSampler(data.private, n, "without_replacement", seed=seed).sample()
        rows = torch.cat([self.space.rows(x[i:i + chunk].to(self.device), y[i:i + chunk].to(self.device)).cpu()
                          for i in range(0, n, chunk)])
        return PrivateSplit(rows, y)

    def _private_rows(self) -> torch.Tensor:
        """One private batch of latent rows (norm <= 1) -> exactly B rows on the device (fixed-size release)."""
        rows, _ = self.sampler.sample()
        return fixed_size(rows.to(self.device), self.batch_size)  # padding rows are public zeros (distance <= 1)

    def _per_step_release(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        """Sampler of latent rows and the per-step subsampled release (DPSWflow-r, DPSWgen, DPSWflow paper, accounting of DPSWflow-r / DPSWgen):
        unit-norm rows (row diameter 2), union-bound delta split, N + 1 partners under Poisson."""
        if self.label_mode == "partition" and ledger.sampling != "poisson":
            raise ValueError("model.label_mode=partition of a per-step release is accounted under add/remove "
                             "neighbours: use accountant.sampling=poisson (or model.label_mode=concat)")
        if self.label_mode == "partition" and self.batch_size < self.space.n_classes:
            raise ValueError(f"model.label_mode=partition needs model.batch_size >= {self.space.n_classes} (classes)")
        n_priv = len(data.private)
        self.sampler = PrivateSampler(self._encode_private(data, self._seed + 1), self.batch_size, ledger.sampling,
                                      seed=self._seed)
        self._steps = self.steps_planned(n_priv)
        self.projection = GaussianProjectionRelease(
            ledger, dim=self.space.dim, num_projections=self.k, steps=self._steps,
            sample_rate=self.sampler.sample_rate, n_private=n_priv, bound=self.bound,
            sensitivity_fraction=self.sensitivity_fraction, row_diameter=ROW_DIAMETER, private=self.private,
            seed=mechanism_seed(ctx), directions=self.directions)
        self._set_noise(self.projection, ledger, self._steps)
        self.mechanisms = {"projection": self.projection}

    def _set_noise(self, mech: GaussianProjectionRelease, ledger: PrivacyLedger, steps: int) -> None:
        if not self.private:
            mech.set_noise_std(self.noise_std_arg)  # smoothing of a non-private run (eps = inf)
            return
        if self.convention is not None:  # the released code's noise std, against the sensitivity it assumes
            mech.paper_convention = True
            k, delta = self.k, ledger.delta
            d = self.convention.sensitivity_dim or self.space.dim  # DPSWgen's code: C·W² = 1024, not d (DPSWflow paper, DPSWgen baseline)
            if self.convention.sensitivity_dim:
                mech.set_stated_dim(d)
            mech.fix_noise_std(paper_one_shot_sigma(self.convention.epsilon, delta, d, k)  # c S / eps (DPSWflow paper, one-shot release of Alg. 2)
                               if isinstance(mech, OneShotProjectionRelease)
                               else paper_flow_noise_std(self.convention.sigma, d, k, delta))  # sigma 2 sqrt(w_CLT)
            return
        if ledger.target_epsilon is None:
            raise ValueError("model.private=true needs accountant.epsilon (or model.private=false for eps = inf)")
        mech.calibrate(steps)

    def signature(self) -> dict:
        return self._signature

    def _released_mechanism(self) -> GaussianProjectionRelease:
        return self.one_shot if isinstance(self, DPSWFlow) else self.projection

    def convention_report(self) -> dict | None:
        """``privacy.convention=paper``: the same noise under the RIGOROUS (Chernoff) bound for the same unit
        latents (diameter 2, same beta and partners): the CLT bound the paper's sigma assumes is asymptotic."""
        if self.convention is None:
            return None
        mech = self._released_mechanism()
        s_true = l2_sensitivity(mech.k, mech.dim, mech.beta / mech.partners(mech.relation), "chernoff", ROW_DIAMETER)
        true = true_epsilon(mech.noise_std, s_true, sample_rate=mech.sample_rate, steps=mech.releases,
                            delta=mech.ledger.delta, sampling=mech.ledger.sampling, delta_per_step=mech.beta,
                            relation=mech.relation, calibrate_with=mech.ledger.calibrate_with)
        return {"convention": "paper", "paper_epsilon": self.convention.epsilon, "paper_sigma": self.convention.sigma,
                **({"paper_sensitivity_dim": self.convention.sensitivity_dim} if self.convention.sensitivity_dim else {}),
                "sensitivity_stated": mech.sensitivity, **true,
                "epsilon_true_note": f"the released code's noise (std {mech.noise_std:.4g}) under the rigorous Chernoff "
                                     f"sensitivity of unit latents in d = {mech.dim} (stated: {self.bound} bound"
                                     + (f" at dim {self.convention.sensitivity_dim}, as the released code evaluates it"
                                        if self.convention.sensitivity_dim else "") + ")"}

    def _log_particles_png(self, ctx: TrainContext, x: torch.Tensor) -> None:
        """2-D latent without autoencoder (the toy): scatter of particles over the (public) test set."""
        if self.space is None or self.space.ae is not None or self.space.d != 2:
            return
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(4, 4))
        t = self._test_x.flatten(1)
        ax.scatter(t[:, 0], t[:, 1], s=2, c="0.7", label="test sample of the target")
        p = self.space.decode(x).flatten(1)
        ax.scatter(p[:, 0], p[:, 1], s=2, c="C3", label="particles")
        ax.legend(loc="upper right", fontsize=7)
        fig.tight_layout()
        fig.savefig(ctx.run_dir / "particles.png", dpi=120)
        plt.close(fig)

    def _summary(self, mech) -> dict:
        return {"noise_std": mech.noise_std, "noise_multiplier": mech.noise_multiplier, "sensitivity": mech.sensitivity,
                "sensitivity_bound": mech.bound if self.private else None, "guarantee": mech.guarantee,
                "latent_dim": self.space.d, "row_dim": self.space.dim, "num_projections": self.k, **self.ae_info}


# ---------------------------------------------------------------------------------------------
class _ParticleFlow(_LatentMethod):
    """Particles, their update and the sampling of decoded particles (shared by both flows)."""

    def __init__(self, n_particles: int = 10000, step_size: float = 3.0, reg: float = 0.0,
                 num_percentiles: int = 30000, **kw) -> None:
        super().__init__(**kw)
        self.n_particles, self.h, self.reg = int(n_particles), float(step_size), float(reg)
        self.m = int(num_percentiles)
        if self.n_particles < 2:
            raise ValueError(f"model.n_particles must be >= 2, got {n_particles}")
        if self.h <= 0 or self.reg < 0:
            raise ValueError(f"model.step_size must be > 0 and model.reg >= 0, got {step_size}, {reg}")
        self.X: torch.Tensor | None = None
        self._pool_gen = torch.Generator().manual_seed(0)

    def _restore_state(self, state: dict) -> None:
        self.X = state["particles"].to(self.device)
        self.particle_labels = (torch.arange(self.X.shape[0]) % self.space.n_classes
                                if self.label_mode == "partition" else None)

    def _init_particles(self, data: DataSplits) -> None:
        """``X_0 ~ mu_0 = N(0, I_D)`` (DPSWflow paper, the particle flow; not put on the sphere); quantile levels; the public test set
        for the toy's plot."""
        self.levels = quantile_levels(self.m, device=self.device)
        self.X = torch.randn(self.n_particles, self.space.dim, device=self.device)
        if self.label_mode == "partition" and self.n_particles < self.space.n_classes:
            raise ValueError(f"model.label_mode=partition needs model.n_particles >= {self.space.n_classes} (classes)")
        # partition: particle i belongs to class i mod C for the whole run (public, fixed)
        self.particle_labels = (torch.arange(self.n_particles) % self.space.n_classes
                                if self.label_mode == "partition" else None)
        # the particles of each class (public indices, found once on the host: no sync in the steps)
        self._class_idx = [torch.arange(c, self.n_particles, self.space.n_classes, device=self.device)
                           for c in range(self.space.n_classes)] if self.label_mode == "partition" else None
        self._test_x = data.test.x

    def _move(self, u: torch.Tensor, tq: torch.Tensor, sigma: float, step: int,
              idx: torch.Tensor | None = None) -> torch.Tensor:
        """Particle update (Algorithms 1-2, last lines) of all particles or of ``idx``; returns the mean drift
        norm (0-d tensor, NaN when a moved particle is not finite: the loop raises at its next check)."""
        x = self.X if idx is None else self.X[idx]
        proj = smoothed_projections(x, u, sigma)                      # X U + Z (particles re-noised, public)
        v = sliced_flow_drift(proj, tq, self.levels, u)               # Eq. 20
        x_new = euler_maruyama_step(x, v, self.h, self.reg)           # X - h v + sqrt(2 lambda h) Z
        if idx is None:
            self.X = x_new
        else:
            self.X[idx] = x_new
        # particles are public (post-processing of the releases); no host sync here: a non-finite
        # particle turns the drift value into NaN, which the loop's non-finite check reports
        finite = torch.isfinite(x_new).all()
        return torch.where(finite, v.norm(dim=1).mean(), torch.full((), float("nan"), device=v.device))

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
        self._log_particles_png(ctx, self.X)

    def train_summary(self) -> dict:
        out = {**self._summary(self._main_mechanism()), "n_particles": self.n_particles,
               "final_drift_norm": float(self._last_drift)}
        if self.space.labels(self.X) is not None:
            counts = torch.bincount(self.space.labels(self.X).cpu(), minlength=self.space.n_classes)
            out["particle_label_fractions"] = (counts.float() / counts.sum()).tolist()
        return out

    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        if self.X is None:
            raise RuntimeError("call fit() before sample()")
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
                if self.label_mode == "partition" and self.space.ae is not None \
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
        if self.sample_jitter > 0 and n > self.X.shape[0]:
            z = z + self.sample_jitter * torch.randn(z.shape, generator=self._pool_gen).to(z.device)
        return self.space.decode(z, batch_size), labels.cpu()


# ---------------------------------------------------------------------------------------------
class DPSWFlowR(_ParticleFlow):
    """DPSWflow-r (Algorithm 1): fresh directions and a fresh private batch every step."""

    name = "DPSWflow-r"

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self._setup_latent(data, ledger, ctx)
        self._secret_seed(ctx)
        self._per_step_release(data, ledger, ctx)
        self._init_particles(data)
        self._last_drift = float("nan")

    def _main_mechanism(self):
        return self.projection

    def step(self, t: int) -> dict:
        """Algorithm 1, one step."""
        if self.label_mode == "partition":
            return self._partition_step(t)
        with torch.no_grad():
            rows = self._private_rows()                                       # Y_t: (B, D), norm <= 1
            u = self.projection.draw_directions(self.device)  # U_t: fresh directions (random or orthonormal)
            a = self.projection.release(rows, u)                             # A_t = Y_t U_t + Z_t (recorded)
            tq = empirical_quantiles(a.transpose(0, 1).contiguous(), self.levels)  # target inverse CDF (Eq. 21)
            self._last_drift = self._move(u, tq, self.projection.noise_std, t)
        return {"drift_norm": self._last_drift}

    @torch.no_grad()
    def _partition_step(self, t: int) -> dict:
        """Class-partitioned Algorithm 1: the Poisson batch split by label into C blocks of
        m = ceil(B / C) latent rows (``rows.class_blocks``), released as ONE stacked (C m, D) projection;
        the particles of class c flow toward block c's noisy quantiles.  Add/remove changes one row of one
        block by <= 2 (unit latents): the calibration of an unpartitioned batch of C m rows applies."""
        c_n = self.space.n_classes
        m = math.ceil(self.batch_size / c_n)
        rows, y = self.sampler.sample()
        blocks = class_blocks(rows.to(self.device), y, c_n, m)              # (C m, D), norm <= 1
        u = self.projection.draw_directions(self.device)
        a = self.projection.release(blocks, u)                              # THE release of the step (recorded)
        drifts = []
        for c in range(c_n):
            tq = empirical_quantiles(a[c * m:(c + 1) * m].transpose(0, 1).contiguous(), self.levels)
            drifts.append(self._move(u, tq, self.projection.noise_std, t, self._class_idx[c]))
        self._last_drift = torch.stack(drifts).mean()
        return {"drift_norm": self._last_drift}

    def train_summary(self) -> dict:
        return {**super().train_summary(), "sample_rate": self.projection.sample_rate}


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

    def __init__(self, projections_per_step: int = 25, calibration: str = "rdp", block_slack: float = 1.0,
                 **kw) -> None:
        kw.setdefault("num_projections", 31)
        kw.setdefault("steps", 1500)
        super().__init__(**kw)
        if not block_slack > 0:
            raise ValueError(f"model.block_slack must be > 0 (block size m = ceil(block_slack * N / C)), got "
                             f"{block_slack}")
        self.block_slack = float(block_slack)
        self.m_theta = int(projections_per_step)
        if not 1 <= self.m_theta <= self.k:
            raise ValueError(f"model.projections_per_step must be in [1, num_projections={self.k}], got "
                             f"{projections_per_step}")
        if calibration not in ("rdp", "analytic"):
            raise ValueError(f"model.calibration={calibration!r}: choose rdp (the ledger's accountant) or analytic "
                             "(exact Gaussian mechanism); the paper's classic formula is not a valid bound at "
                             "eps = 10 (dpgen/reproduce/dpswflow_sigma_table.py)")
        self.calibration = calibration
        self.u_all: torch.Tensor | None = None
        self.tq_all: torch.Tensor | None = None

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self._setup_latent(data, ledger, ctx)
        self._secret_seed(ctx)
        self._signature.update({"m_theta": self.m_theta, "calibration": self.calibration,
                                "block_slack": self.block_slack})
        self._steps = self.steps_planned(len(data.private))
        n_priv, c_n = len(data.private), data.num_classes
        self.block_rows = math.ceil(self.block_slack * n_priv / c_n) if self.label_mode == "partition" else None
        self.one_shot = OneShotProjectionRelease(ledger, dim=self.space.dim, num_projections=self.k, bound=self.bound,
                                                 sensitivity_fraction=self.sensitivity_fraction,
                                                 calibration=self.calibration, private=self.private,
                                                 seed=mechanism_seed(ctx), directions=self.directions,
                                                 class_blocks=self.label_mode == "partition", n_private=n_priv)
        self._set_noise(self.one_shot, ledger, 1)
        self.mechanisms = {"one_shot": self.one_shot}
        if self.private and ctx.resume_state is None:  # refuse early if the single release cannot fit
            acct = self.one_shot.accountant
            if ledger.allowance_for([self.one_shot.ledger_entry()], acct, at_most=1) < 1:
                raise ValueError(f"the one-shot release would exceed accountant.epsilon = {ledger.target_epsilon} "
                                 f"({acct}); raise accountant.epsilon")
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
        if self.label_mode == "partition":
            rows = class_blocks(rows, y, self.space.n_classes, self.block_rows)  # (C m, D): public sizes
        self.u_all = self.one_shot.draw_directions(self.device)  # drawn once (random or orthonormal)
        a = self.one_shot.release(rows, self.u_all)  # THE private release (recorded)
        if self.label_mode == "partition":
            m = self.block_rows
            self.tq_all = torch.stack([empirical_quantiles(a[c * m:(c + 1) * m].transpose(0, 1).contiguous(),
                                                           self.levels) for c in range(self.space.n_classes)])
        else:
            self.tq_all = empirical_quantiles(a.transpose(0, 1).contiguous(), self.levels)  # (k, M), once

    def step(self, t: int) -> dict:
        """Algorithm 2: the release at t = 0, then free steps on M_theta of the N_theta released directions
        (partition: the particles of class c toward block c's quantiles, the same directions for all)."""
        with torch.no_grad():
            if t == 0:
                self._one_shot_release()
            idx = torch.randperm(self.k, device=self.device)[:self.m_theta]  # M_theta of the N_theta directions
            u, sigma = self.u_all[:, idx], self.one_shot.noise_std
            if self.label_mode != "partition":
                self._last_drift = self._move(u, self.tq_all[idx], sigma, t)
            else:
                drifts = [self._move(u, self.tq_all[c][idx], sigma, t, self._class_idx[c])
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
        if self.private:
            o = self.one_shot
            out.update({"one_shot_epsilon_exact": analytic_gaussian_epsilon(
                o.noise_multiplier, o.ledger.delta - o.beta), "one_shot_calibration": self.calibration})
        return out


# ---------------------------------------------------------------------------------------------
class DPSWGen(_LatentMethod):
    """DPSWgen baseline (DPSWflow paper, DPSWgen baseline): latent MLP generator trained with DP-SWD against private latent batches.

    ``label_mode=partition`` (default; as ``DPSWDGenerator``): the generator is conditional
    (input ``[z || onehot(c)]``, ``z: (n, d_code)``); each Poisson batch is split by label into C blocks
    of ``m = ceil(B / C)`` unit latents (``rows.class_blocks``), stacked ``(C m, D)`` and released as ONE
    ``GaussianProjectionRelease``; the loss is ``(mean_c SW_2^2(G(z, c) U + Z_s, block_c U + Z_t))^{1/2}``
    (``ot.sliced_wasserstein_blocks``).  Relation add/remove (Poisson, enforced: refused under
    ``without_replacement``): adding or removing (x, y) changes one row of block y by <= 2 (a padding zero
    becomes x, or x replaces a random kept row: N + 1 partners), so the calibration is that of an
    unpartitioned batch (row diameter 2, ``directions`` as chosen).
    """

    name = "DPSWgen"

    def __init__(self, generator: Callable[..., torch.nn.Module], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), d_code: int | None = None, **kw) -> None:
        kw.setdefault("sample_jitter", 0.0)
        super().__init__(**kw)
        self.make_generator, self.lr, self.betas, self.d_code = generator, float(lr), tuple(betas), d_code
        self.G: torch.nn.Module | None = None

    def _make_g(self) -> torch.nn.Module:
        """The latent generator; partition: the label one-hot is appended to its Gaussian input."""
        d = self.space.dim
        self.noise_dim = self.d_code or d
        extra = self.space.n_classes if self.label_mode == "partition" else 0
        return self.make_generator(d_code=self.noise_dim + extra, out_dim=d).to(self.device)

    def _generate(self, labels: torch.Tensor) -> torch.Tensor:
        """``G([z || onehot(y)])`` (partition) or ``G(z)``: ``(n, D)`` latents for ``labels: (n,)``."""
        z = torch.randn(labels.shape[0], self.noise_dim, device=self.device)
        if self.label_mode == "partition":
            z = torch.cat([z, F.one_hot(labels.to(self.device), self.space.n_classes).to(z.dtype)], dim=1)
        return self.G(z)

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self._setup_latent(data, ledger, ctx)
        self.G = self._make_g()
        self.block_rows = math.ceil(self.batch_size / data.num_classes)
        self._secret_seed(ctx)
        self._per_step_release(data, ledger, ctx)
        self.opt = torch.optim.Adam(self.G.parameters(), lr=self.lr, betas=self.betas)
        self.G.train()

    def step(self, t: int) -> dict:
        """DP-SWD in latent space (as ``DPSWDGenerator.step``): one release of the private batch per step."""
        c_n = self.space.n_classes
        if self.label_mode == "partition":
            rows, y = self.sampler.sample()
            rows = class_blocks(rows.to(self.device), y, c_n, self.block_rows)  # Y_t: (C m, D), norm <= 1
            y_g = torch.arange(c_n, device=self.device).repeat_interleave(self.block_rows)  # m rows per label
            with autocast(self.device, self.precision):  # trainer.precision=bf16: the generator forward only
                fake = self._generate(y_g)
        else:
            rows = self._private_rows()                                        # Y_t: (B, D), norm <= 1
            with autocast(self.device, self.precision):  # trainer.precision=bf16: the generator forward only
                fake = self.G(torch.randn(rows.shape[0], self.G.d_code, device=self.device))
        fake = fake.float()  # projections and noise stay float32
        u = self.projection.draw_directions(self.device)                       # U_t: fresh directions
        p_t = self.projection.release(rows, u)                                # Y_t U_t + Z_t (recorded)
        p_s = gaussian_projection_release(fake, u, self.projection.noise_std)  # G(z) U_t + Z'_t (public)
        n_blocks = c_n if self.label_mode == "partition" else 1
        loss = sliced_wasserstein_blocks(p_s, p_t, n_blocks, 2.0)             # SW_2 (within class blocks)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return {"loss": loss.detach()}  # a function of the release and public samples (synced at log cadence)

    def state_dict(self) -> dict:
        return {"generator": self.G.state_dict(), "optimizer": self.opt.state_dict(), **self._ae_state()}

    def load_state_dict(self, state: dict) -> None:
        self.G.load_state_dict(state["generator"])
        self.opt.load_state_dict(state["optimizer"])

    def release_state(self) -> dict:
        return {"generator": self.G.state_dict(), **self._ae_state()}

    def finish(self, ctx: TrainContext) -> None:
        self.G.eval()

    def train_summary(self) -> dict:
        return {**self._summary(self.projection), "sample_rate": self.projection.sample_rate}

    def _restore_state(self, state: dict) -> None:
        self.G = self._make_g()
        self.G.load_state_dict(state["generator"])
        self.G.eval()

    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        if self.G is None:
            raise RuntimeError("call fit() before sample()")
        self.G.eval()
        k = self.space.n_classes
        if labels is None:
            labels = torch.arange(n) % k
        if self.label_mode == "partition":  # the conditional generator, label by label
            z = torch.cat([self._generate(labels[i:i + batch_size]) for i in range(0, n, batch_size)])
            return self.space.decode(z, batch_size), labels.cpu()
        if self.space.label_mode != "concat":
            z = torch.cat([self.G(torch.randn(min(batch_size, n - i), self.G.d_code, device=self.device))
                           for i in range(0, n, batch_size)])
            return self.space.decode(z, batch_size), labels.cpu()
        # keep generated rows whose label part has the requested argmax (rejection, then any row)
        out = torch.empty(n, self.space.dim, device=self.device)
        todo = {c: (labels == c).nonzero().flatten().tolist() for c in labels.unique().tolist()}
        for _ in range(200):
            if not any(todo.values()):
                break
            z = self.G(torch.randn(batch_size, self.G.d_code, device=self.device))
            lab = self.space.labels(z).cpu()
            for c, slots in todo.items():
                hit = (lab == c).nonzero().flatten().tolist()
                take = min(len(hit), len(slots))
                if take:
                    out[slots[:take]] = z[hit[:take]]
                    todo[c] = slots[take:]
        rest = [i for slots in todo.values() for i in slots]
        if rest:
            out[rest] = self.G(torch.randn(len(rest), self.G.d_code, device=self.device))
        return self.space.decode(out, batch_size), labels.cpu()
