"""The latent space shared by DPSWflow-r, DPSWflow and DPSWgen (Sebag et al., TMLR): a public
autoencoder (trained, cached or restored), the map records -> latent rows, and the per-step release.

All three work in the latent space of an autoencoder trained on the PUBLIC split only
(``dataset.public_fraction``, 0.5 in the presets); the AE is then frozen and applied in eval mode.
It is trained from ``seed`` on public data and may be cached in ``autoencoder_cache`` (a file keyed
by the public data, the architecture and the AE settings).  A public linear representation
(``model.representation``: PCA of the public split or a fixed DCT basis) may replace it.

Privacy boundary: private images are touched only in ``LatentMethod._encode_private`` (every record
mapped once to its latent row, nothing released), ``LatentMethod._private_rows`` (a batch from the
PrivateSampler) and ``DPSWFlow._one_shot_release`` (the whole private set, read once through a
PrivateSampler with q = 1).  There each record is mapped by public functions to a row of norm <= 1
(``LatentSpace.rows``: frozen encoder -> unit normalisation (enforced: ``clip_rows``, not assumed)
-> optional scaled one-hot label), so two rows differ by at most 2 (``ROW_DIAMETER``); the rows are
projected on unit directions and released with Gaussian noise through a
``privacy.mechanisms.GaussianProjectionRelease`` (per step) or ``OneShotProjectionRelease`` (once),
which add the noise from their own generator and record the release in the ledger.  Everything
after (quantiles, drift, particle updates, generator gradients, decoding) is post-processing.

Noise: with ``private=true`` the std is calibrated for ``accountant.epsilon`` (union-bound delta
split; ``privacy.dpswflow``).  ``private=false`` gives epsilon = infinity; ``noise_std`` then only
smooths (the toy of Fig. 1, sigma in {0, 0.5, 1}).

Labels (``label_mode``): ``partition`` (the default) releases the private rows split by label into C
blocks of a PUBLIC size (``rows.class_blocks``: cut to a random subset / padded with the zero row)
stacked as ONE release; ``concat`` appends ``label_weight * onehot(y)`` to the unit latent and
rescales the row to norm 1 (a synthetic sample's label is the argmax of its label part); ``none``
carries the latents only (the paper's d = 8; unlabelled data such as CelebA).

Randomness: sampling, directions and noise are seeded from OS entropy unless
``trainer.deterministic=true``; checkpoints hold RNG states and are as sensitive as the data.
``release.pt`` (weights-only artefact: final particles or the latent generator, and the public AE)
is what may be published; ``restore`` rebuilds a sampler from it.  The training loop is ``methods.loop``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..data import DataSplits, PrivateSplit
from ..data.representations import Representation, build_representation
from ..errors import ConfigError
from ..logging.progress import progress_bar
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.conventions import PaperConvention, as_convention, true_epsilon
from ..privacy.dpswflow import ROW_DIAMETER
from ..privacy.mechanisms import GaussianProjectionRelease
from ..privacy.noise import NoiseSettings, PaperProjectionNoise
from ..privacy.projection import ProjectionDP, as_projection_dp
from ..privacy.rows import clip_rows, unit_normalise
from ..privacy.sensitivity import l2_sensitivity
from ..runs import write_atomically
from ..utils import load_checkpoint
from .base import (
    GenerativeMethod,
    NonFiniteLossError,
    TrainContext,
    mechanism_seed,
    secret_seed,
    settle,
)
from .parallel import Share, rank0_result
from .warm_start import as_warm_start


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
    """MSE autoencoder training on PUBLIC images only (DPSWflow paper: Adam, no weight decay).  Returns the
    mean loss over the last 50 steps."""
    g = torch.Generator().manual_seed(seed + 17)
    opt = torch.optim.Adam(ae.parameters(), lr=lr)
    ae.train()
    losses: list[float] = []
    with progress_bar("autoencoder (public)", enabled=ctx.progress) as bar:
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


@dataclass(frozen=True)
class AutoencoderSettings:
    """The public autoencoder's training (``model.ae_steps``, ``ae_batch_size``, ``ae_lr``) and its cache folder
    (``model.autoencoder_cache``; null: no cache)."""

    steps: int = 5000
    batch_size: int = 250
    lr: float = 1e-3
    cache: str | None = "outputs/autoencoders"

    def __post_init__(self) -> None:
        if int(self.steps) < 0 or int(self.batch_size) < 1 or not float(self.lr) > 0:
            raise ValueError(f"model.ae_steps must be >= 0, model.ae_batch_size >= 1 and model.ae_lr > 0, got "
                             f"{self.steps}, {self.batch_size}, {self.lr}")
        settle(self, steps=int(self.steps), batch_size=int(self.batch_size), lr=float(self.lr))


@dataclass(frozen=True)
class LatentSchedule:
    """The private batches (``model.batch_size`` (B)) and their number: ``model.steps`` if given, else
    ``model.epochs * ceil(N / B)``."""

    batch_size: int = 250
    epochs: int = 35
    steps: int | None = None

    def __post_init__(self) -> None:
        if int(self.batch_size) < 1:
            raise ValueError(f"model.batch_size must be >= 1, got {self.batch_size}")
        if int(self.epochs) < 0 or (self.steps is not None and int(self.steps) < 0):
            raise ValueError(f"model.epochs and model.steps must be >= 0, got {self.epochs}, {self.steps}")
        settle(self, batch_size=int(self.batch_size), epochs=int(self.epochs),
               steps=None if self.steps is None else int(self.steps))


@dataclass(frozen=True)
class LatentRows:
    """How labels enter (``model.label_mode``: partition, concat or none; ``label_weight`` w of the one-hot
    part), the scale of a latent without autoencoder (``model.latent_scale``) and the latent noise of a
    drawn-again particle (``model.sample_jitter``)."""

    label_mode: str = "partition"
    label_weight: float = 1.0
    latent_scale: float = 1.0
    sample_jitter: float = 0.02

    def __post_init__(self) -> None:
        if self.label_mode not in ("partition", "concat", "none"):
            raise ValueError(f"model.label_mode must be 'partition', 'concat' or 'none', got {self.label_mode!r}")
        if not float(self.latent_scale) > 0:
            raise ValueError(f"model.latent_scale must be > 0, got {self.latent_scale}")
        if float(self.sample_jitter) < 0:
            raise ValueError(f"model.sample_jitter must be >= 0, got {self.sample_jitter}")
        settle(self, label_weight=float(self.label_weight), latent_scale=float(self.latent_scale),
               sample_jitter=float(self.sample_jitter))


@dataclass(frozen=True)
class LatentPrivacy:
    """``model.private`` (false: epsilon = infinity, ``model.noise_std`` then only smooths), ``model.dp`` (the
    projection release's k, bound, directions, delta share) and ``privacy.convention=paper`` (the released code's
    noise, labelled)."""

    private: bool = True
    noise_std: float = 0.0
    dp: ProjectionDP | None = None
    convention: PaperConvention | None = None

    def __post_init__(self) -> None:
        if float(self.noise_std) < 0:
            raise ValueError(f"model.noise_std must be >= 0, got {self.noise_std}")
        if self.convention is not None and not self.private:
            raise ValueError("privacy.convention=paper reproduces a private run: drop model.private=false")
        settle(self, private=bool(self.private), noise_std=float(self.noise_std))


# ---------------------------------------------------------------------------------------------
class LatentMethod(GenerativeMethod):
    """Autoencoder set-up, latent rows, private batches, the per-step release and sampling shared by all three.

    The flat ``model.<key>`` settings are held in four checked groups: ``ae_settings`` (:class:`AutoencoderSettings`),
    ``schedule`` (:class:`LatentSchedule`), ``latent`` (:class:`LatentRows`) and ``privacy`` (:class:`LatentPrivacy`).
    """

    kind = "latent"
    default_dp = ProjectionDP(num_projections=70, bound="chernoff")  # model.dp when none is given

    def __init__(self, autoencoder: Callable[..., torch.nn.Module] | None = None, ae_steps: int = 5000,
                 ae_batch_size: int = 250, ae_lr: float = 1e-3, autoencoder_cache: str | None = "outputs/autoencoders",
                 dp: ProjectionDP | dict | None = None, batch_size: int = 250, epochs: int = 35,
                 steps: int | None = None, private: bool = True, noise_std: float = 0.0, label_mode: str = "partition",
                 label_weight: float = 1.0, latent_scale: float = 1.0, sample_jitter: float = 0.02,
                 representation: dict | None = None, convention: PaperConvention | dict | None = None,
                 warm_start: dict | None = None) -> None:
        # privacy.convention=paper: the released code's noise (CLT sensitivity at delta/2), labelled, epsilon_true
        self.privacy = LatentPrivacy(private=private, noise_std=noise_std,
                                     dp=as_projection_dp(dp, self.default_dp),  # k, bound, directions, delta share
                                     convention=as_convention(convention))
        self.warm_start = as_warm_start(warm_start)  # methods.warm_start: run by the loop
        if self.warm_start is not None and (self.privacy.convention is not None or not self.privacy.private):
            raise ConfigError("model.warm_start spends a share of an honest private budget: drop "
                              "privacy.convention=paper / model.private=false, or model/warm_start=null")
        self.make_ae = autoencoder
        if representation is not None and autoencoder is not None:
            raise ValueError("model.representation (a public linear map: pca / dct) replaces the autoencoder: set "
                             "model.autoencoder=null")
        self.rep_cfg = None if representation is None else dict(representation)
        self.ae_settings = AutoencoderSettings(steps=ae_steps, batch_size=ae_batch_size, lr=ae_lr,
                                               cache=autoencoder_cache)
        self.schedule = LatentSchedule(batch_size=batch_size, epochs=epochs, steps=steps)
        self.latent = LatentRows(label_mode=label_mode, label_weight=label_weight, latent_scale=latent_scale,
                                 sample_jitter=sample_jitter)
        self.k = self.privacy.dp.num_projections
        self.space: LatentSpace | None = None
        self.device, self.precision = torch.device("cpu"), "32"
        self.ae_info: dict = {}

    # -- schedule ------------------------------------------------------------------------
    def steps_planned(self, n_private: int) -> int:
        """``steps`` if given, else ``epochs * ceil(N / B)`` private batches."""
        s = self.schedule
        return s.steps if s.steps is not None else s.epochs * math.ceil(n_private / s.batch_size)

    @property
    def total_steps(self) -> int:
        return self._steps

    # -- autoencoder ---------------------------------------------------------------------
    def _ae_key(self, data: DataSplits, ae: torch.nn.Module, seed: int) -> str:
        pub = data.public
        a = self.ae_settings
        fp = (data.name, len(pub), round(float(pub.x.double().sum()), 4), repr(ae), a.steps, a.batch_size, a.lr, seed)
        return hashlib.sha1(repr(fp).encode()).hexdigest()[:16]

    def _setup_latent(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        """The frozen public AE (trained, cached, or from the resume checkpoint) and the latent space."""
        self.device, self.precision = ctx.device, ctx.precision
        self._signature = {"n_private": len(data.private), "dataset": data.name,
                           "n_public": 0 if data.public is None else len(data.public), "batch_size": self.schedule.batch_size,
                           "k": self.k, "steps": self.steps_planned(len(data.private)), "bound": self.privacy.dp.bound,
                           "label_mode": self.latent.label_mode, "sampling": ledger.sampling, "private": self.privacy.private}
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
            else:  # several processes: rank 0 reads or trains (and caches) it, every rank loads rank 0's
                state, self.ae_info = rank0_result(lambda: self._read_or_train_ae(ae, data, ctx))
                ae.load_state_dict(state)
            ae.eval()
            for p in ae.parameters():
                p.requires_grad_(False)
            with torch.no_grad():  # public reconstructions, for a person to look at
                xp = data.public.x[:16].to(ctx.device)
                ctx.logger.log_images("autoencoder_public_reconstructions", torch.cat([xp, ae(xp)]).cpu(), nrow=16)
                self.ae_info["ae_test_mse"] = float(F.mse_loss(ae(data.test.x[:1000].to(ctx.device)),
                                                               data.test.x[:1000].to(ctx.device)))
        self.space = LatentSpace(ae, data.image_shape, data.num_classes, self._row_label_mode(),
                                 self.latent.label_weight, self.latent.latent_scale,
                                 clip=self.privacy.private or ae is not None, rep=self._representation(data))

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
        return "none" if self.latent.label_mode == "partition" else self.latent.label_mode

    def _secret_seed(self, ctx: TrainContext) -> None:
        if ctx.deterministic:
            torch.manual_seed(ctx.seed + 3)
        self._seed = secret_seed(ctx)  # secret sampler seed; reseeds torch (directions, noise) unless deterministic

    def restore(self, data: DataSplits, artefact: str | Path, device: torch.device | str = "cpu",
                representation: Representation | None = None) -> None:
        """Rebuild a trained model for ``sample`` from a run's ``release.pt`` (or ``checkpoints/last.pt``);
        no private data is read.  ``representation``: the run's public linear map as its release stored it
        (``model.representation``); ``None`` builds it again from the public split."""
        self.device = torch.device(device)
        ck = load_checkpoint(artefact)
        state = ck.get("method", ck)
        ae = None
        if self.make_ae is not None:
            ae = self.make_ae(image_shape=data.image_shape).to(self.device)
            ae.load_state_dict(state["autoencoder"])
            ae.eval()
        self.space = LatentSpace(ae, data.image_shape, data.num_classes, self._row_label_mode(),
                                 self.latent.label_weight, self.latent.latent_scale, clip=self.privacy.private or ae is not None,
                                 rep=self._representation(data) if representation is None else representation)
        self._restore_state(state)

    def _restore_state(self, state: dict) -> None:
        raise NotImplementedError

    def _ae_state(self) -> dict:
        return {"autoencoder": None if self.space.ae is None else self.space.ae.state_dict()}

    # -- private data --------------------------------------------------------------------
    def _read_or_train_ae(self, ae: torch.nn.Module, data: DataSplits, ctx: TrainContext) -> tuple[dict, dict]:
        """The autoencoder's weights (on the CPU) and how they were obtained: read from the cache, else trained on the
        PUBLIC images (and cached)."""
        key = self._ae_key(data, ae, ctx.seed)
        cache = Path(self.ae_settings.cache) / f"ae_{data.name}_{key}.pt" if self.ae_settings.cache else None
        if cache is not None and cache.exists():
            ck = load_checkpoint(cache)
            ae.load_state_dict(ck["state_dict"])
            info = {"ae_source": f"cache {cache}", "ae_mse": ck["mse"], "ae_steps": ck["steps"]}
        else:
            t0 = time.time()
            mse = train_autoencoder(ae, data.public.x, steps=self.ae_settings.steps, batch_size=self.ae_settings.batch_size,
                                    lr=self.ae_settings.lr, device=ctx.device, seed=ctx.seed, ctx=ctx)
            info = {"ae_source": "trained", "ae_mse": mse, "ae_steps": self.ae_settings.steps,
                    "ae_train_time_s": time.time() - t0}
            if cache is not None:
                write_atomically({"state_dict": ae.state_dict(), "mse": mse, "steps": self.ae_settings.steps},
                                 cache)  # PUBLIC: trained on public images only
        return {k: v.cpu() for k, v in ae.state_dict().items()}, info

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
                          for i in range(0, x.shape[0], chunk)])
        # several processes: each rank encoded its part; the encoded set is the whole set, in order, on every rank
        return PrivateSplit(Share.collect(rows), Share.collect(y))

    def _private_rows(self) -> torch.Tensor:
        """One private batch of latent rows (norm <= 1) -> exactly B rows on the device (fixed-size release,
        formed there by ``PrivateSampler.fixed_batch``: the law of ``rows.fixed_size``, rows shuffled)."""
        rows, _, valid = self.sampler.fixed_batch(self.schedule.batch_size)
        return torch.where(valid[:, None], rows, 0.0)  # padding rows are public zeros (distance <= 1)

    def _private_blocks(self, n_classes: int, block: int) -> torch.Tensor:
        """One Poisson batch of latent rows in C blocks of m (``PrivateSampler.class_batch``: the law of
        ``rows.class_blocks``, each block shuffled), padding rows zero: ``(C m, D)`` on the device, norm <= 1."""
        rows, _, valid = self.sampler.class_batch(n_classes, block)
        return torch.where(valid[:, None], rows, 0.0)

    def _per_step_release(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        """Sampler of latent rows and the per-step subsampled release (DPSWflow-r, DPSWgen; DPSWflow paper, Algorithm 1):
        unit-norm rows (row diameter 2), union-bound delta split, N + 1 partners under Poisson."""
        if self.latent.label_mode == "partition" and ledger.sampling != "poisson":
            raise ValueError("model.label_mode=partition of a per-step release is accounted under add/remove "
                             "neighbours: use accountant.sampling=poisson (or model.label_mode=concat)")
        if self.latent.label_mode == "partition" and self.schedule.batch_size < self.space.n_classes:
            raise ValueError(f"model.label_mode=partition needs model.batch_size >= {self.space.n_classes} (classes)")
        n_priv = len(data.private)
        self.sampler = PrivateSampler(self._encode_private(data, self._seed + 1), self.schedule.batch_size, ledger.sampling,
                                      seed=self._seed, device=ctx.device)  # the encoded private set on the device, once
        self._steps = self.steps_planned(n_priv)
        self.projection = GaussianProjectionRelease(
            ledger, dim=self.space.dim, steps=self._steps, sample_rate=self.sampler.sample_rate, n_private=n_priv,
            row_diameter=ROW_DIAMETER, noise=self.noise, seed=mechanism_seed(ctx),
            device=ctx.device, **self.privacy.dp.release_settings())  # noise and directions drawn on the run's device
        self.mechanisms = {"projection": self.projection}

    def noise_settings(self) -> NoiseSettings:
        """Calibrated, a non-private run's smoothing, or (``privacy.convention=paper``) the released code's std
        against the CLT sensitivity it states (at ``privacy.paper_sensitivity_dim`` when given: DPSWgen's
        C·W² = 1024, not d), which the projection release computes at its k, d and δ."""
        conv = self.privacy.convention
        paper = None if conv is None else PaperProjectionNoise(sigma=conv.sigma, epsilon=conv.epsilon,
                                                               stated_dim=conv.sensitivity_dim)
        return NoiseSettings(private=self.privacy.private, noise_std=self.privacy.noise_std,
                             history=self.warm_start is not None, paper_projection=paper)

    def signature(self) -> dict:
        return self._signature

    def _main_mechanism(self) -> GaussianProjectionRelease:
        """The release the privacy report describes: the per-step projection (DPSWflow: its one-shot release)."""
        return self.projection

    def convention_report(self) -> dict | None:
        """``privacy.convention=paper``: the same noise under the RIGOROUS (Chernoff) bound for the same unit
        latents (diameter 2, same beta and partners): the CLT bound the paper's sigma assumes is asymptotic."""
        if self.privacy.convention is None:
            return None
        mech = self._main_mechanism()
        s_true = l2_sensitivity(mech.k, mech.dim, mech.beta / mech.partners(mech.relation), "chernoff", ROW_DIAMETER)
        true = true_epsilon(mech.noise_std, s_true, sample_rate=mech.sample_rate, steps=mech.releases,
                            delta=mech.ledger.delta, sampling=mech.ledger.sampling, delta_per_step=mech.beta,
                            relation=mech.relation, calibrate_with=mech.ledger.calibrate_with)
        return {"convention": "paper", "paper_epsilon": self.privacy.convention.epsilon, "paper_sigma": self.privacy.convention.sigma,
                **({"paper_sensitivity_dim": self.privacy.convention.sensitivity_dim} if self.privacy.convention.sensitivity_dim else {}),
                "sensitivity_stated": mech.sensitivity, **true,
                "epsilon_true_note": f"the released code's noise (std {mech.noise_std:.4g}) under the rigorous Chernoff "
                                     f"sensitivity of unit latents in d = {mech.dim} (stated: {self.privacy.dp.bound} bound"
                                     + (f" at dim {self.privacy.convention.sensitivity_dim}, as the released code evaluates it"
                                        if self.privacy.convention.sensitivity_dim else "") + ")"}

    def _summary(self, mech) -> dict:
        return {"noise_std": mech.noise_std, "noise_multiplier": mech.noise_multiplier, "sensitivity": mech.sensitivity,
                "sensitivity_bound": mech.bound if self.privacy.private else None, "guarantee": mech.guarantee,
                "latent_dim": self.space.d, "row_dim": self.space.dim, "num_projections": self.k, **self.ae_info}

