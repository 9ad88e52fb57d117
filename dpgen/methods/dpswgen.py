"""DPSWgen (Sebag et al., TMLR; the DPSWflow paper's baseline): a latent generator trained with DP-SWD against private latent
batches, as ``DPSWDGenerator`` does in pixel space (latent space: :mod:`dpgen.methods.latent`).

One subsampled Gaussian release per step (accounting as DPSWflow-r); generation draws fresh
generator samples (conditional on the label with ``label_mode=partition``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..data import DataSplits
from ..errors import ConfigError
from ..ot.sliced import sliced_cost_blocks
from ..privacy import PrivacyLedger
from ..utils import autocast
from ..utils.compiling import adam, compile_function, compile_module
from .base import TrainContext
from .dpswd_generator import released_sliced_cost, sliced_wasserstein_step
from .latent import LatentMethod
from .parallel import ParallelOptimizer, Share, whole_batch_norm
from .warm_start import WarmTarget


class DPSWGen(LatentMethod):
    """DPSWgen baseline: latent MLP generator trained with DP-SWD against private latent batches.

    ``label_mode=partition`` (default; as ``DPSWDGenerator``): the generator is conditional
    (input ``[z || onehot(c)]``, ``z: (n, d_code)``); each Poisson batch is split by label into C blocks
    of ``m = ceil(B / C)`` unit latents (``rows.class_blocks``), stacked ``(C m, D)`` and released as ONE
    ``GaussianProjectionRelease``; the loss is ``(mean_c SW_2^2(G(z, c) U + Z_s, block_c U + Z_t))^{1/2}``
    (``ot.sliced_wasserstein_blocks``).  Relation add/remove (Poisson, enforced: refused under
    ``without_replacement``): adding or removing (x, y) changes one row of block y by <= 2 (a padding zero
    becomes x, or x replaces a random kept row: N + 1 partners), so the calibration is that of an
    unpartitioned batch (row diameter 2, ``directions`` as chosen).
    """

    split = "blocks"  # several processes: whole class blocks, as DPSWDGenerator
    # measured (dpgen bench --only distributed, docs/benchmarks.md), said by a run on several CPU processes
    cpu_split_note = ("its step (about 10 ms at mnist_dpswgen) is smaller than the three exchanges a split step makes "
                      "(its BatchNorm statistics forward and backward, the gradients) plus the draws every process "
                      "repeats: 2 processes ran 0.64x the steady steps/s of one; run it on one process (or on GPUs)")

    name = "DPSWgen"

    def __init__(self, generator: Callable[..., torch.nn.Module], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), d_code: int | None = None, sample_jitter: float = 0.0,
                 **latent) -> None:
        # the autoencoder, privacy and schedule settings (LatentMethod); no sampling jitter by default
        LatentMethod.__init__(self, sample_jitter=sample_jitter, **latent)
        self.make_generator, self.lr, self.betas, self.d_code = generator, float(lr), tuple(betas), d_code
        self.G: torch.nn.Module | None = None

    def _make_g(self) -> torch.nn.Module:
        """The latent generator; partition: the label one-hot is appended to its Gaussian input."""
        d = self.space.dim
        self.noise_dim = self.d_code or d
        extra = self.space.n_classes if self.latent.label_mode == "partition" else 0
        return self.make_generator(d_code=self.noise_dim + extra, out_dim=d).to(self.device)

    def generate_latents(self, labels: torch.Tensor, share: Share | None = None,
                         model: torch.nn.Module | None = None) -> torch.Tensor:
        """``G([z || onehot(y)])`` (partition) or ``G(z)``: ``(n, D)`` latents for ``labels: (n,)``; ``share``: this
        rank's rows only (the codes of all n drawn, as one process draws them); ``model``: G's compiled view
        (the step's, ``trainer.compile=on``) instead of G."""
        z = torch.randn(labels.shape[0], self.noise_dim, device=self.device, generator=self.rng)
        if share is not None:
            z, labels = share.take(z), share.take(labels)
        if self.latent.label_mode == "partition":
            z = torch.cat([z, F.one_hot(labels.to(self.device), self.space.n_classes).to(z.dtype)], dim=1)
        return (self.G if model is None else model)(z)

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self._setup_latent(data, ledger, ctx)
        self.G = whole_batch_norm(self._make_g())  # several processes: BatchNorm over the whole generated batch
        self.block_rows = math.ceil(self.schedule.batch_size / data.num_classes)
        self._secret_seed(ctx)
        self._per_step_release(data, ledger, ctx)
        # trainer.compile=on: the generator's forward, the loss and the Adam step compiled (utils.compiling); the
        # release (sampler, directions, noise) stays eager
        self._generate = compile_module(self.G, ctx.compile, ctx.device)
        self._cost = compile_function(sliced_cost_blocks, ctx.compile, ctx.device)
        self.opt = ParallelOptimizer(adam(self.G.parameters(), ctx.compile, ctx.device, ctx.graph, lr=self.lr,
                                          betas=self.betas), self.G.parameters())
        self.G.train()

    def step(self, t: int) -> dict:
        """DP-SWD in latent space (as ``DPSWDGenerator.step``): one release of the private batch per step."""
        c_n = self.space.n_classes
        if self.latent.label_mode == "partition":
            rows = self._private_blocks(c_n, self.block_rows)  # Y_t: (C m, D), norm <= 1, on the device
            y_g = torch.arange(c_n, device=self.device).repeat_interleave(self.block_rows)  # m rows per label
            n_blocks = c_n
        else:
            rows, n_blocks = self._private_rows(), 1                            # Y_t: (B, D), norm <= 1
        b = rows.shape[0]
        share = Share.blocks(n_blocks, b // n_blocks)  # several processes: this rank's whole class blocks (or rows)
        with autocast(self.device, self.precision):  # trainer.precision=bf16: the generator forward only
            if self.latent.label_mode == "partition":
                fake = self.generate_latents(y_g, share, self._generate)
            else:
                fake = self._generate(share.take(torch.randn(b, self.G.d_code, device=self.device,
                                                             generator=self.rng)))
        fake = fake.float()  # projections and noise stay float32
        u = self.projection.draw_directions(self.device)                       # U_t: fresh directions
        p_s = share.projected(fake, u, self.projection.noise_std, self.rng)    # G(z) U_t + Z'_t
        # Y_t U_t + Z_t (recorded) and SW_2 within class blocks
        cost = released_sliced_cost(self.projection, rows, u, p_s, n_blocks, share, 2.0, self._cost)
        self.opt.zero_grad(set_to_none=True)
        loss = sliced_wasserstein_step(cost, share, b * u.shape[1], 2.0, self.opt)
        self.opt.step()                                                        # the gradients added over the ranks
        return {"loss": loss}  # a function of the release and public samples (synced at log cadence)

    def warm_target(self) -> WarmTarget:
        """The warm-up fits the latent generator to latent rows of samples of the released class Gaussians."""
        if self.latent.label_mode != "partition":
            raise ConfigError("model.warm_start for DPSWgen needs model.label_mode=partition (a conditional generator)")
        return WarmTarget(rows=self.space.rows, device=self.device, generate=self.generate_latents,
                          parameters=self.G.parameters())

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
            raise RuntimeError("train the method first (methods.loop.train) or restore() a release before sample()")
        self.G.eval()
        k = self.space.n_classes
        if labels is None:
            labels = torch.arange(n) % k
        if self.latent.label_mode == "partition":  # the conditional generator, label by label
            z = torch.cat([self.generate_latents(labels[i:i + batch_size]) for i in range(0, n, batch_size)])
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
