"""DP class-Gaussian generator: ONE Gaussian release of class moments in a public representation.

Design (privacy argument in :mod:`dpgen.privacy.moments`):

  1. representation (public): ``z = clip_r((x - c) V)`` with V a fixed 2-D DCT basis (no data) or
     the PCA of the PUBLIC split (``dpgen.data.representations``); r a public radius;
  2. one private release (``release``):
     * ``moments`` (default): class counts, sums and second moments, weighted so the add/remove
       sensitivity is exactly 1, plus Gaussian noise (:class:`ClassMomentRelease`);
     * ``projections``: the one-release flow's input, i.e. fixed-size class blocks projected on
       fresh orthonormal directions (k = K) plus noisy counts, post-processed into the same moments
       with the known noise variance removed (:class:`ClassBlockProjectionRelease`);
  3. post-processing: class means and covariances (``shrinkage``: the class's spikes above the known
     noise bulk completed by the pooled within-class spikes, then by the representation's public prior
     spectrum scaled to the released residual variance, :mod:`dpgen.privacy.moments`); samples
     ``z ~ N(mu_y, Sigma_y)`` decoded with ``x = z V^T + c`` clamped to the value range.

Sampler = accountant: the whole private set is read once (q = 1, one step) and the ledger records
one Gaussian mechanism with the calibrated multiplier.  ``accountant.sampling=poisson`` means the
add/remove relation (Delta = 1 for ``moments``), ``without_replacement`` the replace-one relation
(Delta = sqrt 2); ``projections`` uses N (the public dataset size the accountants already use) to
fix the block size ``m = ceil(block_slack * N / C)``.  Nothing un-noised reaches logs: the method
returns only the noise std, multiplier and sensitivity (public) and the run time.

Randomness: the noise generator is seeded secretly (``secret_seed``) unless trainer.deterministic.
"""

from __future__ import annotations

import math

import torch

from ..data import DataSplits
from ..data.representations import Representation, build_representation
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.moments import (
    SHRINKAGES,
    ClassBlockProjectionRelease,
    ClassMomentRelease,
    ClassMoments,
)
from ..privacy.noise import NoiseSettings
from .base import GenerativeMethod, TrainContext, mechanism_seed, secret_seed

RELEASES = ("moments", "projections")


class DPClassGaussian(GenerativeMethod):
    """Class-conditional Gaussian in a public representation, from one noisy moment release (one loop step)."""

    split = "rows"  # several processes: the private set's rows, its moments added by the release

    name = "DP class-Gaussian"
    release_name = "generator.pt"
    min_steps = 1  # the model is its one release

    def __init__(self, representation: dict | None = None, release: str = "moments",
                 moment_shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3), block_slack: float = 1.2,
                 private: bool = True, chunk: int = 5000, shrinkage: str = "pooled_prior",
                 epsilon_share: float = 1.0) -> None:
        if release not in RELEASES:
            raise ValueError(f"model.release={release!r} is unknown; choose one of {', '.join(RELEASES)}")
        self.rep_cfg = dict(representation or {"kind": "dct"})
        self.release_kind, self.shares = release, tuple(float(s) for s in moment_shares)
        self.block_slack, self.private, self.chunk = float(block_slack), bool(private), int(chunk)
        if shrinkage not in SHRINKAGES:
            raise ValueError(f"model.shrinkage={shrinkage!r} is unknown; choose one of {', '.join(SHRINKAGES)}")
        self.shrinkage = shrinkage
        # the share of accountant.epsilon this release alone spends: 1, or the first phase of a warm start
        self.epsilon_share = float(epsilon_share)
        if not 0.0 < self.epsilon_share <= 1.0:
            raise ValueError(f"epsilon_share must lie in (0, 1], got {epsilon_share}")
        if self.block_slack <= 0:
            raise ValueError(f"model.block_slack must be > 0, got {block_slack}")
        self.rep: Representation | None = None
        self.moments: ClassMoments | None = None
        self.num_classes = 0
        self.sample_generator = torch.Generator().manual_seed(0)
        self.mechanisms = {}

    # -- loop interface ------------------------------------------------------------------
    def noise_settings(self) -> NoiseSettings:
        """One release, calibrated to (the share of) accountant.epsilon, or none."""
        return NoiseSettings(private=self.private, epsilon_share=self.epsilon_share)

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        cfg = dict(self.rep_cfg)
        self.kind = cfg.pop("kind", "dct")
        self.rep = build_representation(self.kind, data.image_shape, data.value_range,
                                        public_x=None if data.public is None else data.public.x, **cfg)
        self.num_classes, self.image_shape = data.num_classes, data.image_shape
        n = len(data.private)
        self._seed = secret_seed(ctx)  # secret sampler seed (reads every record once) and sampling seed
        if self.release_kind == "moments":
            mech = ClassMomentRelease(ledger, n_classes=data.num_classes, radius=self.rep.radius, shares=self.shares,
                                      noise=self.noise, seed=mechanism_seed(ctx), shrinkage=self.shrinkage,
                                      prior=self.rep.prior_spectrum())
        else:
            mech = ClassBlockProjectionRelease(ledger, n_classes=data.num_classes, radius=self.rep.radius,
                                               block_size=math.ceil(self.block_slack * n / data.num_classes),
                                               noise=self.noise, seed=mechanism_seed(ctx))
        self.mech = mech
        self.mechanisms = {"moments": mech}
        self.sampler = PrivateSampler(data.private, n, "without_replacement", seed=self._seed)
        self._n = n
        self.sample_generator = torch.Generator().manual_seed(self._seed + 2)

    @property
    def total_steps(self) -> int:
        return 1

    def step(self, t: int) -> dict:
        """The single release: every private record read once (q = 1), ``z_i = clip_r((x_i - c) V)`` (public
        map), then ``M = (w0 n_c, w1 sum_{y_i = c} z_i, w2 sum_{y_i = c} z_i z_i^T)_c + N(0, s^2 I)`` with weights
        making the sensitivity exactly 1 (``release=moments``; ``projections``: class blocks projected on
        orthonormal directions, plus noisy counts).  Class Gaussians are post-processing (``sample``)."""
        x, y = self.sampler.sample()
        z = torch.cat([self.rep.encode(x[i:i + self.chunk]) for i in range(0, self._n, self.chunk)])
        self.moments = self.mech.release(z, y)  # THE private release (recorded by the mechanism)
        del x, y, z
        return {}

    def state_dict(self) -> dict:
        return {} if self.moments is None else self._moment_state()

    def load_state_dict(self, state: dict) -> None:
        if state:
            self.moments = ClassMoments(state["counts"], state["means"], state["covariances"],
                                        state.get("estimator", ""))

    def _moment_state(self) -> dict:
        return {"counts": self.moments.counts, "means": self.moments.means, "covariances": self.moments.covariances,
                "estimator": self.moments.estimator}

    def signature(self) -> dict:
        return {"release": self.release_kind, "shrinkage": self.shrinkage, "representation": {"kind": self.kind, **{
            k: v for k, v in self.rep_cfg.items() if k != "kind"}}, "shares": list(self.shares),
            "private": self.private, "n_private": self._n}

    def release_state(self) -> dict:
        """The released (noisy, post-processed) model and the public map: DP by post-processing."""
        return {**self._moment_state(), "basis": self.rep.basis, "center": self.rep.center,
                "radius": self.rep.radius, "image_shape": self.rep.image_shape, "value_range": self.rep.value_range}

    def train_summary(self) -> dict:
        return {"release": self.release_kind, "representation": self.kind, "code_dim": self.rep.dim,
                "radius": self.rep.radius, "noise_std": self.mech.noise_std,
                "noise_multiplier": self.mech.noise_multiplier, "sensitivity": self.mech.sensitivity,
                "relation": self.mech.relation,
                # the covariance estimator that ran (model.shrinkage=auto resolved from the release: post-processing)
                "shrinkage_used": None if self.moments is None else self.moments.estimator}

    # -- sampling ------------------------------------------------------------------------
    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        if self.moments is None or self.rep is None:
            raise RuntimeError("train the method first (methods.loop.train) or restore() a release before sample()")
        if labels is None:
            labels = torch.arange(n) % self.num_classes
        z = self.moments.sample(labels.cpu(), generator=self.sample_generator)
        return self.rep.decode(z), labels.cpu()
