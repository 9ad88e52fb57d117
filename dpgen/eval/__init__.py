"""Evaluation: downstream classifiers (LogReg, MLP, CNN), FID, sample grids, target / test accuracy."""
from .classifier import ClassifierEvaluator
from .domain_adaptation import DomainAdaptationEvaluator
from .downstream import downstream_accuracy
from .evaluator import GenerativeEvaluator, NoEvaluator
from .fid import InceptionUnavailableError, domain_extractor, frechet_distance
from .toy import ToyEvaluator, sliced_distance_to_test

__all__ = ["ClassifierEvaluator", "DomainAdaptationEvaluator", "GenerativeEvaluator", "InceptionUnavailableError",
           "NoEvaluator", "ToyEvaluator", "domain_extractor", "downstream_accuracy", "frechet_distance",
           "sliced_distance_to_test"]
