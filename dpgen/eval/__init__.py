"""Evaluation: downstream classifiers, sample grids."""
from .downstream import downstream_accuracy
from .evaluator import GenerativeEvaluator, NoEvaluator

__all__ = ["GenerativeEvaluator", "NoEvaluator", "downstream_accuracy"]
from .classifier import ClassifierEvaluator  # noqa: E402

__all__ += ["ClassifierEvaluator"]
