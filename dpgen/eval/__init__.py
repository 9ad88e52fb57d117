"""Evaluation: downstream classifiers (LogReg, MLP, CNN), FID, sample grids."""
from .downstream import downstream_accuracy
from .evaluator import GenerativeEvaluator, NoEvaluator
from .fid import InceptionUnavailableError, domain_extractor, frechet_distance

__all__ = ["GenerativeEvaluator", "InceptionUnavailableError", "NoEvaluator", "domain_extractor", "downstream_accuracy",
           "frechet_distance"]
