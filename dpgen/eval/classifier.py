"""Test accuracy of a trained classifier method (the DP-SGD classifier of the WDP experiments)."""

from __future__ import annotations

import time

from ..data import DataSplits
from .evaluator import check_test_split


class ClassifierEvaluator:
    """``test_accuracy`` of ``method.predict`` on the (public) test split; no private record is read."""

    def __init__(self, batch_size: int = 1000) -> None:
        if batch_size < 1:
            raise ValueError(f"evaluator.batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)

    def check(self, data: DataSplits | None = None) -> None:
        """Before training: the test split is not empty (a ConfigError naming the fix otherwise)."""
        check_test_split(data, "the test accuracy")

    def __call__(self, method, data: DataSplits, logger, seed: int = 0) -> dict:
        if not hasattr(method, "predict"):
            raise TypeError(f"evaluator=classifier needs a classifier method with predict(x); "
                            f"{type(method).__name__} has none (use evaluator=generative or none)")
        t0 = time.time()
        pred = method.predict(data.test.x, batch_size=self.batch_size)  # class labels (n,)
        acc = float((pred == data.test.y).float().mean())
        return {"test_accuracy": acc, "n_test": int(data.test.y.shape[0]), "eval_time_s": time.time() - t0}
