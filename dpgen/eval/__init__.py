"""Evaluation: downstream classifiers, sample grids."""
from .downstream import downstream_accuracy
from .evaluator import GenerativeEvaluator, NoEvaluator

__all__ = ["GenerativeEvaluator", "NoEvaluator", "downstream_accuracy"]
from .domain_adaptation import DomainAdaptationEvaluator as DomainAdaptationEvaluator  # noqa: E402  (issue 5)
