"""Entropic OT and the semi-debiased Sinkhorn loss of DP-Sinkhorn (DP-Sinkhorn paper, semi-debiased Sinkhorn loss).

Entropic OT with uniform weights (Eq. 3 of the paper):

    W_{c,λ}(X, Y) = min_π  <C, π> + λ·KL(π | μ⊗ν),   C_ij = c(x_i, y_j)

solved with GeomLoss' log-domain Sinkhorn (``SamplesLoss("sinkhorn", debias=False)``).  GeomLoss returns the dual value <α, f> + <β, g>, equal to W at
convergence; its gradient w.r.t. a point x_i is Σ_j π_ij ∇_x c(x_i, y_j) (envelope theorem).

Settings (dpgen, all explicit):
* ``p=1`` so that GeomLoss' temperature ε = blur^p equals ``blur = λ`` exactly: λ is exposed
  directly and does not depend on the cost's power (the reference code's CelebA flags give
  ε = blur² = 25 while the paper states λ = 5; DP-Sinkhorn paper, cost functions).
* ``diameter`` = the largest cost the features can have, ``max_cost`` of their declared box (a public
  constant: pixels in [−1, 1], the label embedding), so that ε-scaling starts at the scale of the cost
  (GeomLoss' own estimate is the Euclidean bounding-box diagonal, far below the L2²+L1 cost on images,
  and is read back from the device) and anneals ε by ``scaling`` per iteration down to λ.  The schedule,
  hence the number of iterations, is fixed on the host before the step: nothing is read back from the
  device, and the step's work does not depend on the private batch.  ``diameter=None`` (generic use on
  public point clouds) takes the largest entry of the inputs' cost matrices instead, read back.
* ``scaling``: one Sinkhorn iteration per ε value, as GeomLoss does: ~18 iterations at 0.5 (GeomLoss'
  default, the DP-Sinkhorn authors' code, dpgen's digits presets) from the MNIST features' bound 5184 down
  to λ = 0.05, ~112 at 0.9 (this class's and ``model.scaling``'s default).
* :meth:`EntropicOT.pair` solves ``W(X, Y1)`` and ``W(X, Y2)`` (the semi-debiased loss' two terms) as
  one batched problem (``tensorized``, :func:`paired_sinkhorn`): GeomLoss' tensorized iteration written
  out so that both potentials of both problems take one soft-C-transform (one log-sum-exp) per ε; the
  clouds are padded to one size with rows of weight 0 (log-weight −10⁵, GeomLoss' value: they carry no
  mass, so both values are those of the separate problems to float rounding; equal to GeomLoss' batched
  solve to float64 rounding, tested).  About 6 device kernels per iteration instead of ~18.

Convergence, measured here against POT's log-domain Sinkhorn run to convergence (float64, λ = 0.05,
L1+L2): one iteration per ε leaves the potentials unconverged at both usual factors.  ``W(X, Y)`` of two
real batches in the features above is 1.3 % (8×8 digits, 16 rows) / 1.9 % (MNIST, 50 rows) low at 0.9 and
10 % / 9 % low at 0.5, and its gradient is off by 41 % / 53 % at 0.9 and 70 % / 67 % at 0.5 (relative
L2 error); at 0.99 both agree with POT to ≤ 3e-4.  The debiased divergence of (nearly) identical inputs
stays >= 0 with either factor.  On clustered low-dimensional points the gradient error falls slowly as the
factor approaches 1 (≈85 % at 0.5-0.9, 13 % at 0.99, 5 % at 0.995 for 12 points in [0,1]^5, λ = 0.05).  So
the factor is a speed / accuracy trade-off of the gradient the generator follows, judged by the trained
generator's utility (``docs/methods/dp-sinkhorn.md``), not by the solve alone.

Backends (``model.sinkhorn_backend``):
* ``tensorized`` (default): the full ``(N, M)`` cost matrix from the torch callable ``cost_matrix``.
* ``online``: GeomLoss' KeOps backend, the cost recomputed on the fly from the KeOps formula
  ``keops_cost_formula`` (same cost; GeomLoss uses a custom formula verbatim, exactly as it uses the
  callable, so p = 1 and ε = λ hold for both).  Needs ``pykeops`` (``pip install pykeops`` or the
  ``keops`` extra; CPU kernels are compiled with the system C++ compiler on first use).  The ε-scaling
  ``diameter`` is still taken from the torch cost matrix (one detached ``(N, M)`` evaluation per call).

Costs (``cost_matrix``), on features ``[flatten(x) ‖ e·onehot(y)]`` (class conditioning through
the cost, DP-Sinkhorn paper, semi-debiased Sinkhorn loss; e = ``embed_multiplier`` = 15):
  ``l2``    c(x, y) = ‖x − y‖²
  ``l1``    c(x, y) = ‖x − y‖₁
  ``l1+l2`` c_m(x, y) = ‖x − y‖² + m·‖x − y‖₁
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from functools import partial

import numpy as np
import torch

COSTS = ("l2", "l1", "l1+l2")
DEBIAS = ("none", "full", "semi")
BACKENDS = ("tensorized", "online")


def cost_matrix(x: torch.Tensor, y: torch.Tensor, cost: str = "l1+l2", m: float = 1.0) -> torch.Tensor:
    """``x: (..., N, D)``, ``y: (..., M, D)`` -> ``(..., N, M)`` pairwise costs (see module docstring)."""
    if cost not in COSTS:
        raise ValueError(f"model.cost={cost!r} is unknown; choose one of {COSTS}")
    out = None
    if cost in ("l2", "l1+l2"):
        # ‖x‖² + ‖y‖² − 2<x, y>, clamped at 0 (exact zero on the diagonal, finite gradient there)
        sq = (x * x).sum(-1, keepdim=True) + (y * y).sum(-1).unsqueeze(-2) - 2 * x @ y.transpose(-1, -2)
        out = sq.clamp_min(0.0)
    if cost in ("l1", "l1+l2"):
        l1 = torch.cdist(x, y, p=1)
        w = 1.0 if cost == "l1" else float(m)
        out = w * l1 if out is None else out + w * l1
    return out


def keops_cost_formula(cost: str = "l1+l2", m: float = 1.0) -> str:
    """The KeOps formula of ``cost_matrix(x, y, cost, m)`` in GeomLoss' variables ``X = Vi(D)``,
    ``Y = Vj(D)``: ``SqDist(X,Y)`` = ‖x − y‖², ``Sum(Abs(X-Y))`` = ‖x − y‖₁; ``m`` enters as the exact
    rational ``RatCst(p, q)`` with p/q = m (KeOps casts it to float32 in the generated code)."""
    if cost not in COSTS:
        raise ValueError(f"model.cost={cost!r} is unknown; choose one of {COSTS}")
    l2, l1 = "SqDist(X,Y)", "Sum(Abs(X-Y))"
    if cost == "l2":
        return l2
    if cost == "l1":
        return l1
    p, q = Fraction(float(m)).as_integer_ratio()
    return l2 if p == 0 else f"({l2} + RatCst({p},{q}) * {l1})"


def require_pykeops() -> None:
    """Fail early when ``model.sinkhorn_backend=online`` cannot run (pykeops missing or broken)."""
    try:
        import pykeops  # noqa: F401
    except Exception as e:  # ImportError, or a broken install raising at import
        raise ValueError(f"model.sinkhorn_backend=online needs pykeops (GeomLoss' KeOps backend), which cannot be "
                         f"imported here ({type(e).__name__}: {e}); fix: `pip install pykeops` (or "
                         "`pip install -e .[keops]`), or set model.sinkhorn_backend=tensorized") from None


def max_cost(cost: str, m: float, sq_diameter: float, l1_diameter: float) -> float:
    """The largest value of ``cost_matrix`` between two points of a box whose largest squared Euclidean
    distance is ``sq_diameter`` and largest L1 distance ``l1_diameter`` (public constants)."""
    if cost not in COSTS:
        raise ValueError(f"model.cost={cost!r} is unknown; choose one of {COSTS}")
    return {"l2": sq_diameter, "l1": l1_diameter, "l1+l2": sq_diameter + float(m) * l1_diameter}[cost]


def embed(x: torch.Tensor, y: torch.Tensor | None, num_classes: int, multiplier: float = 15.0) -> torch.Tensor:
    """``[flatten(x) ‖ multiplier·onehot(y)]``: ``x: (n, ...)``, ``y: (n,)`` -> ``(n, D + num_classes)``
    (``y=None`` or ``num_classes=0``: ``flatten(x)`` only)."""
    flat = x.flatten(1)
    if y is None or num_classes == 0:
        return flat
    # the one-hot code as a comparison (F.one_hot reads the labels' range back from the device to check it)
    onehot = (y.unsqueeze(1) == torch.arange(num_classes, device=y.device)).to(flat.dtype)
    return torch.cat([flat, multiplier * onehot], dim=1)


class EntropicOT:
    """``W_{c,λ}(X, Y)`` (and GeomLoss' own debiased Sinkhorn divergence) for point clouds
    ``(N, D)``, ``(M, D)`` with uniform weights; differentiable w.r.t. both."""

    def __init__(self, reg: float = 0.05, cost: str = "l1+l2", m: float = 1.0, scaling: float = 0.9,
                 backend: str = "tensorized", diameter: float | None = None) -> None:
        if reg <= 0:
            raise ValueError(f"model.reg (λ) must be > 0, got {reg}")
        if not 0.0 < scaling < 1.0:
            raise ValueError(f"model.scaling must be in (0, 1), got {scaling} (0.5: GeomLoss' and DP-Sinkhorn's; "
                             "nearer 1: more iterations, a more accurate gradient)")
        if cost not in COSTS:
            raise ValueError(f"model.cost={cost!r} is unknown; choose one of {COSTS}")
        if backend not in BACKENDS:
            raise ValueError(f"model.sinkhorn_backend={backend!r} is unknown; choose one of {BACKENDS}")
        if backend == "online":
            require_pykeops()
        self.reg, self.cost, self.m, self.scaling = float(reg), cost, float(m), float(scaling)
        self.backend = backend
        if diameter is not None and not diameter > 0:
            raise ValueError(f"the ε-scaling diameter must be > 0, got {diameter}")
        self.diameter = None if diameter is None else max(float(diameter), 10 * self.reg)
        self._cost: Callable = partial(cost_matrix, cost=cost, m=self.m)
        # what GeomLoss receives as ``cost``: the torch callable (tensorized) or the KeOps formula (online)
        self._geomloss_cost = self._cost if backend == "tensorized" else keops_cost_formula(cost, self.m)

    def _diameter(self, x: torch.Tensor, y: torch.Tensor, debias: bool) -> float:
        """The start of ε-scaling: the public constant, or (``diameter=None``) the inputs' largest cost, read back."""
        if self.diameter is not None:
            return self.diameter
        with torch.no_grad():
            pairs = [(x, y), (x, x), (y, y)] if debias else [(x, y)]
            return max(float(self._cost(a.detach(), b.detach()).max()) for a, b in pairs) if x.numel() and y.numel() \
                else 10 * self.reg

    def _samples_loss(self, diameter: float, debias: bool):
        from geomloss import SamplesLoss

        return SamplesLoss("sinkhorn", p=1, blur=self.reg, scaling=self.scaling, diameter=max(diameter, 10 * self.reg),
                           debias=debias, cost=self._geomloss_cost, backend=self.backend, reach=None)

    def _loss(self, x: torch.Tensor, y: torch.Tensor, debias: bool) -> torch.Tensor:
        loss = self._samples_loss(self._diameter(x, y, debias), debias)
        if self.backend == "online":  # KeOps wants contiguous (N, D) inputs
            x, y = x.contiguous(), y.contiguous()
        return loss(x, y)

    def pair(self, x: torch.Tensor, y1: torch.Tensor, y2: torch.Tensor,
             valid1: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(W(X, Y1), W(X, Y2))`` (no debiasing): one batched problem on the ``tensorized`` backend
        (:func:`paired_sinkhorn`, module docstring), two calls on ``online``.  ``Y1`` and ``Y2`` must be non-empty.
        ``valid1``: the rows of ``Y1`` that are points (a padded batch; the ``tensorized`` backend)."""
        if self.backend != "tensorized":
            if valid1 is not None:
                raise ValueError("a padded batch (trainer.graph) needs model.sinkhorn_backend=tensorized")
            return self(x, y1), self(x, y2)
        diameter = max(self._diameter(x, y1, False), self._diameter(x, y2, False), 10 * self.reg)
        return paired_sinkhorn(x, y1, y2, self._cost, epsilon_schedule(diameter, self.reg, self.scaling), valid1)

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``W_{c,λ}(X, Y)`` (no debiasing): scalar."""
        return self._loss(x, y, debias=False)

    def divergence(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """GeomLoss' Sinkhorn divergence ``W(X,Y) − ½W(X,X) − ½W(Y,Y)`` (same samples): scalar."""
        return self._loss(x, y, debias=True)


def epsilon_schedule(diameter: float, blur: float, scaling: float) -> list[float]:
    """GeomLoss' ε-scaling (p = 1): ``diameter``, then ``diameter·scaling^k`` while above ``blur``, then ``blur``
    (the temperatures of the Sinkhorn iterations; public constants, fixed before the step)."""
    return [diameter, *np.exp(np.arange(np.log(diameter), np.log(blur), np.log(scaling))).tolist(), blur]


def _padded(z: torch.Tensor, rows: int, valid: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``z: (k, D)`` -> ``(rows, D)`` with zero rows appended, and its weights ``(rows,)``: 1/k on the k points,
    0 on the padding (no mass).  ``valid: (k,)`` (a padded batch, ``PrivateSampler.padded_batch``): only its True
    rows are points, ``1 / #valid`` each, the others weigh 0 (computed on the device: nothing is read back)."""
    k = z.shape[0]
    w = torch.zeros(rows, dtype=z.dtype, device=z.device)
    if valid is None:
        w[:k] = 1.0 / k
    else:
        m = valid.to(z.dtype)
        w[:k] = m / m.sum().clamp(min=1.0)
    return torch.cat([z, z.new_zeros(rows - k, z.shape[1])]), w


def softmin(eps: float, c: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """The soft-C-transform ``f_i = −ε log Σ_j exp(h_j − C_ij / ε)``: ``c: (..., N, M)``, ``h: (..., M)`` -> ``(..., N)``."""
    return -eps * torch.add(h.unsqueeze(-2), c, alpha=-1.0 / eps).logsumexp(-1)


def paired_sinkhorn(x: torch.Tensor, y1: torch.Tensor, y2: torch.Tensor, cost: Callable,
                    eps_list: list[float], valid1: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W(X, Y1), W(X, Y2))`` with uniform weights: GeomLoss' symmetric log-domain Sinkhorn (``tensorized``,
    ``debias=False``, ``p = 1``) over the temperatures ``eps_list``, each iteration one soft-C-transform.

    The three clouds are padded to ``R = max(N, M1, M2)`` rows of weight 0 (log-weight −10⁵, GeomLoss' value
    for a zero weight: they carry no mass, so the values are those of the separate problems to float rounding),
    which makes every cost matrix ``(R, R)``.  The four of them, ``C(X, Y_k)`` (the potential f on X) and
    ``C(Y_k, X)`` (g on Y_k), are stacked into ``K: (2, 2, R, R)``, the potentials into ``F = [f; g]: (2, 2, R)``
    and the log-weights of the other side into ``log w' = [log b; log a]``; one iteration ::

        F ← ½ (F + softmin(ε, K, log w' + swap(F) / ε))

    is GeomLoss' pair of updates ``f ← ½(f + softmin(ε, C_xy, log b + g/ε))``, ``g ← ½(g + softmin(ε, C_yx,
    log a + f/ε))``.  As in GeomLoss the loop runs without gradients, and a last update with the cost matrices
    ``C(X, Ȳ)``, ``C(Y, X̄)`` (bar: detached) and detached potentials gives the value ``<a, f> + <b, g>`` and its
    envelope gradient.  ``valid1``: the rows of ``Y1`` that are points (a padded batch; the others weigh 0)."""
    rows = max(x.shape[0], y1.shape[0], y2.shape[0])
    (xp, a), (p1, b1), (p2, b2) = _padded(x, rows), _padded(y1, rows, valid1), _padded(y2, rows)
    xs, ys = xp.expand(2, *xp.shape), torch.stack([p1, p2])                     # (2, R, D)
    k = torch.stack([cost(xs, ys.detach()), cost(ys, xs.detach())])            # [C(X, Ȳ); C(Y, X̄)]: (2, 2, R, R)
    w = torch.stack([a.expand(2, rows), torch.stack([b1, b2])])                # [a; b]: (2, 2, R)
    log_w = torch.where(w > 0, w.log(), -1e5).flip(0)                          # log w' = [log b; log a]
    with torch.no_grad():
        kd = k.detach()
        f = softmin(eps_list[0], kd, log_w)                                    # the first [f; g]
        for eps in eps_list:
            h = torch.add(log_w, f.flip(0), alpha=1.0 / eps)                   # log w' + swap(F) / ε
            lse = torch.add(h.unsqueeze(-2), kd, alpha=-1.0 / eps).logsumexp(-1)
            f = torch.add(f, lse, alpha=-eps).mul_(0.5)                        # ½ (F + softmin), softmin = −ε·lse
    eps = eps_list[-1]
    f = softmin(eps, k, torch.add(log_w, f.flip(0), alpha=1.0 / eps))          # the last update, with gradients
    value = (w * f).sum((0, 2))                                                # <a, f> + <b, g>
    return value[0], value[1]


def sinkhorn_generator_loss(ot: EntropicOT, x_gen: torch.Tensor, y_real: torch.Tensor, n: int,
                            debias: str = "semi", ratio: float = 0.4, valid: torch.Tensor | None = None) -> torch.Tensor:
    """The generator's training loss (DP-Sinkhorn paper, semi-debiased Sinkhorn loss); rows are already embedded features.

    ``x_gen: (n + n', D)`` generated rows with ``n' = floor(ratio·n)`` extra rows (``debias='semi'``)
    or exactly ``n`` rows (``none``/``full``); ``y_real: (M, D)`` real rows.

    * ``semi`` (Def. 4.3, Eq. 6):  2·W(X[0:n], Y) − W(X[0:n], X[n':n+n'])
        (p = 1: an independent second sample, the fully debiased estimator of Eq. 5;
         p = 0: W(X, X), constant in X when the points are λ-separated -> the biased loss)
    * ``full``: GeomLoss' debiased divergence with the same samples, 2·[W(X,Y) − ½W(X,X) − ½W(Y,Y)]
      (the ``W(Y,Y)`` term has no generator gradient)
    * ``none``: 2·W(X, Y) (biased)
    The factor 2 keeps the three variants on the same scale.

    ``valid: (M,)`` (a padded Poisson batch, ``PrivateSampler.padded_batch``; ``semi`` only): the real rows that are
    points; the others weigh 0, and with no valid row the cross term is 0 (the loss of an empty draw), all on the
    device.
    """
    if debias not in DEBIAS:
        raise ValueError(f"model.debias={debias!r} is unknown; choose one of {DEBIAS}")
    x = x_gen[:n]
    if valid is not None:
        if debias != "semi" or extra_rows(n, ratio) == 0:
            raise ValueError("a padded batch (trainer.graph) needs the semi-debiased loss with model.debias_ratio > 0")
        n_extra = extra_rows(n, ratio)
        cross, debiasing = ot.pair(x, y_real, x_gen[n_extra:n + n_extra], valid)
        return 2.0 * cross * valid.any().to(cross.dtype) - debiasing  # Eq. 6; an empty draw: -W(X, X')
    if debias == "none":
        return 2.0 * ot(x, y_real)
    if debias == "full":
        return 2.0 * ot.divergence(x, y_real)
    n_extra = extra_rows(n, ratio)
    if x_gen.shape[0] != n + n_extra:
        raise ValueError(f"semi-debiased loss: expected n + floor(ratio*n) = {n + n_extra} generated rows, got "
                         f"{x_gen.shape[0]}")
    if y_real.shape[0] == 0 or n_extra == 0:
        return 2.0 * ot(x, y_real) - ot(x, x_gen[n_extra:n + n_extra])
    cross, debiasing = ot.pair(x, y_real, x_gen[n_extra:n + n_extra])
    return 2.0 * cross - debiasing  # Eq. 6


def extra_rows(n: int, ratio: float) -> int:
    """``n' = floor(p·n)`` extra generated rows for the semi-debiased loss."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"model.debias_ratio (p) must be in [0, 1], got {ratio}")
    return int(ratio * n)
