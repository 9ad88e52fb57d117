"""Vectorised runs of each private release on neighbouring inputs, scored by a distinguisher.

Every ``*_scores`` function runs the release ``runs`` times on D (canary out) and ``runs`` times on
D' (canary in) with the library's own release code, batched over the runs (one tensor op per
chunk of runs), and returns the two score vectors ``(scores_out, scores_in)``, each ``(runs,)``.
The score is the exact log-likelihood ratio ``log p(o | D') / p(o | D)`` of the output ``o`` where it
is known (a Gaussian release with a known mean difference: linear in ``o``), so thresholding it is
the most powerful test (Neyman-Pearson).  The auditor is white-box: it knows D, D' and the public
randomness (the directions U), never the noise.

Nothing here writes anything: canaries and outputs live only in these functions' tensors.
Pure torch; no Hydra.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from ..ot.sliced import gaussian_projection_release
from ..privacy.dpsgd import clip_per_sample
from ..privacy.image_gradient import clip_whole, sanitize

RELATIONS = ("add_remove", "replace_one")

# ``noise_fn(shape, like) -> N(0, s^2)`` of that shape: a mechanism object's ``noise`` (its own generator
# and calibrated std), so the audit draws the noise the run's code draws
NoiseFn = Callable[[tuple, torch.Tensor], torch.Tensor]


def _chunks(runs: int, chunk: int):
    if runs < 1:
        raise ValueError(f"audit runs R must be >= 1, got {runs}")
    done = 0
    while done < runs:
        c = min(chunk, runs - done)
        yield c
        done += c


def batched_directions(runs: int, d: int, k: int, generator: torch.Generator, kind: str = "random") -> torch.Tensor:
    """``(runs, d, k)``: fresh directions per run, drawn as the mechanism draws them: ``random`` as
    ``ot.sliced.random_directions`` (Gaussian columns divided by their L2 norm: uniform on ``S^{d-1}``),
    ``orthogonal`` as ``ot.sliced.orthogonal_directions`` (``ceil(k/d)`` Haar-orthonormal ``d x d`` blocks,
    QR of Gaussian matrices with the signs of ``diag(R)``, truncated to k columns)."""
    if kind == "random":
        u = torch.randn(runs, d, k, generator=generator, dtype=torch.float64)
        return u / u.norm(dim=1, keepdim=True)
    if kind != "orthogonal":
        raise ValueError(f"unknown directions {kind!r}; choose random or orthogonal")
    blocks = []
    for _ in range(math.ceil(k / d)):
        q, r = torch.linalg.qr(torch.randn(runs, d, d, generator=generator, dtype=torch.float64))
        blocks.append(q * torch.sign(torch.diagonal(r, dim1=1, dim2=2))[:, None, :])
    return torch.cat(blocks, dim=2)[:, :, :k]


# -- DP-SWD / DPSWflow-r / DPSWgen / DPSWflow one-shot: X U + N(0, sigma^2) -----------------------
def projection_release_scores(rows_out: torch.Tensor, rows_in: torch.Tensor, k: int, noise_std: float,
                              runs: int, *, generator: torch.Generator, chunk: int = 256,
                              noise_fn: NoiseFn | None = None, directions: str = "random",
                              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run ``M(X) = X U + V`` (``ot.sliced.gaussian_projection_release``) ``runs`` times on each side.

    ``rows_out, rows_in: (n, d)`` are the released rows of D and D' (after whatever row map the
    audited configuration applies; they may differ in one row or, for data-dependent scalings, in
    all of them).  U is drawn fresh per run (public), so given U the output is Gaussian with mean
    ``X U`` and the exact log-likelihood ratio is

        LLR(o) = ( <o - X U, A> - ||A||_F^2 / 2 ) / sigma^2,    A = (X' - X) U.

    ``noise_fn``: draw V with a mechanism's own ``noise`` (std ``noise_std`` must be its std);
    default: ``ot.sliced.gaussian_projection_release``.  ``directions``: how U is drawn (the mechanism's
    ``random`` | ``orthogonal``, :func:`batched_directions`).
    Returns ``(scores_out, scores_in, projected_diff)`` with ``projected_diff = ||A||_F`` per run
    (the realised sensitivity; on D' runs) for the report.
    """
    if rows_out.shape != rows_in.shape or rows_out.dim() != 2:
        raise ValueError(f"rows of D and D' must both be (n, d), got {tuple(rows_out.shape)}, {tuple(rows_in.shape)}")
    if noise_std <= 0:
        raise ValueError(f"noise_std must be > 0 for an audit, got {noise_std}")
    x0, x1 = rows_out.double(), rows_in.double()
    n, d = x0.shape
    s_out, s_in, diffs = [], [], []
    for side, x in ((0, x0), (1, x1)):
        for c in _chunks(runs, chunk):
            u = batched_directions(c, d, k, generator, directions)            # (c, d, k)
            if noise_fn is None:
                o = gaussian_projection_release(x.expand(c, n, d), u, noise_std, generator=generator)  # (c, n, k)
            else:
                p = x.expand(c, n, d) @ u
                o = p + noise_fn(p.shape, p)
            a = (x1 - x0) @ u                                                 # (c, n, k)
            llr = ((o - x0 @ u) * a).sum(dim=(1, 2)) - 0.5 * a.pow(2).sum(dim=(1, 2))
            (s_in if side else s_out).append((llr / noise_std**2).numpy())
            if side:
                diffs.append(a.pow(2).sum(dim=(1, 2)).sqrt().numpy())
    return np.concatenate(s_out), np.concatenate(s_in), np.concatenate(diffs)


def antipodal_rows(base: torch.Tensor, index: int, radius: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Worst-case replace-one pair for rows constrained to the ball of ``radius``: row ``index`` is
    ``radius * v`` in D and ``-radius * v`` in D' (v = that row's direction), so
    ``||x - x'|| = 2 radius``, the largest difference the sensitivity bound allows."""
    v = base[index] / base[index].norm().clamp_min(1e-12)
    d0, d1 = base.clone(), base.clone()
    d0[index], d1[index] = radius * v, -radius * v
    return d0, d1


# -- DP-Sinkhorn image-gradient sanitiser: clip_C(G) + N(0, (2 C sigma)^2) ------------------------
def sanitizer_scores(g_out: torch.Tensor, g_in: torch.Tensor, clip_norm: float, sigma: float, runs: int, *,
                     steps: int = 1, generator: torch.Generator, chunk: int = 1024, clip: str = "whole",
                     noise_fn: NoiseFn | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` releases of ``privacy.image_gradient.sanitize`` per run on the cross-group
    gradients ``g_out`` (from D) and ``g_in`` (from D'), each ``(n, D)``; the same pair at every
    step (the canary is in every batch: the composed worst case).

    Vectorised: ``sanitize(0)`` is exactly the sanitiser's noise (clipping a zero tensor is the
    identity), drawn for ``chunk * steps`` runs in one call; the clipped tensors are deterministic and
    computed once with the sanitiser's own clipping.  With ``s = 2 C sigma`` and
    ``A = clip(g_in) - clip(g_out)`` the exact log-likelihood ratio of the ``steps`` outputs is
    ``sum_t (<o_t - clip(g_out), A> - ||A||^2 / 2) / s^2``.  ``noise_fn``: a mechanism's own noise
    (``ImageGradientSanitiser.noise``, std ``2 C sigma``) instead of ``sanitize(0)``.
    """
    if clip != "whole":
        raise ValueError("the vectorised sanitiser audit covers model.clip=whole (the DP-Sinkhorn default)")
    c0, c1 = clip_whole(g_out.double(), clip_norm).flatten(), clip_whole(g_in.double(), clip_norm).flatten()
    a = c1 - c0
    s = 2.0 * clip_norm * sigma
    scores = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
        for c_side in (c0, c1):
            out = []
            for c in _chunks(runs, chunk):
                zeros = torch.zeros(c * steps, c0.numel(), dtype=torch.float64)
                noise = sanitize(zeros, clip_norm, sigma) if noise_fn is None else noise_fn(zeros.shape, zeros)
                o = c_side + noise                                     # (c * steps, n D): released tensors
                llr = ((o - c0) @ a - 0.5 * a.dot(a)) / s**2
                out.append(llr.view(c, steps).sum(dim=1).numpy())
            scores.append(np.concatenate(out))
    return scores[0], scores[1]


def sanitizer_canary(shape: tuple[int, int], clip_norm: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Worst case for whole-tensor clipping: two cross-group gradients far outside the C-ball in
    opposite directions, so the clipped tensors are ``+C e`` and ``-C e``: difference 2C."""
    e = torch.ones(shape, dtype=torch.float64) / math.sqrt(shape[0] * shape[1])
    return 10.0 * clip_norm * e, -10.0 * clip_norm * e


# -- DP-SGD noisy sum (privacy.mechanisms.NoisyGradientSum): sum_i clip_C(g_i) + N(0, s^2) ----------
def noisy_sum_scores(grads: torch.Tensor, canary: torch.Tensor, clip_norm: float, noise_std: float,
                     runs: int, *, relation: str = "add_remove", sample_rate: float = 1.0, steps: int = 1,
                     generator: torch.Generator, chunk: int = 2048,
                     noise_fn: NoiseFn | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``steps`` DP-SGD releases (``NoisyGradientSum``: ``clip_per_sample`` then noise on the sum) per run.

    ``grads: (b, P)`` per-sample gradients of D; ``canary: (P,)`` the canary's gradient (clipped to
    C by the library's ``clip_per_sample``).  D' is D plus the canary (``add_remove``) or D with
    record 0 replaced by it (``replace_one``).  With Poisson subsampling the canary joins each step's
    batch with probability ``q`` (the other records are always in: a known shift for the white-box
    auditor, the worst case).  Vectorised: the clipped sum is computed once per side, the noise for
    all ``c * steps`` releases of a chunk is one ``noise_fn((c * steps, P))`` call (the mechanism's own
    generator and std; default ``torch.randn * noise_std``).  Division by the public q N is
    post-processing and omitted.

    Per step, ``y = <o - S_D, A> / (s ||A||)`` is N(0, 1) on D and N(B mu, 1) on D' with
    ``mu = ||A|| / s`` and ``B ~ Bernoulli(q)``, so the exact log-likelihood ratio is
    ``sum_t log(1 - q + q exp(mu y_t - mu^2 / 2))``.
    """
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    if not 0.0 < sample_rate <= 1.0:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if noise_std <= 0:
        raise ValueError(f"noise_std must be > 0 for an audit, got {noise_std}")
    g = grads.double()
    cl_d, _ = clip_per_sample({"w": g}, clip_norm)
    cl_c, _ = clip_per_sample({"w": canary.double()[None]}, clip_norm)
    if relation == "add_remove":
        s_d, s_in = cl_d["w"].sum(0), cl_d["w"].sum(0) + cl_c["w"][0]
    else:
        s_d, s_in = cl_d["w"].sum(0), cl_c["w"][0] + cl_d["w"][1:].sum(0)
    a = s_in - s_d
    a_norm = float(a.norm())
    mu = a_norm / noise_std
    if noise_fn is None:
        def noise_fn(shape, like):
            return noise_std * torch.randn(tuple(shape), generator=generator, dtype=like.dtype)
    scores = []
    for side in (0, 1):
        out = []
        for c in _chunks(runs, chunk):
            m = c * steps
            if side:
                keep = (torch.rand(m, generator=generator, dtype=torch.float64) < sample_rate).double() \
                    if sample_rate < 1 else torch.ones(m, dtype=torch.float64)
                mean = s_d[None, :] + keep[:, None] * a[None, :]          # canary in this step's batch or not
            else:
                mean = s_d[None, :].expand(m, -1)
            o = mean + noise_fn((m, a.numel()), a)                          # (m, P): the released sums
            y = ((o - s_d) @ a) / (noise_std * a_norm)
            llr = mu * y - mu**2 / 2
            if sample_rate < 1:  # the canary was in this step's batch with probability q
                llr = torch.logaddexp(torch.full_like(y, math.log1p(-sample_rate)), math.log(sample_rate) + llr)
            out.append(llr.view(c, steps).sum(dim=1).numpy())
        scores.append(np.concatenate(out))
    return scores[0], scores[1]


def noisy_sum_canary(grads: torch.Tensor, clip_norm: float, relation: str = "add_remove") -> torch.Tensor:
    """A gradient canary at the clipping boundary: norm ``10 C`` (clipped to C), pointing away from
    the data's mean gradient; for ``replace_one`` record 0 of D is set to the opposite direction so
    the clipped difference is 2C.  Returns the canary and modifies nothing in place."""
    mean = grads.double().mean(dim=0)
    e = -mean / mean.norm() if mean.norm() > 0 else torch.ones_like(mean) / math.sqrt(mean.numel())
    return 10.0 * clip_norm * e


def replace_one_batch(grads: torch.Tensor, canary: torch.Tensor) -> torch.Tensor:
    """D for the replace-one audit: record 0 replaced by the canary's opposite (difference 2C after clipping)."""
    out = grads.double().clone()
    out[0] = -canary.double()
    return out


# -- DP class-Gaussian: v(D) + N(0, s^2 I), v = [w0 n_c, w1 s_c, w2 vec(M_c)]_c ------------------
def class_moment_scores(v_out: torch.Tensor, v_in: torch.Tensor, noise_std: float, runs: int, *,
                        noise_fn: NoiseFn, noise_scale: float = 1.0,
                        chunk: int = 1 << 20) -> tuple[np.ndarray, np.ndarray]:
    """Run ``privacy.moments.ClassMomentRelease`` ``runs`` times per side through its sufficient statistic.

    ``v_out, v_in: (C, 1 + K + K^2)`` are the weighted class-moment vectors of D and D'
    (``class_moment_vector``).  The output is ``o = v + N`` with ``N ~ N(0, s^2 I)``; with
    ``A = v_in - v_out`` the exact log-likelihood ratio is

        LLR(o) = ( <o - v_out, A> - ||A||^2 / 2 ) / s^2,

    which depends on o only through ``<N, e>``, ``e = A / ||A||``, and ``<N, e> ~ N(0, s^2)`` exactly
    (isotropic noise).  So each run draws ONE coordinate with the mechanism's own ``noise_fn`` (its
    generator and calibrated std) instead of all ``C (1 + K + K^2)`` (41 610 for the 8x8 digits), which
    makes R = 10^7 affordable; ``noise_scale`` multiplies the drawn noise (0.5: the halved-noise check).
    """
    a = (v_in.double() - v_out.double()).flatten()
    a_norm = float(a.norm())
    if a_norm == 0:
        raise ValueError("D and D' give the same moment vector: the canary changes nothing")
    scores = []
    for shift in (0.0, a_norm**2):  # <v_side - v_out, A>: 0 on D, ||A||^2 on D'
        out = []
        for c in _chunks(runs, chunk):
            proj = noise_scale * noise_fn((c,), a)                    # <N, e>, (c,)
            out.append(((shift + a_norm * proj - 0.5 * a_norm**2) / noise_std**2).numpy())
        scores.append(np.concatenate(out))
    return scores[0], scores[1]
