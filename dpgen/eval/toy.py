"""Evaluator of the low-dimensional toy presets (``toy_dpswflow``, ``toy_dpswd``): sliced Wasserstein
distance of the generated samples to the target distribution, beside the generative evaluator's
metrics.

The target is represented by the held-out TEST split (never the private training records), cut
once into two fixed halves A and B (seeded permutation):

    swd_to_test = SW_2(G, B),   G: |A| generated samples (labels = those of A)
    swd_floor   = SW_2(A, B)    two samples of the target: what a perfect generator would reach

with ``SW_2(P, Q)^2 = mean_j W_2^2(P u_j, Q u_j)`` over ``n_directions`` fixed random unit
directions ``u_j`` (:func:`dpgen.ot.sliced_wasserstein`; one-dimensional W_2 by sorting).  Both
use the same directions and sample size, so ``swd_to_test - swd_floor`` is the generator's gap.
"""

from __future__ import annotations

import torch

from ..data import DataSplits
from ..errors import ConfigError
from ..ot import random_directions, sliced_wasserstein
from .evaluator import GenerativeEvaluator


def sliced_distance_to_test(x_gen: torch.Tensor, test_x: torch.Tensor, n_directions: int = 500,
                            seed: int = 0) -> dict:
    """``x_gen: (n, ...)`` generated, ``test_x: (m, ...)`` held-out target -> swd_to_test, swd_floor.

    ``n`` must be at least ``m // 2`` (the size of half A).
    """
    g = torch.Generator().manual_seed(10_000 + seed)
    perm = torch.randperm(test_x.shape[0], generator=g)
    half = test_x.shape[0] // 2
    a, b = test_x[perm[:half]].flatten(1).float(), test_x[perm[half:2 * half]].flatten(1).float()
    if x_gen.shape[0] < half:
        raise ValueError(f"need at least {half} generated samples for the sliced distance, got {x_gen.shape[0]}")
    gen = x_gen[:half].flatten(1).float().cpu()
    u = random_directions(a.shape[1], n_directions, generator=g)
    return {"swd_to_test": float(sliced_wasserstein(gen, b, directions=u)),
            "swd_floor": float(sliced_wasserstein(a, b, directions=u)),
            "swd_n_samples": half, "swd_n_directions": int(n_directions)}


class ToyEvaluator(GenerativeEvaluator):
    """The generative evaluator's metrics plus ``swd_to_test`` and its floor ``swd_floor``.

    ``sliced_directions``: random directions of the sliced distance (fixed by ``seed``).
    Toy samples live in the data's ``value_range``, not [0, 1]: only the shape is checked.
    """

    def __init__(self, sliced_directions: int = 500, **kwargs) -> None:
        super().__init__(**kwargs)
        if int(sliced_directions) < 1:
            raise ValueError(f"evaluator.sliced_directions must be >= 1, got {sliced_directions}")
        self.sliced_directions = int(sliced_directions)

    def check(self, data: DataSplits | None = None) -> None:
        """The generative checks, and a test split of at least 2 samples (two halves for the sliced distance)."""
        super().check(data)
        if data is not None and len(data.test) < 2:
            raise ConfigError(f"dataset {data.name!r}: the test split has {len(data.test)} sample(s); the sliced distance "
                              "compares two halves of it and needs at least 2; enlarge the test split or set evaluator=none")

    def __call__(self, method, data: DataSplits, logger, seed: int = 0) -> dict:
        metrics = super().__call__(method, data, logger, seed=seed)
        g = torch.Generator().manual_seed(10_000 + seed)
        perm = torch.randperm(data.test.y.shape[0], generator=g)
        labels = data.test.y[perm[: data.test.y.shape[0] // 2]]  # the labels of half A (same permutation)
        x_gen, _ = method.sample(labels.shape[0], labels)
        self._check_shape(x_gen, data)
        metrics.update(sliced_distance_to_test(x_gen, data.test.x, self.sliced_directions, seed))
        return metrics

    @staticmethod
    def _check_shape(x: torch.Tensor, data: DataSplits) -> None:
        if tuple(x.shape[1:]) != tuple(data.image_shape):
            raise ValueError(f"method.sample returned samples of shape {tuple(x.shape[1:])}, but dataset "
                             f"{data.name!r} has shape {tuple(data.image_shape)}")

    @staticmethod
    def _check_samples(x: torch.Tensor, data: DataSplits) -> None:  # toy values are not images in [0, 1]
        ToyEvaluator._check_shape(x, data)
