"""Class-moment releases: one Gaussian mechanism on each class's count, sum and second moment.

Private rows are codes ``z_i`` in R^K clipped to ``||z_i|| <= r`` (a PUBLIC radius, see
``dpgen.data.representations``) with labels ``y_i``.  For every class c the statistics are

    n_c = sum_{y_i = c} 1,     s_c = sum_{y_i = c} z_i  (K,),     M_c = sum_{y_i = c} z_i z_i^T  (K, K),

and the released vector is ``v(D) = [ w0 n_c, w1 s_c, w2 vec(M_c) ]_{c=1..C}`` plus i.i.d. Gaussian
noise of std ``sigma`` on every coordinate, with weights ``w0 = a0, w1 = a1 / r, w2 = a2 / r^2``,
``a0^2 + a1^2 + a2^2 = 1`` (public; default 1/3 each).

Sensitivity (exact, deterministic, no beta):

* add/remove one record (z, y) (Poisson relation; the whole private set is one "batch", q = 1):
  only class y changes, by ``(w0, w1 z, w2 z z^T)``; ``||z z^T||_F = ||z||^2`` so the change has
  L2 norm ``sqrt(a0^2 + a1^2 ||z||^2 / r^2 + a2^2 ||z||^4 / r^4) <= 1``.  Delta = 1.
* replace one record (z, y) -> (z', y') (fixed N): if y != y' two classes change, each by <= 1:
  sqrt(2).  If y = y': ``||w1 (z - z')||^2 <= 4 a1^2`` and
  ``||z z^T - z' z'^T||_F^2 = ||z||^4 + ||z'||^4 - 2 (z^T z')^2 <= 2 r^4``, so the change is
  ``<= sqrt(4 a1^2 + 2 a2^2)``.  Delta = ``sqrt(max(2, 4 a1^2 + 2 a2^2))`` (= sqrt(2) for equal shares).

Post-processing (no privacy cost): ``n_c^ = max(released / w0, 1)``, ``mu_c = s_c^ / n_c^``,
``Sigma_c^ = sym(M_c^) / n_c^ - mu_c mu_c^T``, then one of the covariance estimators ``SHRINKAGES``,
each using only the released vector and the KNOWN (public) noise level:

* ``pooled_prior`` (default): ``pooled`` completed in the directions it does not keep by a PUBLIC prior
  shape scaled by a released statistic (:func:`prior_completed_covariances`), so no class is ever one
  repeated image.  With ``sigma`` the noise std, ``m = w1 n_c^`` and ``q = w2 n_c^``:

  - trace (bias-corrected): ``mu_c^ = mu_c + e / m`` with ``e ~ N(0, sigma^2 I_K)``, so
    ``E ||mu_c^||^2 = ||mu_c||^2 + K sigma^2 / m^2``; the symmetric noise of ``M_c^`` has zero-mean trace.
    ``T_c = tr(Sigma_c^) + K sigma^2 / m^2`` estimates ``tr(Sigma_c)`` with noise variance
    ``tau_c^2 = K sigma^2 / q^2 + 2 K sigma^4 / m^4 + 4 ||mu_c^||^2 sigma^2 / m^2``
    (diagonal of the second-moment noise, then the mean's noise);
  - residual: ``R_c = T_c - tr(S_c)`` with ``S_c`` the ``pooled`` covariance (class + pooled spikes): the
    variance not yet carried by a kept direction, ``R_c ~ N(rho_c, tau_c^2)`` with ``rho_c >= 0``;
  - budget (empirical Bayes over the C classes, then the positivity of ``rho_c``): prior
    ``rho_c ~ N(m_R, s_b^2)`` with ``m_R = mean_c R_c``, ``s_b^2 = max(0, var_c R_c - mean_c tau_c^2)``;
    posterior ``N(m_c, v_c)`` with ``w_c = s_b^2 / (s_b^2 + tau_c^2)``, ``m_c = m_R + w_c (R_c - m_R)``,
    ``v_c = w_c tau_c^2 + (1 - w_c)^2 (mean_c tau_c^2 + s_b^2) / C``; the budget is that posterior's mean
    restricted to ``rho >= 0``: ``b_c = m_c + sqrt(v_c) phi(a) / Phi(a)``, ``a = m_c / sqrt(v_c)`` (> 0
    always; ``~ max(0, R_c)`` when ``R_c`` is well above its noise);
  - shape: ``Q_c`` the projector onto the complement of the kept (class and pooled spike) directions,
    ``P = diag(p)`` the representation's public prior spectrum (``dpgen.data.representations``: 1/f^2
    for the DCT, public PCA variances, else isotropic);
    ``Sigma_c = S_c + b_c Q_c P Q_c / tr(Q_c P Q_c)`` (so ``tr(Sigma_c) = tr(S_c) + b_c``);
* ``pooled``: the class's own spikes (eigen-directions of ``Sigma_c^`` that stand out of the
  noise bulk, :func:`spiked_shrinkage`), completed in the orthogonal complement by the spikes of the
  pooled within-class covariance ``sum_c n_c^ Sigma_c^ / sum_c n_c^`` (:func:`pooled_spiked_covariances`).
  The pooled matrix averages the C classes' independent noise, so its bulk edge is about ``sqrt(C)``
  times lower and directions shared by the classes (stroke width, slant, ...) survive even when a
  class's own matrix keeps none; a class with no spike at all is one repeated image;
* ``class``: the class's own spikes only (a class whose spikes all sit in the bulk gets covariance 0:
  every sample of it is the class mean);
* ``none``: ``Sigma_c^`` projected onto the PSD cone (negative eigenvalues floored; keeps the noise);
* ``auto``: ``class`` when EVERY class keeps at least one spike of its own above the noise bulk, else
  ``pooled_prior``.  ``pooled_prior`` exists for the classes ``class`` collapses to one repeated image (no
  spike of their own); when none collapses, the class's own spikes are used as they are.  The rule reads
  the released vector and the public noise level only (post-processing); the estimator it picked is
  recorded in ``ClassMoments.estimator``.

Every choice above (the estimators, the prior shape) is fixed a priori; each reads only the released
vector, the public noise level and public facts about the representation.

The synthetic data are draws from ``N(mu_c, Sigma_c)`` decoded back to images.

Both releases are :class:`~dpgen.privacy.mechanisms.Mechanism` objects: noise from their own
``torch.Generator``, calibrated by the ledger (one Gaussian mechanism, sample rate 1), recorded in the
ledger inside ``release``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..utils import dist
from .errors import PrivacySettingError
from .mechanisms import Mechanism
from .noise import NoisePolicy

RELATIONS = ("add_remove", "replace_one")
SHRINKAGES = ("pooled_prior", "pooled", "class", "none", "auto")


def moment_weights(radius: float, shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3)) -> tuple[float, float, float]:
    """``(w0, w1, w2) = (sqrt(s0), sqrt(s1) / r, sqrt(s2) / r^2)`` with the shares normalised to sum 1."""
    if radius <= 0:
        raise ValueError(f"radius must be > 0, got {radius}")
    if len(shares) != 3 or min(shares) < 0 or sum(shares) <= 0:
        raise PrivacySettingError("moment_shares", f"the moment shares must be three non-negative numbers, got {shares}")
    tot = float(sum(shares))
    a0, a1, a2 = (math.sqrt(s / tot) for s in shares)
    return a0, a1 / radius, a2 / radius**2


def moment_sensitivity(shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3), relation: str = "add_remove") -> float:
    """L2 sensitivity of the weighted moment vector (module docstring); independent of r."""
    tot = float(sum(shares))
    a0s, a1s, a2s = (s / tot for s in shares)
    if relation == "add_remove":
        return 1.0
    if relation == "replace_one":
        return math.sqrt(max(2.0, 4.0 * a1s + 2.0 * a2s))
    raise ValueError(f"unknown neighbouring relation {relation!r}; choose one of {', '.join(RELATIONS)}")


def class_moment_vector(z: torch.Tensor, y: torch.Tensor, n_classes: int,
                        weights: tuple[float, float, float]) -> torch.Tensor:
    """``v(D): (C, 1 + K + K^2)``: weighted ``[n_c, s_c, vec(M_c)]`` per class (no noise).

    ``z: (n, K)``, ``y: (n,)`` long.
    """
    w0, w1, w2 = weights
    k = z.shape[1]
    rows = []
    for c in range(n_classes):
        zc = z[y == c]  # (n_c, K)
        n = torch.tensor([float(zc.shape[0])], dtype=z.dtype)
        rows.append(torch.cat([w0 * n, w1 * zc.sum(0), w2 * (zc.T @ zc).reshape(k * k)]))
    return torch.stack(rows)


@dataclass(frozen=True)
class ClassMoments:
    """Post-processed release: per-class noisy counts, means ``(C, K)`` and covariances ``(C, K, K)``."""

    counts: torch.Tensor
    means: torch.Tensor
    covariances: torch.Tensor
    estimator: str = ""  # the covariance estimator that produced them (``auto`` resolved), "" when not recorded

    def sample(self, labels: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One draw ``z ~ N(mu_y, Sigma_y)`` per label: ``(n,) -> (n, K)``."""
        k = self.means.shape[1]
        out = torch.empty(labels.shape[0], k, dtype=self.means.dtype)
        for c in labels.unique().tolist():
            idx = (labels == c).nonzero().flatten()
            chol = torch.linalg.cholesky(self.covariances[c])
            eps = torch.randn(idx.shape[0], k, generator=generator, dtype=self.means.dtype)
            out[idx] = self.means[c] + eps @ chol.T
        return out


def spiked_shrinkage(ev: torch.Tensor, s: torch.Tensor, k: int) -> torch.Tensor:
    """Eigenvalues of ``Sigma + W`` -> estimates of Sigma's spikes (Baik-Ben Arous-Peche inversion).

    ``W`` is symmetric Gaussian noise with off-diagonal entry std ``s`` (one value per matrix,
    ``s: (C,)``), ``ev: (C, K)``.  An eigenvalue theta of Sigma above ``s sqrt(K)`` appears at
    ``lambda = theta + s^2 K / theta`` (above the bulk edge ``2 s sqrt(K)``); below the edge it is
    lost in the bulk.  Returns ``theta = (lambda + sqrt(lambda^2 - 4 s^2 K)) / 2`` above the edge and
    0 below.  Post-processing with the KNOWN noise level: no privacy cost.
    """
    s2k = (s**2 * k)[:, None]
    edge = 2.0 * torch.sqrt(s2k)
    theta = 0.5 * (ev + torch.sqrt((ev**2 - 4.0 * s2k).clamp_min(0.0)))
    return torch.where(ev > edge, theta, torch.zeros_like(ev))


def spike_directions(vec: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """``(C, K, K)`` eigenvectors ``vec`` with the columns whose spike estimate ``theta`` is 0 zeroed."""
    return vec * (theta > 0).to(vec.dtype)[:, None, :]


def pooled_spikes(cov: torch.Tensor, n: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``pooled`` covariances ``(C, K, K)`` and the projectors ``(C, K, K)`` onto their kept directions.

    ``cov: (C, K, K)`` symmetric noisy class covariances, ``n: (C,)`` noisy counts, ``s: (C,)`` the
    off-diagonal noise std of each ``cov[c]`` (public).  With ``cov[c] = Sigma_c + W_c`` the pooled
    ``sum_c n_c cov[c] / sum_c n_c`` carries ``sum_c n_c W_c / sum_c n_c`` whose off-diagonal std is
    ``sqrt(sum_c (n_c s_c)^2) / sum_c n_c`` (independent W_c).  For class c with spike directions
    ``U_c`` (estimates ``theta_c``) and ``P = I - U_c U_c^T``:
    ``Sigma_c = U_c diag(theta_c) U_c^T + P Sigma_pool P``.  The kept directions span ``U_c`` and the
    pooled spike directions ``U_pool`` (the range of ``Sigma_c`` lies in that span).
    """
    k = cov.shape[-1]
    pooled = (n[:, None, None] * cov).sum(0, keepdim=True) / n.sum()
    s_pool = torch.sqrt(((n * s) ** 2).sum()).reshape(1) / n.sum()
    ev_p, vec_p = torch.linalg.eigh(pooled)
    th_p = spiked_shrinkage(ev_p, s_pool, k)
    sigma_pool = (vec_p * th_p[:, None, :]) @ vec_p.transpose(1, 2)  # (1, K, K)
    ev, vec = torch.linalg.eigh(cov)
    th = spiked_shrinkage(ev, s, k)
    kept_c, kept_p = spike_directions(vec, th), spike_directions(vec_p, th_p)
    proj = torch.eye(k, dtype=cov.dtype) - kept_c @ kept_c.transpose(1, 2)
    sigma = (vec * th[:, None, :]) @ vec.transpose(1, 2) + proj @ sigma_pool @ proj
    g_ev, g_vec = torch.linalg.eigh(kept_c @ kept_c.transpose(1, 2) + kept_p @ kept_p.transpose(1, 2))
    span = g_vec * (g_ev > 1e-9).to(cov.dtype)[:, None, :]  # orthonormal basis of span(U_c, U_pool)
    return sigma, span @ span.transpose(1, 2)


def pooled_spiked_covariances(cov: torch.Tensor, n: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Class spikes completed by the pooled within-class spikes (the ``pooled`` estimator, :func:`pooled_spikes`).

    Returns ``(C, K, K)`` PSD, unfloored.
    """
    return pooled_spikes(cov, n, s)[0]


def corrected_traces(cov: torch.Tensor, mu: torch.Tensor, n: torch.Tensor, noise_std: float,
                     weights: tuple[float, float, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(T_c, tau_c)``: bias-corrected trace of each noisy ``Sigma_c^`` and its noise std (module docstring).

    ``cov: (C, K, K)``, ``mu: (C, K)``, ``n: (C,)`` released estimates; ``noise_std`` and ``weights`` public.
    """
    _, w1, w2 = weights
    k = cov.shape[-1]
    m2, q2, sig2 = (w1 * n) ** 2, (w2 * n) ** 2, noise_std ** 2
    traces = torch.diagonal(cov, dim1=-2, dim2=-1).sum(-1) + k * sig2 / m2
    var = k * sig2 / q2 + 2.0 * k * sig2 ** 2 / m2 ** 2 + 4.0 * (mu ** 2).sum(-1) * sig2 / m2
    return traces, torch.sqrt(var)


def positive_part_mean(mean: torch.Tensor, var: torch.Tensor) -> torch.Tensor:
    """``E[X | X >= 0]`` for ``X ~ N(mean, var)``: ``mean + sd phi(a) / Phi(a)``, ``a = mean / sd`` (> 0)."""
    sd = torch.sqrt(var)
    a = mean / sd
    mills = torch.exp(-0.5 * a ** 2 - 0.5 * math.log(2.0 * math.pi) - torch.special.log_ndtr(a))
    return mean + sd * mills


def residual_budgets(resid: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Empirical-Bayes budgets ``b_c > 0`` from noisy residuals ``R_c ~ N(rho_c, tau_c^2)``, ``rho_c >= 0``.

    Normal prior across the C classes fitted by moments (mean ``m_R``, between-class variance ``s_b^2``),
    then the posterior mean restricted to ``rho >= 0`` (module docstring).  ``resid, tau: (C,)``, tau > 0.
    """
    c = resid.shape[0]
    tau2 = tau ** 2
    m_r = resid.mean()
    s_b2 = (resid.var(correction=1 if c > 1 else 0) - tau2.mean()).clamp_min(0.0)
    w = s_b2 / (s_b2 + tau2)
    post_mean = m_r + w * (resid - m_r)
    post_var = w * tau2 + (1.0 - w) ** 2 * (tau2.mean() + s_b2) / c
    return positive_part_mean(post_mean, post_var)


def prior_completed_covariances(cov: torch.Tensor, n: torch.Tensor, s: torch.Tensor, traces: torch.Tensor,
                                tau: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
    """The ``pooled_prior`` estimator: ``S_c + b_c Q_c P Q_c / tr(Q_c P Q_c)`` (module docstring).

    ``cov, n, s`` as in :func:`pooled_spikes`; ``traces, tau: (C,)`` from :func:`corrected_traces`;
    ``prior: (K,)`` the public prior variance shape ``P = diag(prior)``.  Returns ``(C, K, K)`` PSD.
    """
    sigma, kept = pooled_spikes(cov, n, s)
    budget = residual_budgets(traces - torch.diagonal(sigma, dim1=-2, dim2=-1).sum(-1), tau)
    q = torch.eye(cov.shape[-1], dtype=cov.dtype) - kept
    shape = q @ torch.diag(prior.to(cov.dtype)) @ q
    size = torch.diagonal(shape, dim1=-2, dim2=-1).sum(-1)
    scale = torch.where(size > 0, budget / size.clamp_min(1e-300), torch.zeros_like(size))
    return sigma + scale[:, None, None] * shape


def moments_from_vector(v: torch.Tensor, k: int, weights: tuple[float, float, float],
                        eig_floor: float, noise_std: float = 0.0, shrinkage: str = "pooled_prior",
                        prior: torch.Tensor | None = None) -> ClassMoments:
    """Invert the weighting and project to valid moments (pure post-processing).

    ``noise_std`` (the std added to every coordinate of ``v``, public) > 0 turns on the ``shrinkage``
    estimator (``SHRINKAGES``, module docstring): ``sym(M_c^)/n_c^`` carries symmetric noise with
    off-diagonal entry std ``noise_std / (w2 n_c^ sqrt 2)``.  ``prior: (K,)`` the public prior variance
    shape of ``pooled_prior`` (None: isotropic).  Eigenvalues end floored at ``eig_floor``.
    """
    if shrinkage not in SHRINKAGES:
        raise PrivacySettingError("shrinkage", f"shrinkage {shrinkage!r} is unknown; choose one of "
                                               f"{', '.join(SHRINKAGES)}")
    w0, w1, w2 = weights
    c = v.shape[0]
    n = (v[:, 0] / w0).clamp_min(1.0)
    s = v[:, 1:1 + k] / w1
    m = v[:, 1 + k:].reshape(c, k, k) / w2
    m = 0.5 * (m + m.transpose(1, 2))
    mu = s / n[:, None]
    cov = m / n[:, None, None] - mu[:, :, None] * mu[:, None, :]
    cov = 0.5 * (cov + cov.transpose(1, 2))
    used = shrinkage if noise_std > 0 else "none"
    if noise_std > 0 and shrinkage != "none":
        s_noise = noise_std / (w2 * n * math.sqrt(2.0))
        if shrinkage == "auto":
            used = "class" if bool((own_spike_counts(cov, s_noise) >= 1).all()) else "pooled_prior"
        if used == "pooled_prior":
            traces, tau = corrected_traces(cov, mu, n, noise_std, weights)
            prior = torch.ones(k, dtype=cov.dtype) if prior is None else prior
            cov = prior_completed_covariances(cov, n, s_noise, traces, tau, prior)
        elif used == "pooled":
            cov = pooled_spiked_covariances(cov, n, s_noise)
        else:
            ev, evec = torch.linalg.eigh(cov)
            ev = spiked_shrinkage(ev, s_noise, k)
            cov = (evec * ev[:, None, :]) @ evec.transpose(1, 2)
    ev, evec = torch.linalg.eigh(0.5 * (cov + cov.transpose(1, 2)))
    cov = (evec * ev.clamp_min(eig_floor)[:, None, :]) @ evec.transpose(1, 2)
    return ClassMoments(n, mu, 0.5 * (cov + cov.transpose(1, 2)), used)


def own_spike_counts(cov: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """``(C,)`` the number of eigenvalues of each noisy class covariance above its noise bulk edge
    (:func:`spiked_shrinkage`): the class's own spikes.  ``cov: (C, K, K)``, ``s: (C,)`` public noise stds."""
    return (spiked_shrinkage(torch.linalg.eigvalsh(cov), s, cov.shape[-1]) > 0).sum(-1)


class ClassMomentRelease(Mechanism):
    """The mechanism object: one Gaussian release of the weighted class-moment vector (sample rate 1).

    The relation is the ledger's (Poisson -> add/remove, Delta = 1; without replacement -> replace-one,
    Delta = sqrt 2): the statistics are sums over records, so they need no public N.  A ``Calibrated()``
    policy asks the ledger's accountant for its one release; ``release`` adds the noise from the mechanism's own generator and
    records itself.

    Several processes: each rank passes the codes of its part of the private set; the weighted
    moment vectors are summed over the ranks (the vector of the whole set: the same function of the
    same records, so the same sensitivity) and noised once, on rank 0, then broadcast
    (``Mechanism.noised_sum``): the released vector is the single-process one.
    """

    kind = "class_moments"
    release_formula = "`[w0 n_c, w1 sum z, w2 sum z z^T]_c + N(0, s^2)`, once"
    used_by = "DP class-Gaussian (`release: moments`)"

    def __init__(self, ledger, *, n_classes: int, radius: float,
                 noise: NoisePolicy, shares: tuple[float, float, float] = (1 / 3, 1 / 3, 1 / 3),
                 seed: int | None = None, shrinkage: str = "pooled_prior", accountant: str | None = None,
                 prior: torch.Tensor | None = None) -> None:
        super().__init__(ledger, sample_rate=1.0, noise=noise, steps=1, seed=seed, accountant=accountant)
        self.n_classes, self.radius = int(n_classes), float(radius)
        self.shares = tuple(float(x) for x in shares)
        self.weights = moment_weights(self.radius, self.shares)
        if shrinkage not in SHRINKAGES:
            raise PrivacySettingError("shrinkage", f"shrinkage {shrinkage!r} is unknown; choose one of "
                                                   f"{', '.join(SHRINKAGES)}")
        self.shrinkage, self.prior = shrinkage, prior  # prior: (K,) public variance shape (None: isotropic)

    def sensitivity_under(self, relation: str) -> float:
        return moment_sensitivity(self.shares, relation)

    def release(self, z: torch.Tensor, y: torch.Tensor, eig_floor: float | None = None) -> ClassMoments:
        """``z: (N, K)`` codes with ``||z_i|| <= radius`` (checked), ``y: (N,)``: the noisy moments."""
        if self.releases:
            raise RuntimeError("ClassMomentRelease is a single release; build a new mechanism (and budget) for another")
        if z.shape[0] and float(z.norm(dim=1).max()) > self.radius * (1 + 1e-6):
            raise ValueError("rows must be clipped to the public radius before the release (Representation.encode)")
        z = z.double()
        v = class_moment_vector(z, y, self.n_classes, self.weights)
        v = self.noised_sum([v])[0]  # several processes: summed over the ranks, noised once on rank 0
        self._record()
        k = z.shape[1]
        floor = 1e-6 * self.radius**2 / k if eig_floor is None else eig_floor
        return moments_from_vector(v, k, self.weights, floor, self.noise_std, self.shrinkage, self.prior)

    def _config(self) -> dict:
        return {**super()._config(), "radius": self.radius, "shares": list(self.shares)}

    def describe(self) -> dict:
        return {**super().describe(), "radius": self.radius, "shares": list(self.shares), "n_classes": self.n_classes}


# -- one-shot orthonormal projections of fixed-size class blocks (DPSWflow Algorithm 2 family) ------
def block_projection_sensitivity(radius: float, count_weight: float, relation: str = "add_remove") -> float:
    """L2 sensitivity of ``[w0 n_c, B_c U_c]_c`` for fixed-size class blocks of codes with norm <= r.

    Every class block ``B_c: (m, K)`` holds the class's rows, cut to a uniform random subset of m rows
    when there are more, zero-padded when fewer (m public).  ``U_c: (K, K)`` is orthonormal, so
    ``||(b - b') U_c|| = ||b - b'||`` deterministically (no beta, no partners factor).

    * add/remove (z, y): the count of class y moves by 1 (``w0``) and block y changes in one row:
      a padding zero becomes z (``<= r``) or, when the block was cut, z takes the place of a random
      kept row z' (coupling; ``||z - z'|| <= 2 r``).  Delta = ``sqrt(w0^2 + 4 r^2)``.
    * replace one: two classes' counts and rows change (y != y') or one row (y = y'):
      Delta = ``sqrt(2 w0^2 + 8 r^2)`` (each side at most the add/remove change).
    """
    base = math.sqrt(count_weight**2 + 4.0 * radius**2)
    if relation == "add_remove":
        return base
    if relation == "replace_one":
        return math.sqrt(2.0) * base
    raise ValueError(f"unknown neighbouring relation {relation!r}; choose one of {', '.join(RELATIONS)}")


def orthogonal_matrix(k: int, generator: torch.Generator | None = None, dtype=torch.float64) -> torch.Tensor:
    """A uniformly random ``(k, k)`` orthogonal matrix (QR of a Gaussian matrix, signs fixed by diag(R))."""
    g = torch.randn(k, k, generator=generator, dtype=dtype)
    q, r = torch.linalg.qr(g)
    return q * torch.sign(torch.diagonal(r))[None, :]


class ClassBlockProjectionRelease(Mechanism):
    """One Gaussian release of the orthonormally projected, fixed-size class blocks and the class counts.

    The block size m is fixed from N (public), so this is a release of the whole set with N public:
    relation ``replace_one`` (Delta = sqrt 2 * sqrt(w0^2 + 4 r^2)), as for DPSWflow's one-shot release.

    Post-processing (the "moment mode" of the one-release flow): with ``P_c = B_c U_c + Z_c``,
    ``n_c^ = clamp(released count, 1, m)``, ``s_c = (1^T P_c) U_c^T``,
    ``M_c = U_c (P_c^T P_c - m sigma^2 I) U_c^T`` (the KNOWN noise variance removed), then
    ``mu_c = s_c / n_c^``, ``Sigma_c = M_c / n_c^ - mu_c mu_c^T`` projected onto the PSD cone.
    The padding rows are zeros, so they add nothing to ``s_c`` or ``M_c``.

    Several processes: the ranks' codes are gathered first (the blocks are cut from the whole set), then
    every rank computes the single-process release from the same generator (rank 0's seed): the same
    blocks, directions and noise, one draw of each.
    """

    kind = "class_block_projection"
    release_formula = "`[w0 n_c, B_c U_c]_c + N(0, s^2)`, fixed-size class blocks, once (N public)"
    used_by = "DP class-Gaussian (`release: projections`)"

    def __init__(self, ledger, *, n_classes: int, radius: float, block_size: int, noise: NoisePolicy,
                 count_weight: float | None = None, seed: int | None = None, accountant: str | None = None) -> None:
        super().__init__(ledger, sample_rate=1.0, noise=noise, steps=1, full_set=True, seed=seed,
                         accountant=accountant)
        if block_size < 1:
            raise ValueError(f"block size must be >= 1, got {block_size}")
        self.n_classes, self.radius, self.m = int(n_classes), float(radius), int(block_size)
        self.count_weight = self.radius if count_weight is None else float(count_weight)

    def sensitivity_under(self, relation: str) -> float:
        return block_projection_sensitivity(self.radius, self.count_weight, relation)

    def blocks(self, z: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(C, m, K)`` fixed-size class blocks and the true counts ``(C,)`` (private; not released as is)."""
        k = z.shape[1]
        out = torch.zeros(self.n_classes, self.m, k, dtype=z.dtype)
        counts = torch.zeros(self.n_classes, dtype=z.dtype)
        for c in range(self.n_classes):
            zc = z[y == c]
            counts[c] = zc.shape[0]
            if zc.shape[0] > self.m:
                zc = zc[torch.randperm(zc.shape[0], generator=self.generator)[:self.m]]
            out[c, :zc.shape[0]] = zc
        return out, counts

    def release(self, z: torch.Tensor, y: torch.Tensor, eig_floor: float | None = None) -> ClassMoments:
        if self.releases:
            raise RuntimeError("ClassBlockProjectionRelease is a single release")
        if z.shape[0] and float(z.norm(dim=1).max()) > self.radius * (1 + 1e-6):
            raise ValueError("rows must be clipped to the public radius before the release (Representation.encode)")
        z, y = dist.all_gather_rows(z.double()), dist.all_gather_rows(y)
        k = z.shape[1]
        b, counts = self.blocks(z, y)
        us = torch.stack([orthogonal_matrix(k, self.generator) for _ in range(self.n_classes)])  # (C, K, K)
        p = b @ us
        n_rel = self.count_weight * counts
        zp, zn = self.noise(p.shape, p), self.noise(n_rel.shape, n_rel)
        if zp is not None:
            p, n_rel = p + zp, n_rel + zn
        self._record()
        # ---- post-processing only below
        sd = self.noise_std
        n = (n_rel / self.count_weight).clamp(1.0, float(self.m))
        eye = torch.eye(k, dtype=b.dtype)
        s = torch.einsum("cmk,cjk->cj", p, us)  # (1^T P_c) U_c^T
        m2 = us @ (p.transpose(1, 2) @ p - self.m * sd**2 * eye) @ us.transpose(1, 2)
        v = torch.cat([n[:, None], s, m2.reshape(self.n_classes, k * k)], dim=1)
        floor = 1e-6 * self.radius**2 / k if eig_floor is None else eig_floor
        return moments_from_vector(v, k, (1.0, 1.0, 1.0), floor)

    def _config(self) -> dict:
        return {**super()._config(), "radius": self.radius, "block_size": self.m, "count_weight": self.count_weight}

    def describe(self) -> dict:
        return {**super().describe(), "radius": self.radius, "block_size": self.m, "count_weight": self.count_weight}
