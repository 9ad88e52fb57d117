"""One spelling of what a run's (epsilon, delta) means (results.json ``privacy.guarantee``, printed table).

* ``rigorous``: every sensitivity bound is proven and enforced; the accountant's epsilon is an
  (epsilon, delta)-DP guarantee.
* ``not rigorous (CLT)``: the sensitivity of a random projection is bounded by the central-limit
  approximation (``bound=clt``), which is asymptotic: the stated epsilon is NOT a guarantee.
* ``paper convention — not (ε, δ)-DP at the stated ε``: a paper's setting reproduced as published
  (e.g. the classic Gaussian constant above epsilon = 1); labelled reproduction only.
* ``not DP: data-dependent reports``: the run also publishes accountants computed from un-noised
  private statistics (``accountant.data_dependent_reports=true``): the run as a whole is not DP.
* ``non-private``: an un-noised release (epsilon = infinity).

``combine`` returns the weakest label of several releases (a run is only as private as its
weakest release).
"""

from __future__ import annotations

from collections.abc import Iterable

RIGOROUS = "rigorous"
CLT = "not rigorous (CLT)"
PAPER_CONVENTION = "paper convention — not (ε, δ)-DP at the stated ε"
DATA_DEPENDENT = "not DP: data-dependent reports"
NON_PRIVATE = "non-private"
LABELS: tuple[str, ...] = (RIGOROUS, CLT, PAPER_CONVENTION, DATA_DEPENDENT, NON_PRIVATE)  # strongest first


def guarantee_label(private: bool, bound: str | None = None, paper_convention: bool = False) -> str:
    """The label of one release: non-private, paper convention, CLT bound, or rigorous."""
    if not private:
        return NON_PRIVATE
    if paper_convention:
        return PAPER_CONVENTION
    return CLT if bound == "clt" else RIGOROUS


def combine(labels: Iterable[str]) -> str:
    """The weakest of ``labels`` (``rigorous`` for none)."""
    worst = 0
    for lab in labels:
        if lab not in LABELS:
            raise ValueError(f"unknown guarantee label {lab!r}; use dpgen.privacy.guarantee.guarantee_label")
        worst = max(worst, LABELS.index(lab))
    return LABELS[worst]


def qualifier(label: str) -> str:
    """Text printed beside epsilon: empty for a rigorous guarantee."""
    return "" if label == RIGOROUS else {CLT: "not a rigorous guarantee (CLT bound)",
                                          PAPER_CONVENTION: "not (ε, δ)-DP at the stated ε (paper convention)",
                                          DATA_DEPENDENT: "not DP: the run publishes data-dependent reports",
                                          NON_PRIVATE: "non-private"}[label]
