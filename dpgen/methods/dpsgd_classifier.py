"""DP-SGD image classifier with four accountants side by side (WDP paper, Table 2).

Privacy boundary: private images are touched only in ``step``: a batch drawn by the PrivateSampler
is normalised by PUBLIC constants, per-sample gradients are computed (torch.func) and handed to the
``NoisyGradientSum`` mechanism (``privacy.mechanisms``), which clips each to l2 norm <= C, sums, adds
Gaussian noise of std s = noise_multiplier * sensitivity, divides by the public q N and records the
release in the ledger (DP-SGD, Abadi et al. 2016, Algorithm 1).  Everything after that (the SGD step,
the evaluation) is post-processing.  The per-sample gradients exist only inside one step and are
never logged or saved.

Neighbouring relation (``accountant.sampling``): ``poisson`` = add/remove one record, the clipped sum
moves by <= C; ``without_replacement`` (fixed batches of B) = replace one record, it moves by <= 2C
(the mechanism's ``sensitivity``); the noise multiplier is std / sensitivity in both cases.

Algorithm (one step, run by ``methods.loop``; T = epochs * ceil(N / B) steps, q = B / N):
  1. B_t ~ Poisson(q) batch from the sampler (or B of N without replacement)  (Alg. 1 line 3)
  2. g_i = grad l(theta; x_i)                                                  (line 5)
  3. g~ = (sum_i clip_C(g_i) + N(0, s^2 I)) / (q N)   <- the only private release  (lines 6-7)
  4. theta <- theta - lr g~ (SGD, optional momentum)                           (line 8)
  5. accounting: RDP (calibrates sigma, enforces the budget stop) and PLD from (sigma, q);
     only with ``accountant.data_dependent_reports=true`` (off by default): WA (Theorem 2 of WDP)
     and BA from the distances of P(P-1)/2 pairs of neighbouring gradient sums, MA at the
     worst-case distance C.  WA/BA are un-noised functions of private gradients, so such a run is
     labelled "not DP: data-dependent reports" in results.json, the printed table and W&B.

Pair statistics (WDP paper, MA / BA baselines, adapted; ``pair_mode``).  WA and BA need distances
``d = ||g - g'||`` between the released gradient sums of neighbouring datasets.  The release here is
the SUM of clipped per-sample gradients with noise sigma*C, so for ``P = pair_samples`` random batch
members x:
  * ``add_remove`` (default; the adjacency RDP, PLD and MA use): D vs D minus {x} differ by
    ``g~_x``, so the P distances are ``||g~_x|| <= C`` (MA takes the worst case C);
  * ``loo`` (the authors' leave-one-out pairs): the leave-one-out sums of two members differ by
    ``g~_k - g~_j``, so the P(P-1)/2 distances are ``||g~_j - g~_k|| <= 2C`` (replace-one adjacency).
    The authors add noise sigma*C to the batch MEAN instead, so their d/s is about B times smaller.
``pair_mask_keep < 1`` multiplies the vectors by one Bernoulli coordinate mask, as the authors do
(they also sparsify their update; dpgen does not, so the default is 1).  The WA/BA values are
computed from private gradients and are not themselves covered by the guarantee: they are computed
and published only on the explicit opt-in above.  Only ``epsilon_rdp`` (and ``epsilon_pld``) are
guarantees.

A non-private run (``private=false``) takes plain SGD steps on the mean loss and records each batch
access with noise multiplier 0 (``UnnoisedAccess``): it reports epsilon = inf.

Randomness: the sampler, the noise and the pair selection use secret OS-seeded generators unless
``trainer.deterministic=true``.  ``checkpoints/last.pt`` holds their states (as sensitive as the
data); ``classifier.pt`` (weights only) is the artefact to publish.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ..data import DataSplits
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.bayesian import DEFAULT_CONF, BayesianAccountant, MomentsAccountant
from ..privacy.dpsgd import (
    assign_grads,
    auto_microbatch,
    cpu_microbatch,
    poisson_capacity,
)
from ..privacy.ledger import ReportedStep
from ..privacy.mechanisms import NoisyGradientSum, UnnoisedAccess
from ..privacy.noise import NoiseSettings
from ..privacy.per_sample import PerSampleGradients, check_rule, resolve_rule
from ..privacy.sampler import device_generator, generator_state, resumed_generator
from ..privacy.wdp import WassersteinAccountant
from ..utils.compiling import compile_step
from .base import Method, TrainContext, mechanism_seed, secret_seed
from .parallel import batch_mean_backward, own_draws

Grads = dict[str, torch.Tensor]


def _loss_one(output_fn: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of one sample (``x: (C, H, W)``, ``y: ()``)."""
    return F.cross_entropy(output_fn(x), y.unsqueeze(0))


def _losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``(b,)``: each sample's cross-entropy (the per-sample loss of ``privacy.per_sample``)."""
    return F.cross_entropy(logits, y, reduction="none")


class DPSGDClassifier(Method):
    """CNN classifier trained with DP-SGD (or plain SGD when ``private=false``)."""

    split = "rows"  # several processes: the batch's rows (their clipped gradients summed by the release)

    release_name = "classifier.pt"

    def __init__(self, network: Callable[..., torch.nn.Module], batch_size: int = 1024, epochs: int = 25,
                 lr: float = 0.01, momentum: float = 0.0, clip_norm: float = 1.0,
                 noise_multiplier: float | None = None, private: bool = True,
                 normalize_mean: Sequence[float] = (0.1307,), normalize_std: Sequence[float] = (0.3081,),
                 microbatch: int | str = "auto", per_sample: str = "auto", pair_samples: int = 8, pair_mode: str = "add_remove",
                 pair_mask_keep: float = 1.0,
                 wa_order: float = 16.0, wa_beta: float = 32.0, ba_orders: Sequence[int] = (16,),
                 ba_conf: float = DEFAULT_CONF, ma_orders: Sequence[int] = (16,)) -> None:
        self.make_network = network
        self.batch_size, self.epochs, self.lr, self.momentum = int(batch_size), int(epochs), float(lr), float(momentum)
        self.C = float(clip_norm)
        if not self.C > 0:
            raise ValueError(f"model.clip_norm (clipping bound C) must be > 0, got {clip_norm}")
        self.private = bool(private)
        # null: sigma from accountant.epsilon (RDP) for the whole schedule; a number: fixed (its epsilon reported)
        self.fixed_multiplier = noise_multiplier
        self.name = "DP-SGD" if self.private else "SGD"
        self.mean = torch.tensor(list(normalize_mean), dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(list(normalize_std), dtype=torch.float32).view(1, -1, 1, 1)
        if torch.any(self.std <= 0):
            raise ValueError(f"model.normalize_std must be > 0, got {list(normalize_std)}")
        if microbatch != "auto" and not (isinstance(microbatch, int) and microbatch >= 1):
            raise ValueError(f"model.microbatch must be auto or an integer >= 1, got {microbatch!r}")
        self.microbatch_setting = microbatch
        self.per_sample = check_rule(per_sample, "model.per_sample")  # auto | vmap | unfold | ghost (privacy.per_sample)
        self.rule = per_sample if per_sample in ("vmap", "ghost") else "unfold"  # resolved in setup, with the network
        self.microbatch = cpu_microbatch(self.rule) if microbatch == "auto" else int(microbatch)
        if pair_samples < 3:
            raise ValueError(f"model.pair_samples must be >= 3 (the Bayesian accountant needs >= 3 pairs), "
                             f"got {pair_samples}")
        self.pair_samples = int(pair_samples)
        if pair_mode not in ("add_remove", "loo"):
            raise ValueError(f"model.pair_mode must be 'add_remove' or 'loo', got {pair_mode!r}")
        self.pair_mode = pair_mode
        if not 0.0 < pair_mask_keep <= 1.0:
            raise ValueError(f"model.pair_mask_keep must be in (0, 1], got {pair_mask_keep}")
        self.pair_mask_keep = float(pair_mask_keep)
        self.wa_order, self.wa_beta = float(wa_order), float(wa_beta)
        self.ba_orders, self.ba_conf, self.ma_orders = list(ba_orders), float(ba_conf), list(ma_orders)
        self.net: torch.nn.Module | None = None
        self.device = torch.device("cpu")
        self.reports = False  # WA/BA/MA: only with accountant.data_dependent_reports=true (set in setup)

    # ------------------------------------------------------------------------------------
    def steps_planned(self, n_private: int) -> int:
        """``epochs * ceil(N / B)`` batches (each of expected size B = q N)."""
        return self.epochs * math.ceil(n_private / self.batch_size)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """The network's input: ``(x - mean) / std`` with public per-channel constants (no statistic of the
        private data)."""
        return (x - self.mean) / self.std

    def noise_settings(self) -> NoiseSettings:
        return NoiseSettings(private=self.private, noise_multiplier=self.fixed_multiplier)

    def setup(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> None:
        self.device = ctx.device
        c, h, _ = data.image_shape
        if self.mean.shape[1] not in (1, c) or self.std.shape[1] not in (1, c):
            raise ValueError(f"model.normalize_mean/std must have 1 or {c} entries for {data.name} images")
        self.net = self.make_network(in_channels=c, image_size=h, num_classes=data.num_classes).to(ctx.device)
        self.mean, self.std = self.mean.to(ctx.device), self.std.to(ctx.device)  # public constants, on the device once
        if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.net.modules()):
            raise ValueError("the network has BatchNorm: per-sample gradients are undefined for it in training "
                             "mode; use model.network.norm=group or none")
        # WA/BA (and MA beside them) are computed from un-noised clipped gradients of private records: an
        # explicit opt-in whose run is labelled "not DP: data-dependent reports" (privacy.ledger)
        self.reports = self.private and ledger.data_dependent_reports
        if self.reports and ledger.sampling != "poisson":
            raise ValueError("accountant.data_dependent_reports=true (WA/BA/MA) is implemented for Poisson sampling "
                             "(add/remove pairs) only: set accountant.sampling=poisson or "
                             "accountant.data_dependent_reports=false")
        n_priv = len(data.private)
        # secret randomness for sampling, noise and pair selection (module docstring)
        self.sampler = PrivateSampler(data.private, self.batch_size, ledger.sampling, seed=secret_seed(ctx, 1),
                                      device=ctx.device)  # Poisson on an accelerator: privacy.sampler.poisson_indices
        q = self.sampler.sample_rate
        self._steps = self.steps_planned(n_priv)
        # trainer.graph: static shapes, the Poisson batch padded to a public capacity (privacy.sampler.padded_batch)
        self.capacity = poisson_capacity(n_priv, q) if ctx.graph and ledger.sampling == "poisson" else None
        if self.private:  # lines 6-7: the one private release per step
            self.gradient_release = NoisyGradientSum(ledger, clip_norm=self.C, sample_rate=q, expected_batch_size=q * n_priv,
                                                     noise=self.noise, steps=self._steps, seed=mechanism_seed(ctx, 2),
                                                     device=ctx.device)
        else:  # plain SGD: an un-noised access per step (epsilon = inf)
            self.gradient_release = UnnoisedAccess(ledger, sample_rate=q)
        self.mechanisms = {"gradient": self.gradient_release}
        self.pair_gen = device_generator(secret_seed(ctx, 3), ctx.device)  # pair selection (reports only), on the device
        if self.reports:  # reported-only accountants (never calibrate, never stop training)
            self.wa = WassersteinAccountant(self.wa_order, self.wa_beta)
            self.ba = BayesianAccountant(self.ba_orders, total_steps=self._steps, conf=self.ba_conf)
            self.ma = MomentsAccountant(self.ma_orders)
            for acct in (self.wa, self.ba, self.ma):
                ledger.add_reported(acct)
            self.ledger = ledger  # the step submits its reports' accounting to it (ReportedStep)
            # the step's pair distances, in a buffer of its own: a graph's static output, copied after each replay
            self.pair_distances = torch.zeros(self.n_pairs, dtype=torch.float64, device=ctx.device)
        # trainer.compile=on: the SGD step on the released gradient compiled (utils.compiling); the per-sample
        # gradients, clipping and noise (the release) stay eager
        self.opt = compile_step(torch.optim.SGD(self.net.parameters(), lr=self.lr, momentum=self.momentum,
                                                  foreach=True), ctx.compile)
        self.net.train()
        self.rule = resolve_rule(self.per_sample, self.net, ctx.device)
        self.grads = PerSampleGradients(self.net, _losses, self.rule)
        if self.microbatch_setting == "auto":  # the whole batch in one chunk where the device's memory allows
            self.microbatch = auto_microbatch(self.net, _loss_one, (c, h, data.image_shape[2]), ctx.device,
                                              capacity=poisson_capacity(n_priv, q), cpu_chunk=cpu_microbatch(self.rule))
        self._signature = {"n_private": n_priv, "dataset": data.name, "batch_size": self.batch_size,
                           "epochs": self.epochs, "private": self.private, "clip_norm": self.C,
                           "sampling": ledger.sampling, "data_dependent_reports": self.reports}

    @property
    def total_steps(self) -> int:
        return self._steps

    def step(self, t: int) -> dict:
        """DP-SGD, one step: ``g~ = (sum_{i in B_t} clip_C(grad l(theta; x_i, y_i)) + N(0, s^2 I)) / (q N)``,
        ``theta <- theta - lr g~`` (B_t a Poisson(q) private batch)."""
        if self.capacity:  # static shapes: the same Poisson batch in `capacity` rows, padding rows weighted 0
            x, y, valid = self.sampler.padded_batch(self.capacity)
        else:
            (x, y), valid = self.sampler.sample(), None                       # 1. private batch
        x, y = self.normalize(x.to(self.device)), y.to(self.device)
        if self.private:
            grads = self.private_gradient(x, y, valid)                        # 2-3. clip, sum, noise (recorded)
        else:
            self.gradient_release.release()                                             # un-noised access (recorded)
            grads = self.plain_gradient(x, y, valid)
        assign_grads(self.net, grads, owned=True)
        self.opt.step()                                                        # 4. theta <- theta - lr g~
        # the norm of the released (noised) gradient: public; NaN/inf in it is caught by the loop's
        # non-finite check (kept on the device, raised at the next log / checkpoint step: no host sync here)
        return {"released_grad_norm": torch.nn.utils.get_total_norm(list(grads.values()))}

    # ------------------------------------------------------------------------------------
    def private_gradient(self, x: torch.Tensor, y: torch.Tensor, valid: torch.Tensor | None = None) -> Grads:
        """The released gradient of a batch (normalised, on the device): lines 5-7 through the mechanism, the
        per-sample gradients by ``model.per_sample`` in chunks of ``model.microbatch`` (``valid``: the real rows
        of a padded batch).  With the data-dependent opt-in, P random batch members' clipped gradients give the
        WA/BA pair distances (never released or logged): the batch is permuted on the device (its clipped sum does
        not depend on the order) and its first P rows are the P members, so nothing is read back; the distances
        are written into ``pair_distances`` and their accounting is submitted to the ledger like a release's record
        (``ReportedStep``: made after the step, or after each replay of a captured step, by
        :meth:`_account_reports`), so the step itself does the same device work whether it runs eagerly or is
        replayed."""
        if not self.reports:
            return self.gradient_release.release(self.grads.chunks((x,), (y,), valid, self.microbatch))
        n = x.shape[0]
        p = min(self.pair_samples, n)
        if n:  # P uniformly random members first: one permutation from the pair generator, on the device
            perm = torch.randperm(n, generator=self.pair_gen, device=x.device)
            x, y = x[perm], y[perm]
            valid = None if valid is None else valid[perm]
        pair_rows: list[torch.Tensor] = []
        seen = [0]

        def observe(chunk, scale: torch.Tensor) -> None:
            rows = scale.shape[0]
            take = min(p - seen[0], rows)
            if take > 0:
                pair_rows.append(chunk.rows(take) * scale[:take, None])              # clipped g~ of the members
            seen[0] += rows

        private = self.gradient_release.release(self.grads.chunks((x,), (y,), valid, self.microbatch), observe=observe)
        self.pair_distances.copy_(self._pair_distances(pair_rows, self.pair_gen, None if valid is None else valid[:p]))
        self.ledger.submit(ReportedStep(("wa", "ba", "ma"), self.gradient_release.noise_std,
                                        self.gradient_release.sample_rate), self._account_reports)
        return private

    def _account_reports(self) -> None:
        """One step of the reported-only accountants (after the step that computed ``pair_distances``): WA and BA
        keep a copy of the distances on the device until they are read (``privacy.deferred``: no host read now),
        MA takes the worst case C."""
        distances, s, q = self.pair_distances.clone(), self.gradient_release.noise_std, self.gradient_release.sample_rate
        self.wa.step(distances, s, q)                                                   # reported only (kept)
        self.ba.step(distances, s, q)
        self.ma.step(self.C, s, q)

    def _pair_distances(self, pair_rows: list[torch.Tensor], gen: torch.Generator,
                        valid: torch.Tensor | None = None) -> torch.Tensor:
        """Distances between neighbouring releases (module docstring, ``pair_mode``), a float64 tensor on the
        rows' device; the public worst case (C, or 2C for ``loo``) stands in for a member the batch did not have
        (fewer than ``pair_samples`` members, or a padding row: ``valid`` False)."""
        worst = self.C if self.pair_mode == "add_remove" else 2.0 * self.C
        want = self.n_pairs
        device = pair_rows[0].device if pair_rows else self.device
        d = torch.empty(0, dtype=torch.float64, device=device)
        if pair_rows:
            vecs = torch.cat(pair_rows, dim=0)
            if self.pair_mask_keep < 1.0:  # one Bernoulli coordinate mask for all vectors (authors' recipe)
                keep = torch.rand(vecs.shape[1], generator=gen, device=gen.device) < self.pair_mask_keep
                vecs = vecs * keep.to(vecs.device, vecs.dtype)
            vecs = vecs.double()
            if self.pair_mode == "add_remove":
                d = torch.linalg.vector_norm(vecs, dim=1)
                real = valid
            elif vecs.shape[0] >= 2:
                d = F.pdist(vecs)                                         # P(P-1)/2, itertools.combinations order
                i, j = torch.triu_indices(vecs.shape[0], vecs.shape[0], 1, device=device)
                real = None if valid is None else valid[i] & valid[j]
            else:
                real = None
            if real is not None:
                d = torch.where(real, d, torch.full_like(d, worst))
        return torch.cat([d, torch.full((want - d.shape[0],), worst, dtype=torch.float64, device=device)])

    @property
    def n_pairs(self) -> int:
        """Pair distances per step: P (add_remove) or P(P-1)/2 (loo)."""
        p = self.pair_samples
        return p if self.pair_mode == "add_remove" else p * (p - 1) // 2

    def plain_gradient(self, x: torch.Tensor, y: torch.Tensor, valid: torch.Tensor | None = None) -> Grads:
        """The non-private SGD gradient of the mean loss of a batch (``private=false`` baseline): the sum of the
        losses over the batch divided by its size (several processes: over the whole batch, every rank's rows);
        ``valid`` (a padded batch, one process: ``trainer.graph``): the mean over the valid rows, padding weighted 0."""
        self.net.zero_grad(set_to_none=True)
        if valid is not None:
            w = valid.to(x.dtype)
            ((F.cross_entropy(self.net(x), y, reduction="none") * w).sum() / w.sum().clamp(min=1.0)).backward()
            return {k: p.grad.detach().clone() for k, p in self.net.named_parameters()}
        with own_draws():  # several processes: this rank's dropout masks, the public streams kept in step
            loss_sum = F.cross_entropy(self.net(x), y, reduction="sum") if x.shape[0] else x.new_zeros(())
        batch_mean_backward(loss_sum, x.shape[0], self.net.parameters())
        return {k: p.grad.detach().clone() for k, p in self.net.named_parameters()}

    # -- state ------------------------------------------------------------------------------
    def signature(self) -> dict:
        return self._signature

    def state_dict(self) -> dict:
        return {"network": self.net.state_dict(), "optimizer": self.opt.state_dict(),
                "pair_generator": generator_state(self.pair_gen)}

    def load_state_dict(self, state: dict) -> None:
        self.net.load_state_dict(state["network"])
        self.opt.load_state_dict(state["optimizer"])
        resumed_generator(self.pair_gen, state["pair_generator"])

    def release_state(self) -> dict:
        return {"network": self.net.state_dict()}

    def train_summary(self) -> dict:
        m = self.gradient_release
        return {"noise_multiplier": m.noise_multiplier, "noise_std": m.noise_std, "clip_norm": self.C,
                "sensitivity_on_sum": m.sensitivity, "sample_rate": m.sample_rate,
                "pairs_per_step": self.n_pairs if self.reports else 0, "pair_mode": self.pair_mode,
                "guarantee": m.guarantee}

    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
        """Class labels ``(n,)`` for PUBLIC/test images ``x: (n, C, H, W)`` in [0, 1] (on cpu)."""
        if self.net is None:
            raise RuntimeError("train the method first (methods.loop.train) or restore() a release before predict()")
        self.net.eval()
        out = [self.net(self.normalize(x[i:i + batch_size].to(self.device))).argmax(1).cpu()
               for i in range(0, x.shape[0], batch_size)]
        self.net.train()
        return torch.cat(out) if out else torch.empty(0, dtype=torch.long)
