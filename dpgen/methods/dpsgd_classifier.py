"""DP-SGD image classifier with four accountants side by side (WDP experiments E3, spec wdp-experiments.md).

Privacy boundary: private images are touched only in ``_private_step``: a Poisson batch drawn by the
PrivateSampler is normalised by PUBLIC constants, per-sample gradients are computed (torch.func),
each is clipped to l2 norm <= C, the clipped gradients are summed and released with Gaussian noise
of std sigma*C (DP-SGD, Abadi et al. 2016, Algorithm 1).  Everything after that (the SGD step, the
evaluation) is post-processing.  The per-sample gradients exist only inside that function, for one
step, and are never logged or saved.

Neighbouring relation (``accountant.sampling``): ``poisson`` = add/remove one record, the clipped sum
moves by <= C and the ledger records sigma; ``without_replacement`` (fixed batches of B) = replace one
record, the sum moves by <= 2C and the ledger records sigma / 2 (calibration targets sigma / 2, then
sigma = 2 x that).  See ``privacy.dpsgd.accounted_multiplier``.

Algorithm (one step; T = epochs * ceil(N / B) steps, q = B / N):
  1. B_t ~ Poisson(q) batch from the sampler (or B of N without replacement)  (Alg. 1 line 3)
  2. g_i = grad l(theta; x_i),  g~_i = g_i / max(1, ||g_i|| / C)                (lines 5-6)
  3. g~ = (sum_i g~_i + N(0, sigma^2 C^2 I)) / (q N)   <- the only private release  (line 7)
  4. theta <- theta - lr g~ (SGD, optional momentum)                           (line 8)
  5. accounting: RDP (calibrates sigma, enforces the budget stop) and PLD from (sigma, q);
     only with ``accountant.data_dependent_reports=true`` (off by default): WA (Theorem 2 of WDP)
     and BA from the distances of P(P-1)/2 pairs of neighbouring gradient sums, MA at the
     worst-case distance C.  WA/BA are un-noised functions of private gradients, so such a run is
     labelled "not DP: data-dependent reports" in results.json, the printed table and W&B.

Pair statistics (spec wdp.md §6.4, adapted; ``pair_mode``).  WA and BA need distances
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

Randomness: the sampler, the noise and the pair selection use secret OS-seeded generators unless
``trainer.deterministic=true``.  ``checkpoints/last.pt`` holds their states (as sensitive as the
data); ``classifier.pt`` (weights only) is the artefact to publish.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from ..data import DataSplits
from ..privacy import PrivacyLedger, PrivateSampler
from ..privacy.bayesian import DEFAULT_CONF, BayesianAccountant, MomentsAccountant
from ..privacy.dpsgd import (
    accounted_multiplier,
    assign_grads,
    clip_per_sample,
    noise_multiplier_for,
    noisy_mean,
    per_sample_grads,
    sensitivity_in_clip_norms,
)
from ..privacy.wdp import WassersteinAccountant, pairwise_distances
from ..utils import atomic_save, rng_state, set_rng_state
from .base import Method, NonFiniteLossError, TrainContext, load_resume_checkpoint, secret_seed


def _loss_one(output_fn: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of one sample (``x: (C, H, W)``, ``y: ()``)."""
    return F.cross_entropy(output_fn(x), y.unsqueeze(0))


class DPSGDClassifier(Method):
    """CNN classifier trained with DP-SGD (or plain SGD when ``private=false``)."""

    def __init__(self, network: Callable[..., torch.nn.Module], batch_size: int = 1024, epochs: int = 25,
                 lr: float = 0.01, momentum: float = 0.0, max_grad_norm: float = 1.0,
                 noise_multiplier: float | None = None, private: bool = True,
                 normalize_mean: Sequence[float] = (0.5,), normalize_std: Sequence[float] = (0.5,),
                 microbatch: int = 128, pair_samples: int = 8, pair_mode: str = "add_remove",
                 pair_mask_keep: float = 1.0,
                 wa_order: float = 16.0, wa_beta: float = 32.0, ba_orders: Sequence[int] = (16,),
                 ba_conf: float = DEFAULT_CONF, ma_orders: Sequence[int] = (16,)) -> None:
        self.make_network = network
        self.batch_size, self.epochs, self.lr, self.momentum = int(batch_size), int(epochs), float(lr), float(momentum)
        self.C = float(max_grad_norm)
        if not self.C > 0:
            raise ValueError(f"model.max_grad_norm (clipping bound C) must be > 0, got {max_grad_norm}")
        if noise_multiplier is not None and not float(noise_multiplier) > 0:
            raise ValueError(f"model.noise_multiplier must be > 0 or null (calibrate to accountant.epsilon), "
                             f"got {noise_multiplier}")
        self.noise_multiplier_cfg = None if noise_multiplier is None else float(noise_multiplier)
        self.private = bool(private)
        self.mean = torch.tensor(list(normalize_mean), dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(list(normalize_std), dtype=torch.float32).view(1, -1, 1, 1)
        if torch.any(self.std <= 0):
            raise ValueError(f"model.normalize_std must be > 0, got {list(normalize_std)}")
        self.microbatch = int(microbatch)
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
        self.reports = False  # WA/BA/MA: only with accountant.data_dependent_reports=true (set in fit)

    # ------------------------------------------------------------------------------------
    def steps_planned(self, n_private: int) -> int:
        """``epochs * ceil(N / B)`` Poisson batches (each of expected size B = q N)."""
        return self.epochs * math.ceil(n_private / self.batch_size)

    def _normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Public per-channel constants (no statistic of the private data)."""
        return (x - self.mean.to(x.device)) / self.std.to(x.device)

    def fit(self, data: DataSplits, ledger: PrivacyLedger, ctx: TrainContext) -> dict:
        self.device = ctx.device
        c, h, _ = data.image_shape
        if self.mean.shape[1] not in (1, c) or self.std.shape[1] not in (1, c):
            raise ValueError(f"model.normalize_mean/std must have 1 or {c} entries for {data.name} images")
        self.net = self.make_network(in_channels=c, image_size=h, num_classes=data.num_classes).to(ctx.device)
        if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.net.modules()):
            raise ValueError("the network has BatchNorm: per-sample gradients are undefined for it in training "
                             "mode; use model.network.norm=group or none")
        n_priv = len(data.private)
        # secret randomness for sampling, noise and pair selection (module docstring)
        sampler_seed, noise_seed = secret_seed(ctx, 1), secret_seed(ctx, 2)
        sampler = PrivateSampler(data.private, self.batch_size, ledger.sampling, seed=sampler_seed)
        noise_gen = torch.Generator().manual_seed(noise_seed)
        q = sampler.sample_rate
        steps = self.steps_planned(n_priv)
        # WA/BA (and MA beside them) are computed from un-noised clipped gradients of private records: an
        # explicit opt-in whose run is labelled "not DP: data-dependent reports" (privacy.ledger)
        self.reports = self.private and ledger.data_dependent_reports
        if self.reports and ledger.sampling != "poisson":
            raise ValueError("accountant.data_dependent_reports=true (WA/BA/MA) is implemented for Poisson sampling "
                             "(add/remove pairs) only: set accountant.sampling=poisson or "
                             "accountant.data_dependent_reports=false")
        signature = {"n_private": n_priv, "dataset": data.name, "batch_size": self.batch_size, "epochs": self.epochs,
                     "private": self.private, "max_grad_norm": self.C, "sampling": ledger.sampling,
                     "data_dependent_reports": self.reports}

        if self.private:
            if self.noise_multiplier_cfg is None:  # sigma from accountant.epsilon (RDP) for the whole schedule
                sigma = noise_multiplier_for(ledger.calibrate(q, steps), ledger.sampling)
            else:
                sigma = self.noise_multiplier_cfg
        else:
            sigma = 0.0
        self.sigma = sigma
        if self.reports:  # reported-only accountants (never calibrate, never stop training)
            self.wa = WassersteinAccountant(self.wa_order, self.wa_beta)
            self.ba = BayesianAccountant(self.ba_orders, total_steps=steps, conf=self.ba_conf)
            self.ma = MomentsAccountant(self.ma_orders)
            for acct in (self.wa, self.ba, self.ma):
                ledger.add_reported(acct)

        opt = torch.optim.SGD(self.net.parameters(), lr=self.lr, momentum=self.momentum)
        start = 0
        if ctx.resume_from is not None:
            ck = load_resume_checkpoint(ctx.resume_from, signature)
            self.net.load_state_dict(ck["network"])
            opt.load_state_dict(ck["optimizer"])
            sampler.load_state_dict(ck["sampler"])
            ledger.load_state_dict(ck["ledger"])
            noise_gen.set_state(ck["noise_generator"])
            set_rng_state(ck["rng"])
            sigma = self.sigma = float(ck["noise_multiplier"])
            start = int(ck["step"])
        end = steps if ctx.max_steps is None else min(steps, ctx.max_steps)

        def save(step: int) -> None:
            atomic_save({"step": step, "signature": signature, "network": self.net.state_dict(),
                         "optimizer": opt.state_dict(), "sampler": sampler.state_dict(), "ledger": ledger.state_dict(),
                         "noise_generator": noise_gen.get_state(), "rng": rng_state(), "noise_multiplier": sigma},
                        ctx.checkpoint_path)

        # noise std sigma*C over the sensitivity (C add/remove, 2C replace-one): what the ledger records
        accounted = accounted_multiplier(sigma, ledger.sampling)
        allowance = ledger.allowance(accounted, q) if self.private else None
        used_since, stopped_by_budget = 0, False
        t0, step = time.time(), start
        self.net.train()
        progress = Progress(TextColumn("[bold]DP-SGD[/] {task.completed}/{task.total}" if self.private else
                                       "[bold]SGD[/] {task.completed}/{task.total}"), BarColumn(),
                            TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                            disable=not ctx.progress, transient=False)
        with progress:
            task = progress.add_task("train", total=end, completed=start, info="")
            for step in range(start, end):
                if self.private and used_since >= allowance:
                    stopped_by_budget = True  # the next step would exceed accountant.epsilon (RDP)
                    break
                x, y = sampler.sample()
                if self.private:
                    grads, distances = self._private_step(x, y, sigma, q * n_priv, noise_gen)
                    ledger.record(accounted, q)                     # the release of line 7
                    if self.reports:                                # opt-in, not covered by epsilon
                        self.wa.step(distances, sigma * self.C, q)
                        self.ba.step(distances, sigma * self.C, q)
                        self.ma.step(self.C, sigma * self.C, q)
                    used_since += 1
                else:
                    grads = self._plain_step(x, y)
                    ledger.record(0.0, q)  # an un-noised access to a private batch: epsilon = inf
                if not all(torch.isfinite(g).all() for g in grads.values()):
                    raise NonFiniteLossError(step, "gradient")
                assign_grads(self.net, grads)
                opt.step()
                done = step + 1
                if done % ctx.log_every == 0 or done == end:
                    row = {"steps_per_s": (done - start) / max(time.time() - t0, 1e-9)}
                    if self.private:
                        row.update({"epsilon_rdp": ledger.epsilon(accountant="rdp"),
                                    **{f"epsilon_{k}": a.epsilon(ledger.delta) for k, a in ledger.reported.items()}})
                    ctx.logger.log_metrics(row, step=done)
                    progress.update(task, info=f"eps(RDP) {row['epsilon_rdp']:.3f}" if self.private else "")
                if done % ctx.checkpoint_every == 0:
                    save(done)
                progress.update(task, completed=done)
            else:
                step = end
        final_step = step if stopped_by_budget else end
        save(final_step)
        atomic_save({"network": self.net.state_dict(), "signature": signature}, ctx.run_dir / "classifier.pt")
        train_time = time.time() - t0
        return {"train_steps": final_step, "steps_planned": steps, "stopped_by_budget": stopped_by_budget,
                "train_time_s": train_time, "steps_per_s": (final_step - start) / max(train_time, 1e-9),
                "noise_multiplier": sigma, "noise_std": sigma * self.C if self.private else 0.0,
                "accounted_noise_multiplier": accounted,
                "sensitivity_on_sum": sensitivity_in_clip_norms(ledger.sampling) * self.C,
                "max_grad_norm": self.C, "sample_rate": q, "epochs_done": final_step * q,
                "pairs_per_step": self.n_pairs if self.reports else 0, "pair_mode": self.pair_mode,
                "guarantee": "rigorous (RDP/PLD)" if self.private else "none (non-private)"}

    # ------------------------------------------------------------------------------------
    def _private_step(self, x: torch.Tensor, y: torch.Tensor, sigma: float, expected_batch: float,
                      noise_gen: torch.Generator) -> tuple[dict[str, torch.Tensor], list[float]]:
        """Lines 5-7 on one private batch, in microbatches.  Returns the private gradient and (only with
        ``self.reports``, the data-dependent opt-in) the pair distances for WA/BA, else ``[]``.  The
        per-sample gradients die with this frame."""
        x, y = self._normalize(x.to(self.device)), y.to(self.device)
        n = x.shape[0]
        params = {k: v.detach() for k, v in self.net.named_parameters() if v.requires_grad}
        total = {k: torch.zeros_like(v) for k, v in params.items()}
        m = min(self.pair_samples, n)
        chosen = torch.randperm(n, generator=noise_gen)[:m].tolist() if n and self.reports else []
        chosen_set = set(chosen)
        pair_vecs: list[torch.Tensor] = []
        for i in range(0, n, self.microbatch):
            g = per_sample_grads(self.net, _loss_one, x[i:i + self.microbatch], y[i:i + self.microbatch],
                                 params=params)
            clipped, _ = clip_per_sample(g, self.C)                          # line 6
            for k, v in clipped.items():
                total[k] += v.sum(dim=0)
            rows = [j - i for j in range(i, min(i + self.microbatch, n)) if j in chosen_set]
            if rows:
                pair_vecs.append(torch.cat([v[rows].flatten(1) for v in clipped.values()], dim=1))
            del g, clipped
        # line 7: noise on the SUM (sensitivity C under add/remove), divide by the public q N
        private = noisy_mean({k: v.unsqueeze(0) for k, v in total.items()}, self.C, sigma, expected_batch, noise_gen)
        distances = self._pair_distances(pair_vecs, noise_gen) if self.reports else []
        return private, distances

    def _pair_distances(self, pair_vecs: list[torch.Tensor], noise_gen: torch.Generator) -> list[float]:
        """Distances between neighbouring releases (module docstring, ``pair_mode``); padded with the
        public worst case (C, or 2C for ``loo``) when the batch had fewer than ``pair_samples`` members."""
        worst = self.C if self.pair_mode == "add_remove" else 2.0 * self.C
        want = self.n_pairs
        d: list[float] = []
        if pair_vecs:
            vecs = torch.cat(pair_vecs, dim=0)
            if self.pair_mask_keep < 1.0:  # one Bernoulli coordinate mask for all vectors (authors' recipe)
                keep = torch.rand(vecs.shape[1], generator=noise_gen) < self.pair_mask_keep
                vecs = vecs * keep.to(vecs.device, vecs.dtype)
            if self.pair_mode == "add_remove":
                d = vecs.double().norm(dim=1).tolist()
            elif vecs.shape[0] >= 2:
                d = pairwise_distances(vecs).tolist()
        return d + [worst] * (want - len(d))

    @property
    def n_pairs(self) -> int:
        """Pair distances per step: P (add_remove) or P(P-1)/2 (loo)."""
        p = self.pair_samples
        return p if self.pair_mode == "add_remove" else p * (p - 1) // 2

    def _plain_step(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        """Non-private SGD step on the mean loss (``private=false`` baseline; recorded with noise 0, so the
        run reports epsilon = inf like every other non-private baseline)."""
        x, y = self._normalize(x.to(self.device)), y.to(self.device)
        self.net.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.net(x), y) if x.shape[0] else None
        if loss is None:
            return {k: torch.zeros_like(p) for k, p in self.net.named_parameters()}
        loss.backward()
        return {k: p.grad.detach().clone() for k, p in self.net.named_parameters()}

    # ------------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, x: torch.Tensor, batch_size: int = 1000) -> torch.Tensor:
        """Logits ``(n, classes)`` for PUBLIC/test images ``x: (n, C, H, W)`` in [0, 1] (on cpu)."""
        if self.net is None:
            raise RuntimeError("call fit() before predict()")
        self.net.eval()
        out = [self.net(self._normalize(x[i:i + batch_size].to(self.device))).cpu()
               for i in range(0, x.shape[0], batch_size)]
        self.net.train()
        return torch.cat(out) if out else torch.zeros(0)
