"""Sliced-Wasserstein particle flows (DPSWflow paper).

Small pure functions: the smoothed projected CDF / inverse CDF of a set of 1-D projections, the
monotone transport map between them, the particle drift (Eq. 20-21) and one Euler-Maruyama step
of the SDE (DPSWflow paper, the particle flow).  Layout: projections are stored direction-major, ``(k, n)`` = k directions by
n points, so that every row is one 1-D distribution (sort / searchsorted along the last axis).
Directions follow ``dpgen.ot.sliced``: ``U: (d, k)`` with unit columns.

The functional is ``F(mu) = 1/2 G_sigma SW_2^2(mu, nu) + lambda H(mu)`` and its Wasserstein
gradient flow moves every particle with ``dX = -v(X) dt + sqrt(2 lambda) dW``, where
``v(x) = mean_j (<x, u_j> - T_j(<x, u_j>)) u_j`` and ``T_j = F^{-1}_{u_j # nu * N_sigma} o
F_{u_j # mu * N_sigma}`` (particle CDF first, then the target quantile function; DPSWflow paper, the particle flow).
"""

from __future__ import annotations

import math

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from ..utils.misc import on_host

_EPS = torch.finfo(torch.float32).eps
_UNIFORM_GRIDS = WeakTensorKeyDictionary()  # the grids quantile_levels made: uniform, known without reading them


def quantile_levels(m: int, *, device: torch.device | str | None = None,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``p: (m,)`` = ``linspace(0, 1, m)``, endpoints included (DPSWflow paper, the particle flow, ``num_percentiles``)."""
    if m < 2:
        raise ValueError(f"the number of quantile levels (model.num_percentiles) must be >= 2, got {m}")
    levels = torch.linspace(0.0, 1.0, m, device=device, dtype=dtype)
    _UNIFORM_GRIDS[levels] = True
    return levels


def empirical_quantiles(proj: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Inverse CDF of each row at ``levels`` (Eq. 21), ``torch.quantile``'s *linear* rule.

    ``proj: (k, n)``, ``levels: (m,)`` in [0, 1] -> ``(k, m)``: the piecewise-linear interpolation
    of the n sorted values at positions ``p (n - 1)`` (DPSWflow paper, the particle flow step 2).  Done with sort + gather,
    which has no size limit (``torch.quantile`` refuses inputs above 2^24 elements).
    """
    n = proj.shape[-1]
    s, _ = torch.sort(proj, dim=-1)
    if n == 1:
        return s.expand(*s.shape[:-1], levels.shape[0]).clone()
    pos = levels.to(proj.dtype) * (n - 1)
    lo = pos.floor().long().clamp(0, n - 2)
    frac = pos - lo.to(proj.dtype)
    lo_v = s[..., lo]
    return lo_v + frac * (s[..., lo + 1] - lo_v)


def interp1d(x: torch.Tensor, y: torch.Tensor, x_new: torch.Tensor) -> torch.Tensor:
    """Batched piecewise-linear interpolation with linear extrapolation (DPSWflow paper, the particle flow, ``interp``).

    ``x: (k, m)`` increasing rows, ``y: (k, m)`` or ``(m,)``, ``x_new: (k, n)`` -> ``(k, n)``.
    For each row: ``i = searchsorted(x, x_new) - 1`` clamped to ``[0, m - 2]``, then
    ``y_i + (y_{i+1} - y_i) / (x_{i+1} - x_i + eps) (x_new - x_i)``; ``eps`` (float32 machine
    epsilon) guards zero-width segments (ties).
    """
    m = x.shape[-1]
    if y.dim() == 1:
        y = y.expand(x.shape[0], m)
    i = (torch.searchsorted(x.contiguous(), x_new.contiguous()) - 1).clamp(0, m - 2)
    x0, x1 = x.gather(-1, i), x.gather(-1, i + 1)
    y0, y1 = y.gather(-1, i), y.gather(-1, i + 1)
    return y0 + (y1 - y0) / (x1 - x0 + _EPS) * (x_new - x0)


def _is_uniform_grid(levels: torch.Tensor) -> bool:
    """``levels`` is ``quantile_levels(m)`` (``linspace(0, 1, m)``): segment indices by arithmetic."""
    m = levels.shape[0]
    if m < 2:
        return False
    if levels in _UNIFORM_GRIDS:  # made by quantile_levels: no need to read it (a device read on an accelerator)
        return True
    return on_host(levels) and bool(torch.equal(levels, torch.linspace(0.0, 1.0, m, dtype=levels.dtype)))


def _at(v: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``v[idx]`` for a 1-D ``v`` and an index tensor of any shape (``index_select``: several times faster
    than ``take`` or advanced indexing on a CPU)."""
    return v.index_select(0, idx.reshape(-1)).view(idx.shape)


def _knots(levels: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`empirical_quantiles`' knots of ``n`` sorted values at ``levels: (m,)`` (already in the values'
    dtype): entry j interpolates sorted values ``lo_j`` and ``lo_j + 1`` with weight ``frac_j`` (``n >= 2``)."""
    pos = levels * (n - 1)
    lo = pos.floor().long().clamp(0, n - 2)
    return lo, pos - lo.to(levels.dtype)


def _quantile_entries(s: torch.Tensor, lo: torch.Tensor, frac: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    """Entries ``j`` of the quantile grid of the sorted rows ``s`` (``empirical_quantiles(s, levels)[..., j]``),
    the others never built: the same arithmetic per entry, so the same values bit for bit.

    ``s: (..., n)`` sorted, ``lo, frac`` of :func:`_knots`, ``j: (..., q)`` indices in [0, m) -> ``(..., q)``."""
    lo_j = _at(lo, j)
    lo_v = s.gather(-1, lo_j)
    return lo_v + _at(frac, j) * (s.gather(-1, lo_j + 1) - lo_v)


# the particle side searches its quantile grid without building it (:func:`_grid_search`) when the grid is large (at
# least _SEARCH_MIN_LEVELS levels) and holds at least _SEARCH_LEVELS_PER_GAP levels per gap between particles: then the
# search is cheaper; below, building the grid is as cheap and takes fewer kernels (a decision on public sizes)
_SEARCH_MIN_LEVELS = 4096
_SEARCH_LEVELS_PER_GAP = 4


def _levels_per_gap(n: int, m: int, dtype: torch.dtype) -> int:
    """A bound on how many of the ``m`` grid entries share one gap of ``n`` sorted values (:func:`_knots`' ``lo``):
    ``(m - 1) / (n - 1)`` of them in exact arithmetic, widened by the rounding of the levels and positions."""
    slack = 8 * (m - 1) * max(torch.finfo(dtype).eps, torch.finfo(torch.float32).eps)
    return math.floor((m - 1) / (n - 1) + slack) + 1


def _grid_search(s: torch.Tensor, lo: torch.Tensor, frac: torch.Tensor, m: int) -> torch.Tensor:
    """``torch.searchsorted(grid, s)`` (left) for ``grid`` = the m-level quantile grid of the sorted rows ``s``
    (:func:`_knots`), reading about ``log2(m / n)`` entries per value instead of building the grid.

    Why it equals the full-grid search: entry j is ``s_l + frac_j (s_{l+1} - s_l)`` with ``l = lo_j``, rounded;
    ``frac_j >= 0`` puts it at or above ``s_l``, and ``frac_j <= 1 - eps`` (the dtype's machine epsilon: a
    position >= 1 is a multiple of eps, so its fraction is that far from 1) keeps it at or below ``s_{l+1}``
    after rounding (only a position in ``(1 - eps, 1)``, a level less than ``eps / (n - 1)`` below
    ``1 / (n - 1)``, could leave an entry of gap 0 one ulp above ``s_1``).  For the i-th value, let ``g`` be the
    first index of its ties (``s_g = s_i``, ``s_{g-1} < s_i``): every entry of a gap ``l <= g - 2`` is
    ``<= s_{g-1} < s_i`` (counted), every entry of a gap ``l >= g`` is ``>= s_g = s_i`` (not counted), and the
    entries of gap ``g - 1`` rise with ``frac``: a binary search over them (a public number of rounds, every
    value searched alike, no data-dependent exit: nothing is read back) counts the ones ``< s_i``.  The answer
    is the first entry of gap ``g - 1`` plus that count, the index the full-grid search finds.

    ``s: (..., n)`` sorted, ``n >= 2`` -> ``(..., n)`` integer in [0, m].
    """
    n, dev = s.shape[-1], s.device
    rounds = _levels_per_gap(n, m, s.dtype).bit_length()
    w = 1 << rounds  # > the entries of any gap: row r of the table holds gap r - 1 (row 0: none), padded
    r = torch.arange(n, device=dev)
    first = torch.searchsorted(lo, r - 1)  # the first entry of gap r - 1 (r = 0: 0)
    slot = first[:, None] + torch.arange(w, device=dev)
    inside = slot < torch.searchsorted(lo, r)[:, None]
    table = torch.where(inside, _at(frac, slot.clamp_(max=m - 1)), math.inf).flatten()  # +inf: never < s
    g = torch.searchsorted(s, s).clamp_(max=n - 1)  # the first of each value's ties
    base = s.gather(-1, (g - 1).clamp_(min=0))  # s_{g-1} (g = 0: s_g itself, then d = 0 and inf * 0 is NaN)
    d = s - base
    p = g * w - 1  # the table slot of the last entry counted so far (none yet)
    for k in range(rounds - 1, -1, -1):  # lower bound over the gap's entries, halving steps
        q = p + (1 << k)
        p = torch.where(base + _at(table, q) * d < s, q, p)
    return p + _at(first + 1 - r * w, g)


def _level_segment(levels: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``searchsorted(levels, x) - 1`` clamped to ``[0, m - 2]``: the segment of the levels each ``x`` falls in.

    On the uniform grid of :func:`quantile_levels` the index is ``floor(x (m - 1))`` (no search), corrected by
    one where float rounding of the grid puts ``x`` on the other side of a knot, so the segment is exactly
    the one ``searchsorted`` finds."""
    m = levels.shape[0]
    if not _is_uniform_grid(levels):
        return (torch.searchsorted(levels, x.contiguous()) - 1).clamp_(0, m - 2)
    i = (x * (m - 1)).floor_().clamp_(0, m - 2).long()
    # searchsorted(levels, x) - 1 = (number of knots < x) - 1, clamped: fix the rare one-off guesses
    fix = ((_at(levels, i) >= x) & (i > 0)).long() - ((_at(levels, i + 1) < x) & (i < m - 2)).long()
    if not on_host(fix) or bool(fix.any()):  # on an accelerator: always (no host sync)
        i = i - fix
    return i


def _searchsorted_with_guess(x: torch.Tensor, q: torch.Tensor, rounds: int = 3) -> torch.Tensor:
    """``torch.searchsorted(x, q)`` (left) for ``x`` the quantile grid of the sorted rows ``q`` (``n >= 2``): the
    i-th value sits after the knots at positions ``p (n - 1) < i``, so the index is known up to ties (a guess);
    up to ``rounds`` local moves of one slot towards the defining property ``x[g - 1] < q <= x[g]``, then a
    real search in the rows where it still fails somewhere (so the result is always exact).

    ``x: (k, m)`` sorted rows, ``q: (k, n)`` -> ``(k, n)``.
    """
    m, n = x.shape[-1], q.shape[-1]
    if not on_host(x):  # the early exits below read values (host syncs): on an accelerator search directly
        return torch.searchsorted(x.contiguous(), q.contiguous())
    rank = torch.arange(n, device=q.device, dtype=q.dtype) * ((m - 1) / (n - 1))
    g = rank.ceil().long().expand_as(q).clamp(0, m)
    for _ in range(rounds):
        too_left = (g < m) & (x.gather(-1, g.clamp(max=m - 1)) < q)  # x[g] < q: the slot is further right
        too_right = (g > 0) & (x.gather(-1, (g - 1).clamp(min=0)) >= q)  # x[g-1] >= q: further left
        if not bool(too_left.any() or too_right.any()):
            return g
        g = g + too_left.long() - too_right.long()
    too_left = (g < m) & (x.gather(-1, g.clamp(max=m - 1)) < q)
    too_right = (g > 0) & (x.gather(-1, (g - 1).clamp(min=0)) >= q)
    rows = (too_left | too_right).any(dim=-1)
    if bool(rows.any()):
        g[rows] = torch.searchsorted(x[rows].contiguous(), q[rows].contiguous())
    return g


def transport_map(proj: torch.Tensor, target_quantiles: torch.Tensor, levels: torch.Tensor, *,
                  target_sample: bool = False) -> torch.Tensor:
    """``T(z) = F^{-1}_target(F_particles(z))`` at every particle projection (Eq. 20-21).

    ``proj: (k, n)`` (noisy) particle projections, ``target_quantiles: (k, m)`` the target's inverse
    CDF at ``levels: (m,)`` -> ``(k, n)``.  The particle CDF is read off the particles' own
    quantiles at the same levels (DPSWflow paper, the particle flow steps 4-5).  ``target_sample``:
    ``target_quantiles`` holds instead the target's projections ``(k, n_t)`` themselves, and the map is the
    one given ``empirical_quantiles(target, levels)``, bit for bit, without building that ``(k, m)`` grid.

    Same values as :func:`transport_map_reference` (the literal three-call form), computed faster: the
    particles are sorted once — that sort gives their quantiles AND sorted queries for the CDF lookup — and
    one scatter puts the result back in particle order.  Each particle needs two entries of each grid (the
    knots around it), so no M-level grid is built where it would be large: the target's entries are computed
    where the map reads them, and the particles' grid, when it is large (``_SEARCH_MIN_LEVELS``,
    ``_SEARCH_LEVELS_PER_GAP``) on the uniform levels of :func:`quantile_levels`, is searched without being built
    (:func:`_grid_search`).  On those levels the target lookup is arithmetic (:func:`_level_segment`).
    """
    n = proj.shape[-1]
    lv = levels.to(proj.dtype)
    m = lv.shape[0]
    s, perm = torch.sort(proj, dim=-1)
    # F_mu at the sorted particles (Eq. 21) = interp1d(xq, lv, s), xq = empirical_quantiles(proj, levels)
    if (n > 1 and m >= _SEARCH_MIN_LEVELS and _levels_per_gap(n, m, proj.dtype) >= _SEARCH_LEVELS_PER_GAP
            and _is_uniform_grid(lv)):
        lo, frac = _knots(lv, n)
        i = (_grid_search(s, lo, frac, m) - 1).clamp_(0, m - 2)
        i1 = i + 1
        x0, x1 = _quantile_entries(s, lo, frac, torch.cat([i, i1], dim=-1)).chunk(2, dim=-1)
    else:
        if n == 1:
            xq = s.expand(*s.shape[:-1], m).contiguous()
            idx = torch.searchsorted(xq, s.contiguous())
        else:
            lo, frac = _knots(lv, n)
            lo_v = s[..., lo]
            xq = lo_v + frac * (s[..., lo + 1] - lo_v)  # == empirical_quantiles(proj, levels)
            idx = _searchsorted_with_guess(xq, s)
        i = (idx - 1).clamp_(0, m - 2)
        i1 = i + 1
        x0, x1 = xq.gather(-1, i), xq.gather(-1, i1)
    l0 = _at(lv, i)
    cdf = l0 + (_at(lv, i1) - l0) / (x1 - x0 + _EPS) * (s - x0)
    # F_nu^{-1} at the CDF values = interp1d(lv, target quantiles, cdf)
    j = _level_segment(lv, cdf)
    j1 = j + 1
    c0, c1 = _at(lv, j), _at(lv, j1)
    if not target_sample:
        y0, y1 = target_quantiles.gather(-1, j), target_quantiles.gather(-1, j1)
    else:
        t, _ = torch.sort(target_quantiles, dim=-1)
        if t.shape[-1] == 1:
            y0 = y1 = t.expand_as(j)
        else:
            y0, y1 = _quantile_entries(t, *_knots(lv, t.shape[-1]), torch.cat([j, j1], dim=-1)).chunk(2, dim=-1)
    t_sorted = y0 + (y1 - y0) / (c1 - c0 + _EPS) * (cdf - c0)
    return torch.empty_like(t_sorted).scatter_(-1, perm, t_sorted)  # back to particle order


def transport_map_reference(proj: torch.Tensor, target_quantiles: torch.Tensor,
                            levels: torch.Tensor) -> torch.Tensor:
    """The literal form of :func:`transport_map` (DPSWflow paper, the particle flow steps 4-5), kept as the test reference."""
    xq = empirical_quantiles(proj, levels)  # (k, m)   particle inverse CDF
    cdf = interp1d(xq, levels.to(proj.dtype), proj)  # (k, n)  F_mu(z), Eq. 21
    return interp1d(levels.to(proj.dtype).expand_as(target_quantiles), target_quantiles, cdf)  # F_nu^{-1}


def sliced_flow_drift(proj: torch.Tensor, target_quantiles: torch.Tensor, levels: torch.Tensor,
                      u: torch.Tensor, n_directions: int | None = None,
                      sum_dtype: torch.dtype | None = None, target_sample: bool = False) -> torch.Tensor:
    """Particle drift ``v_i = (1/k) sum_j (P_ji - T_ji) u_j`` (Eq. 20; DPSWflow paper, the particle flow step 6).

    ``proj: (k, n)``, ``target_quantiles: (k, m)``, ``levels: (m,)``, ``u: (d, k)`` -> ``v: (n, d)``.
    With sigma = 0 and equal-size point sets this is ``n`` times the Euclidean gradient of
    ``1/2 SW_2^2`` with respect to the particle positions (the Wasserstein gradient).
    ``n_directions``: the k of ``1/k`` when ``u`` holds only some of the directions (a part of the sum over
    j; the parts add up to the drift); default ``u``'s columns.  ``sum_dtype``: the sum over j in that dtype
    (float64: parts added later give the drift of one sum, rounded once), returned in it.  ``target_sample``:
    ``target_quantiles`` is the target's projections ``(k, n_t)`` (:func:`transport_map`).
    """
    t = transport_map(proj, target_quantiles, levels, target_sample=target_sample)
    k = u.shape[1] if n_directions is None else n_directions
    diff = (proj - t).transpose(-2, -1)  # a batch (..., k, n) -> (..., n, k)
    if sum_dtype is not None:
        diff, u = diff.to(sum_dtype), u.to(sum_dtype)
    return diff @ u.transpose(0, 1) / k  # (..., n, d)


def smoothed_projections(x: torch.Tensor, u: torch.Tensor, sigma: float,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """``(X U + Z)^T: (k, n)`` with ``Z ~ N(0, sigma^2)``: samples of ``u # mu * N_sigma`` (DPSWflow paper, the particle flow step 3).

    Used for the particle (public) side only; the private side is released through
    ``dpgen.ot.sliced.gaussian_projection_release``.
    """
    p = (x @ u).transpose(-2, -1)  # (k, n); a batch of point sets (..., n, d) -> (..., k, n)
    if sigma > 0:
        z = torch.randn(p.shape, generator=generator, dtype=p.dtype,
                        device=generator.device if generator is not None else p.device)  # where the generator draws
        p = p + sigma * z.to(p.device)
    return p.contiguous()


def euler_maruyama_step(x: torch.Tensor, drift: torch.Tensor, h: float, reg: float,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """``X_{k+1} = X_k - h v_k(X_k) + sqrt(2 lambda h) Z``, ``Z ~ N(0, I_d)`` (DPSWflow paper, the particle flow, SDE).

    ``x, drift: (n, d)``; ``h`` step size, ``reg`` = lambda (entropy weight; 0 = no diffusion).
    """
    out = x - h * drift
    if reg > 0:
        z = torch.randn(x.shape, generator=generator, dtype=x.dtype,
                        device=generator.device if generator is not None else x.device)  # where the generator draws
        out = out + math.sqrt(2.0 * reg * h) * z.to(x.device)
    return out


def flow_step(x: torch.Tensor, u: torch.Tensor, target_quantiles: torch.Tensor, levels: torch.Tensor,
              sigma: float, h: float, reg: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """One particle update of Algorithms 1-2 given the target's (noisy) inverse CDF.

    ``x: (n, d)``, ``u: (d, k)``, ``target_quantiles: (k, m)`` -> ``(n, d)``.
    """
    proj = smoothed_projections(x, u, sigma, generator)  # noisy particle projections
    v = sliced_flow_drift(proj, target_quantiles, levels, u)  # Eq. 20
    return euler_maruyama_step(x, v, h, reg, generator)  # SDE discretisation
