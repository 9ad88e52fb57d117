"""Empirical privacy auditing: lower bounds on epsilon for every private release of dpgen.

``bounds``: Clopper-Pearson intervals and (TPR, FPR) -> eps lower bound; exact Gaussian curves.
``releases``: vectorised runs of each release on neighbouring inputs, scored by the likelihood ratio.
``core``: one audit per release kind, compared with the ledger's claimed epsilon.
No Hydra inside (``dpgen/audit/cli.py`` composes the presets).  The names below load on first use (PEP 562):
``dpgen audit --help`` imports no torch.
"""

from __future__ import annotations

from ..utils.lazy import lazy_exports

_WHERE = {  # name -> the module of this package that defines it (imported on first use)
    **dict.fromkeys(("clopper_pearson", "epsilon_lower_bound", "gaussian_delta", "gaussian_epsilon"), "bounds"),
    **dict.fromkeys(("AuditResult", "audit_class_moments", "audit_gradient_sum_mechanism", "audit_noisy_sum",
                     "audit_projection_boundary", "audit_projection_mechanism", "audit_projection_release",
                     "audit_sanitiser_mechanism", "audit_sanitizer", "claimed_epsilon", "claimed_epsilons",
                     "release_fidelity"), "core"),
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
