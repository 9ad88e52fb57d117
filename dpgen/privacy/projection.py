"""The DP settings of a noisy-projection release, one typed object for every method that releases
Gaussian-noised random projections of private rows (DP-SWD generator, DPSWflow-r, DPSWflow, DPSWgen,
the DP-SWD domain adapter).

In the configs it is the ``model.dp`` node (``model.alignment.dp`` for the adapter)::

    dp:
      _target_: dpgen.privacy.ProjectionDP
      num_projections: 1000      # k directions per release
      bound: bernstein           # the sensitivity bound of random directions
      directions: random         # random | orthogonal
      sensitivity_fraction: 0.5  # share of delta reserved for the bound

validated once here; a method hands :meth:`ProjectionDP.release_settings` to its
:class:`~dpgen.privacy.mechanisms.GaussianProjectionRelease`.  The noise is not a setting: it is
calibrated from ``accountant.epsilon`` (or fixed by ``privacy.convention=paper``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .errors import PrivacySettingError
from .mechanisms import check_directions
from .sensitivity import check_bound, check_sensitivity_fraction


@dataclass(frozen=True)
class ProjectionDP:
    """``num_projections`` k; ``bound`` one of ``privacy.sensitivity.BOUNDS`` (with random directions,
    ``||(X - X') U||_F <= diameter sqrt(w(k, D, beta))`` with probability >= 1 - beta); ``directions``
    ``random`` (unit directions, the probabilistic bound) or ``orthogonal`` (ceil(k/D) orthonormal blocks:
    exact sensitivity, no beta, ``bound`` unused); ``sensitivity_fraction`` f: beta = f delta / T."""

    num_projections: int
    bound: str  # no default: the methods' configs choose differently (bernstein, chernoff)
    directions: str = "random"
    sensitivity_fraction: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.num_projections, int) and not isinstance(self.num_projections, bool)
                and self.num_projections >= 1):
            raise PrivacySettingError("num_projections", f"the number of projections must be a positive integer, got "
                                                         f"{self.num_projections!r}")
        check_bound(self.bound)
        check_directions(self.directions)
        object.__setattr__(self, "sensitivity_fraction", check_sensitivity_fraction(self.sensitivity_fraction))

    def release_settings(self) -> dict:
        """The keyword arguments of a ``GaussianProjectionRelease`` these settings fix."""
        return {"num_projections": self.num_projections, "bound": self.bound, "directions": self.directions,
                "sensitivity_fraction": self.sensitivity_fraction}


def as_projection_dp(value: ProjectionDP | Mapping | None, default: ProjectionDP) -> ProjectionDP:
    """A method's ``dp`` argument: the object, a mapping of its fields, or ``None`` (the method's default)."""
    if value is None:
        return default
    if isinstance(value, ProjectionDP):
        return value
    fields = {k: v for k, v in dict(value).items() if k != "_target_"}
    return ProjectionDP(**fields)
