"""DP class-Gaussian generator: ONE Gaussian release of class moments in a public representation.

Design (issue 12, items 3-4; privacy argument in :mod:`dpgen.privacy.moments`):

  1. representation (public): ``z = clip_r((x - c) V)`` with V a fixed 2-D DCT basis (no data) or
     the PCA of the PUBLIC split (``dpgen.data.representations``); r a public radius;
  2. one private release (``release``):
     * ``moments`` (default): class counts, sums and second moments, weighted so the add/remove
       sensitivity is exactly 1, plus Gaussian noise (:class:`ClassMomentRelease`);
     * ``projections``: the one-release flow's input, i.e. fixed-size class blocks projected on
       fresh orthonormal directions (k = K) plus noisy counts, post-processed into the same moments
       with the known noise variance removed (:class:`ClassBlockProjectionRelease`);
  3. post-processing: class means and covariances (PSD-projected); samples
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
import time

import torch

from ..data import DataSplits
from ..data.representations import Representation, build_representation
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.moments import ClassBlockProjectionRelease, ClassMomentRelease, ClassMoments
from ..utils import atomic_save
from .base import GenerativeMethod, TrainContext, secret_seed

RELEASES = ("moments", "projections")


class DPClassGaussian(GenerativeMethod):
    """Class-conditional Gaussian in a public representation, from one noisy moment release."""

    def __init__(self, representation: dict | None = None, release: str = "moments",
                 moment_shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3), block_slack: float = 1.2,
                 private: bool = True, chunk: int = 5000) -> None:
        if release not in RELEASES:
            raise ValueError(f"model.release={release!r} is unknown; choose one of {', '.join(RELEASES)}")
        self.rep_cfg = dict(representation or {"kind": "dct"})
        self.release_kind, self.shares = release, tuple(float(s) for s in moment_shares)
        self.block_slack, self.private, self.chunk = float(block_slack), bool(private), int(chunk)
        if self.block_slack <= 0:
            raise ValueError(f"model.block_slack must be > 0, got {block_slack}")
        self.rep: Representation | None = None
        self.moments: ClassMoments | None = None
        self.num_classes = 0
        self.sample_generator = torch.Generator().manual_seed(0)

    def fit(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
        t0 = time.time()
        cfg = dict(self.rep_cfg)
        kind = cfg.pop("kind", "dct")
        self.rep = build_representation(kind, data.image_shape, data.value_range,
                                        public_x=None if data.public is None else data.public.x, **cfg)
        self.num_classes = data.num_classes
        n = len(data.private)
        relation = "add_remove" if ledger.sampling == "poisson" else "replace_one"
        seed = secret_seed(ctx)
        if self.private and ledger.target_epsilon is None:
            raise ValueError("model.private=true needs accountant.epsilon (a number)")
        mult = None if self.private else 0.0
        if self.release_kind == "moments":
            mech = ClassMomentRelease(ledger, data.num_classes, self.rep.radius, relation, self.shares,
                                      seed=seed, noise_multiplier=mult)
        else:
            m = math.ceil(self.block_slack * n / data.num_classes)
            mech = ClassBlockProjectionRelease(ledger, data.num_classes, self.rep.radius, m, relation, seed=seed,
                                               noise_multiplier=mult)
        # read every private record once (q = 1) and encode it with the public map; the mechanism releases
        x, y = PrivateSampler(data.private, n, "without_replacement", seed=seed + 1).sample()
        z = torch.cat([self.rep.encode(x[i:i + self.chunk]) for i in range(0, n, self.chunk)])
        # non-private ceiling (model.private=false): the same release with zero noise, recorded as such (eps = inf)
        self.moments = mech.release(z, y)
        del x, y, z
        self.sample_generator = torch.Generator().manual_seed(seed + 2)
        # the released (noisy, post-processed) model is the artefact to publish: DP by post-processing
        atomic_save({"counts": self.moments.counts, "means": self.moments.means,
                     "covariances": self.moments.covariances, "basis": self.rep.basis, "center": self.rep.center,
                     "radius": self.rep.radius, "image_shape": self.rep.image_shape,
                     "value_range": self.rep.value_range}, ctx.run_dir / "generator.pt")
        return {"noise_std": mech.noise.noise_std, "noise_multiplier": mech.noise.noise_multiplier,
                "sensitivity": mech.noise.sensitivity, "relation": relation, "release": self.release_kind,
                "representation": kind, "code_dim": self.rep.dim, "radius": self.rep.radius,
                "fit_seconds": time.time() - t0}

    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        if self.moments is None or self.rep is None:
            raise RuntimeError("call fit() before sample()")
        if labels is None:
            labels = torch.arange(n) % self.num_classes
        z = self.moments.sample(labels.cpu(), generator=self.sample_generator)
        return self.rep.decode(z), labels.cpu()
