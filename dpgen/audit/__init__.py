"""Empirical privacy auditing: lower bounds on epsilon for every private release of dpgen.

``bounds``: Clopper-Pearson intervals and (TPR, FPR) -> eps lower bound; exact Gaussian curves.
``releases``: vectorised runs of each release on neighbouring inputs, scored by the likelihood ratio.
``core``: one audit per release kind, compared with the ledger's claimed epsilon.
No Hydra inside (``dpgen/audit/cli.py`` composes the presets).
"""
from .bounds import clopper_pearson, epsilon_lower_bound, gaussian_delta, gaussian_epsilon
from .core import (
    AuditResult,
    audit_class_moments,
    audit_gradient_sum_mechanism,
    audit_noisy_sum,
    audit_projection_boundary,
    audit_projection_mechanism,
    audit_projection_release,
    audit_sanitiser_mechanism,
    audit_sanitizer,
    claimed_epsilon,
    claimed_epsilons,
    release_fidelity,
)

__all__ = ["AuditResult", "audit_class_moments", "audit_gradient_sum_mechanism", "claimed_epsilons", "audit_noisy_sum", "audit_projection_boundary", "audit_projection_mechanism",
           "audit_projection_release", "audit_sanitiser_mechanism", "audit_sanitizer", "release_fidelity", "claimed_epsilon", "clopper_pearson", "epsilon_lower_bound", "gaussian_delta",
           "gaussian_epsilon"]
