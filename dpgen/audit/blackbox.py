"""End-to-end black-box audit of a trained generator (membership of one canary record).

Train the generator ``runs`` times on D (canary out) and ``runs`` times on D' = D plus the canary
(add/remove), each with fresh secret randomness; the auditor sees only generated samples.  Score:
``-min_j ||s_j - c||`` over the generated samples ``s_j`` of the canary's class (a generator that
memorised the canary puts a sample close to it).  The scores go through the same Clopper-Pearson
bound as the white-box audits, against the ledger's epsilon of the whole training run.

This is the weakest audit (few runs, a heuristic distinguisher, the composed noise of a whole run):
it bounds what this attack can show, not the mechanism's true epsilon.  No Hydra: the caller passes
``train_and_sample``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from .bounds import epsilon_lower_bound
from .core import AuditResult


def nearest_neighbour_score(samples: torch.Tensor, canary: torch.Tensor) -> float:
    """``-min_j ||s_j - c||_2`` (higher = the canary looks included); ``samples: (m, ...)``."""
    return -float((samples.flatten(1).double() - canary.flatten().double()).norm(dim=1).min())


def blackbox_generator_audit(train_and_sample: Callable[[bool, int], tuple[torch.Tensor, float]],
                             canary: torch.Tensor, runs: int, delta: float, *, mechanism: str,
                             preset: str | None = None, seed: int = 0) -> AuditResult:
    """``train_and_sample(include_canary, i) -> (samples of the canary's class, ledger epsilon)``.

    Runs alternate out / in so a drifting machine load does not bias one side.
    """
    if runs < 4:
        raise ValueError(f"the black-box audit needs >= 4 trainings per side, got {runs}")
    t0 = time.perf_counter()
    s_out, s_in, eps_claimed = [], [], []
    for i in range(runs):
        for inc in (False, True):
            samples, eps = train_and_sample(inc, i)
            (s_in if inc else s_out).append(nearest_neighbour_score(samples, canary))
            eps_claimed.append(eps)
            del samples
    b = epsilon_lower_bound(np.array(s_out), np.array(s_in), delta, seed=seed)
    gap = float(np.mean(s_in) - np.mean(s_out))
    return AuditResult(mechanism, "honest (end-to-end, black box)", "add_remove",
                       "one out-of-distribution image added to the private set",
                       "nearest-neighbour distance of generated samples to the canary", runs, -1, float("nan"), delta,
                       float("nan"), b.epsilon_lower, b.confidence, float(max(eps_claimed)),
                       "ledger epsilon of the whole training run (its calibrating accountant: the results' epsilon)", None, time.perf_counter() - t0, preset,
                       b.asdict(), {"mean_score_gap_in_minus_out": gap,
                                    "scores_overlap": bool(min(s_in) < max(s_out))})
