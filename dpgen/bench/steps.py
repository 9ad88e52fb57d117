"""Per-step cost before / after, timed side by side in one run.

Each "before" below is the step as it was before its optimisation: a faithful, bench-only copy of
the part that changed (not part of ``dpgen``: a generator's forward, the transport map, the DP-SGD
release) run in the library's current step; each "after" is the library's current step on the same
inputs.  Repeats
are interleaved (before, after, after, before, ...) so that a change of the machine's load hits
both sides alike; every figure is CPU time (``time.process_time``, one torch thread).  A step
whose ratio stays below ×2 gets the profile of its "after" side (top operators by self CPU time
and their share), which shows where the floor is.

* DP-SWD generator step (``mnist_dpswd``: B = 100, k = 1000, D = 784, partition; and
  ``digits_dpswd``: B = 100, k = 200, D = 64): before = generator in NCHW layout; after = the
  channels-last ``ConvCondGen`` (same values; oneDNN's convolutions with 16 / 8 / 1 channels are
  about twice as fast in that layout).
* DP-Sinkhorn step (``mnist_dpsinkhorn``: B = 50 Poisson + 20 debiasing rows, L1+L2, λ = 0.05,
  ε-scaling 0.9 unchanged): before = DCGAN generator in NCHW; after = channels-last from its first layer.
* DPSWflow-r step at 30,000 particles (d = 8, N_θ = 70, b = 250, M = 30,000 levels): before = the
  literal three-call transport map (``transport_map_reference``); after = the one-sort map.
* DP-SGD private gradient (mnist_dpsgd CNN, batch 256, DP run: no data-dependent reports): before =
  per-sample gradients in chunks of 128, clipped copies built by ``torch.cat`` norms and summed;
  after = chunks of 16, norms per tensor and the clipped sum as one ``tensordot`` per parameter
  (``privacy.dpsgd.clipped_sum``), noise from the same ``NoisyGradientSum``.
"""

from __future__ import annotations

import os
import statistics
import textwrap
import time
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F

from dpgen.privacy.mechanisms import NoisyGradientSum

from .timing import ms_spread

REPEATS = 7


# -- the "before" references (bench-only copies of the unoptimised steps) ----------------------
def convcondgen_forward_before(G, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``ConvCondGen.forward`` before optimisation (NCHW throughout)."""
    from dpgen.models.generators import with_label

    x = F.relu(G.bn1(G.fc1(with_label(z, y, G.n_labels))))
    x = G.bn2(G.fc2(x)).view(-1, G.c0, G.h0, G.w0)
    x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
    x = F.relu(G.conv1(x))
    x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
    return torch.sigmoid(G.conv2(x))


def dcgan_forward_before(G, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
    """``DCGANCondGenerator.forward`` before optimisation (NCHW throughout)."""
    if y is None:
        y = torch.zeros(z.shape[0], dtype=torch.long, device=z.device)
    return G.net(torch.cat([z, G.embed(y)], dim=1)[:, :, None, None])


def with_forward(G, forward):
    """``G`` running ``forward(G, z, y)`` in place of its own ``forward`` (same parameters, same optimiser)."""
    G.forward = partial(forward, G)
    return G


def dpswd_step_before(m, t: int) -> dict:
    """``DPSWDGenerator.step`` before optimisation: the same step with the generator forward in NCHW."""
    with_forward(m.G, convcondgen_forward_before)
    return {k: float(v) for k, v in m.step(t).items()}


def dpsinkhorn_step_before(m, t: int) -> dict:
    """``DPSinkhorn.step`` before optimisation: the same step with the generator forward in NCHW."""
    with_forward(m.G, dcgan_forward_before)
    return {k: float(v) for k, v in m.step(t).items()}


def flow_r_step_before(x, y, k, levels, sigma, h=3.0, reg=0.0):
    """One DPSWflow-r step (fresh directions, released target quantiles, drift, Euler-Maruyama) with
    the literal transport map ``F_target^{-1}(F_particles(z))`` of three separate calls."""
    from dpgen.ot import gaussian_projection_release, random_directions
    from dpgen.ot.flows import (
        empirical_quantiles,
        euler_maruyama_step,
        smoothed_projections,
        transport_map_reference,
    )

    u = random_directions(x.shape[1], k, device=x.device)
    tq = empirical_quantiles(gaussian_projection_release(y, u, sigma).T.contiguous(), levels)
    proj = smoothed_projections(x, u, sigma)
    t = transport_map_reference(proj, tq, levels)
    v = (proj - t).transpose(0, 1) @ u.transpose(0, 1) / u.shape[1]
    return euler_maruyama_step(x, v, h, reg)


def flow_r_step_after(x, y, k, levels, sigma, h=3.0, reg=0.0):
    """The same step through the library (``flow_step``: one-sort transport map)."""
    from dpgen.ot import gaussian_projection_release, random_directions
    from dpgen.ot.flows import empirical_quantiles, flow_step

    u = random_directions(x.shape[1], k, device=x.device)
    tq = empirical_quantiles(gaussian_projection_release(y, u, sigma).T.contiguous(), levels)
    return flow_step(x, u, tq, levels, sigma, h, reg)


def clip_per_sample_before(grads: dict, max_norm: float) -> dict:
    """``privacy.dpsgd.clip_per_sample`` before optimisation: norms of one concatenated copy, clipped copies."""
    norms = torch.cat([g.flatten(1) for g in grads.values()], dim=1).norm(dim=1)
    scale = (max_norm / norms.clamp_min(1e-12)).clamp(max=1.0)
    return {k: g * scale.view(-1, *([1] * (g.dim() - 1))) for k, g in grads.items()}


class NoisyGradientSumBefore(NoisyGradientSum):
    """``NoisyGradientSum`` with its ``release`` as it was before optimisation (without the data-dependent
    ``observe``): clip every chunk into a copy, sum it, then the mechanism's own noise draw (``noised_sum``: one
    flat draw from the same generator, so the two releases add the same numbers) (recorded)."""

    def release(self, per_sample, observe=None) -> dict:
        total = None
        for chunk in per_sample:
            clipped = clip_per_sample_before(chunk, self.clip_norm)
            if total is None:
                total = {k: torch.zeros_like(v[0]) if v.shape[0] else v.new_zeros(v.shape[1:]) for k, v in clipped.items()}
            for k, v in clipped.items():
                total[k] += v.sum(dim=0)
        noisy = self.noised_sum(list(total.values()))
        out = {k: s / self.expected_batch_size for k, s in zip(total, noisy, strict=True)}
        self._record()
        return out


# -- the benchmark's set-ups -------------------------------------------------------------------------
def _ctx(device):
    from dpgen.methods import TrainContext

    return TrainContext(device=device, logger=None, run_dir=Path("."), progress=False, deterministic=True)


def dpswd_method(device, preset: str = "mnist"):
    """A set-up ``DPSWDGenerator`` of the preset's shapes (random pixels; timing does not depend on them).
    sigma is the preset's order of magnitude, set directly (the calibration is benchmarked elsewhere)."""
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit
    from dpgen.methods.dpswd_generator import DPSWDGenerator
    from dpgen.models import ConvCondGen
    from dpgen.privacy import PrivacyLedger, ProjectionDP
    from dpgen.privacy.mechanisms import GaussianProjectionRelease
    from dpgen.privacy.noise import NotPrivate

    n, side, k = (60000, 28, 1000) if preset == "mnist" else (1347, 8, 200)
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(n, 1, side, side, generator=g), torch.randint(10, (n,), generator=g)
    data = DataSplits("bench", PrivateSplit(x, y), TensorSplit(x[:10], y[:10]), None, 10, (1, side, side))
    m = DPSWDGenerator(partial(ConvCondGen, d_code=10, hidden=200, channels=(16, 8), kernel_size=5),
                       dp=ProjectionDP(k, "bernstein"), batch_size=100, epochs=100, lr=1e-4, label_mode="partition", private=False)
    m.setup(data, PrivacyLedger(10.0, 1e-5), _ctx(device))
    p = m.projection  # the same release with the smoothing noise of a non-private run (std 3)
    m.projection = GaussianProjectionRelease(p.ledger, dim=p.dim, num_projections=p.k, steps=p.steps,
                                             sample_rate=p.sample_rate, n_private=p.n_private, noise=NotPrivate(3.0),
                                             seed=0)
    m.mechanisms = {"projection": m.projection}
    return m


def dpsinkhorn_method(device):
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit
    from dpgen.methods.dpsinkhorn import DPSinkhorn
    from dpgen.models import DCGANCondGenerator
    from dpgen.privacy import PrivacyLedger

    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(60000, 1, 28, 28, generator=g), torch.randint(10, (60000,), generator=g)
    data = DataSplits("bench", PrivateSplit(x, y), TensorSplit(x[:10], y[:10]), None, 10, (1, 28, 28))
    m = DPSinkhorn(partial(DCGANCondGenerator), batch_size=50, steps=10, m=1.0, noise_multiplier=1.1, lr=1e-5)
    m.setup(data, PrivacyLedger(10.0, 1e-5), _ctx(device))
    return m


def dpsgd_setup(device, batch: int = 256, before: bool = False):
    """The mnist_dpsgd CNN, a DP run's ``NoisyGradientSum`` (no data-dependent reports; ``before``: its release
    before optimisation, in chunks of 128), one batch."""
    from dpgen.methods.dpsgd_classifier import DPSGDClassifier
    from dpgen.models import mnist_convnet
    from dpgen.privacy import PrivacyLedger
    from dpgen.privacy.noise import FixedMultiplier

    torch.manual_seed(0)
    m = DPSGDClassifier(network=mnist_convnet, batch_size=batch, normalize_mean=(0.1307,), normalize_std=(0.3081,),
                        microbatch=128 if before else 16)
    m.net, m.device, m.reports = mnist_convnet().to(device), device, False
    release = NoisyGradientSumBefore if before else NoisyGradientSum
    m.gradient_release = release(PrivacyLedger(None, 1e-5), clip_norm=1.0, sample_rate=batch / 60000,
                                 expected_batch_size=float(batch), noise=FixedMultiplier(1.0), seed=0)
    x, y = m.normalize(torch.rand(batch, 1, 28, 28).to(device)), torch.randint(10, (batch,)).to(device)
    return m, x, y


# -- timing and profiles ------------------------------------------------------------------------------
def side_by_side(*fns, repeats: int = REPEATS) -> list[list[float]]:
    """CPU seconds of each ``fn()``, one warm-up each, then ``repeats`` interleaved rounds (the order
    reversed on odd rounds, so a drift of the machine's load hits every side alike)."""
    for fn in fns:
        fn()
    out: list[list[float]] = [[] for _ in fns]
    for r in range(repeats):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            t = time.process_time()
            fns[i]()
            out[i].append(time.process_time() - t)
    return out


def profile_top(fn, steps: int = 5, top: int = 6) -> str:
    """``fn`` under torch.profiler: the ``top`` operators by self CPU time and their share of the total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(steps):
            fn()
    ev = sorted(p.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in ev) or 1.0
    return ", ".join(f"{e.key} {100 * e.self_cpu_time_total / total:.0f} %" for e in ev[:top])


def cases(device: torch.device) -> list[tuple]:
    """``(name, before, after, note[, anchor])`` for every step of the table (anchor: timed beside them)."""
    from dpgen.ot.flows import quantile_levels

    out = []
    for preset, label in (("mnist", "DP-SWD generator step, mnist_dpswd (B = 100, k = 1000, D = 784, partition)"),
                          ("digits", "DP-SWD generator step, digits_dpswd (B = 100, k = 200, D = 64, partition)")):
        torch.manual_seed(0)
        mb, ma = dpswd_method(device, preset), dpswd_method(device, preset)
        out.append((label, partial(dpswd_step_before, mb, 0), partial(ma.step, 0), "generator layout"))
    torch.manual_seed(0)
    sb, sa = dpsinkhorn_method(device), dpsinkhorn_method(device)
    out.append(("DP-Sinkhorn step, mnist_dpsinkhorn (B = 50 + 20 debias rows, L1+L2, λ = 0.05, scaling 0.9)",
                partial(dpsinkhorn_step_before, sb, 0), partial(sa.step, 0), "generator layout"))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(30000, 8, generator=g).to(device)
    y = F.normalize(torch.randn(250, 8, generator=g), dim=1).to(device)
    levels = quantile_levels(30000, device=device)

    def flow(fn):
        def run():
            with torch.no_grad():
                fn(x, y, 70, levels, 5.05)
        return run

    out.append(("DPSWflow-r step, 30,000 particles (d = 8, N_θ = 70, b = 250, M = 30,000 levels)",
                flow(flow_r_step_before), flow(flow_r_step_after), "one-sort transport map"))
    (mb, xb, yb), (ma, _, _) = dpsgd_setup(device, before=True), dpsgd_setup(device)
    out.append(("DP-SGD private gradient, mnist_dpsgd CNN, batch 256 (per-sample grads, clip, sum, noise)",
                partial(mb.private_gradient, xb, yb), partial(ma.private_gradient, xb, yb),
                "clipped sum, chunks of 16", partial(ma.plain_gradient, xb, yb)))
    return out


def section(device: torch.device) -> str:
    """The markdown section ``dpgen/bench/run.py`` writes into docs/benchmarks.md (one torch thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _section(device)
    finally:
        torch.set_num_threads(threads)


def _section(device: torch.device) -> str:
    load = os.getloadavg()
    lines = ["## Per-step cost before / after", "",
             *textwrap.wrap(
             "How to read it: each row times the step as it was before optimisation (a bench-only copy in "
             "`dpgen/bench/steps.py`) and the library's step now, on the same inputs, in the same process, "
             f"with {REPEATS} interleaved repeats (before/after alternating), one torch thread, CPU time "
             "(`time.process_time`). The ratio is median(before) / median(after); absolute figures depend on the "
             "machine's load (given below), the ratio much less, and a ratio whose sides spread by more than ×1.5 "
             "is flagged. For the rows below ×2 the profile of the after step (top operators by self CPU time, share "
             "of the step), which is where the floor is, is listed under the table. `dpgen bench --only steps` regenerates this "
             "section alone.", 110, break_long_words=False, break_on_hyphens=False), "",
             f"Machine: {os.cpu_count()} CPU threads, torch {torch.__version__} ({torch.get_num_threads()} thread), "
             f"load average at the start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min).", "",
             "| step | before | after | before / after | change |",
             "|---|---|---|---|---|"]
    profiles = []
    for name, before, after, note, *anchor in cases(device):
        print(f"[bench] steps: {name} ...", flush=True)
        tb, ta, *tp = side_by_side(before, after, *anchor)
        ratio = statistics.median(tb) / statistics.median(ta)
        noisy = max(max(t) / min(t) for t in (tb, ta, *tp)) > 1.5
        if tp:  # the non-private gradient of the same net and batch, timed in the same rounds
            p = statistics.median(tp[0])
            note += (f"; non-private gradient {ms_spread(tp[0])}: before ×{statistics.median(tb) / p:.2f}, "
                     f"after ×{statistics.median(ta) / p:.2f} of it")
        if ratio < 2.0:
            profiles += textwrap.wrap(f"{name}: {profile_top(after)}", 110, initial_indent="* ", subsequent_indent="  ",
                                      break_long_words=False, break_on_hyphens=False)
        lines.append(f"| {name} | {ms_spread(tb)} | {ms_spread(ta)} | ×{ratio:.2f}{' (noisy)' if noisy else ''} | {note} |")
    if profiles:
        lines += ["", "Profile of the after step, for the rows below ×2:", "", *profiles]
    end = os.getloadavg()
    lines += ["", f"Load average at the end: {end[0]:.1f} / {end[1]:.1f} / {end[2]:.1f}."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(section(torch.device("cpu")))
