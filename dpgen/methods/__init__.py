"""Training algorithms, one module per paper method."""
from .base import GenerativeMethod, Method, NonFiniteLossError, TrainContext
from .domain_adaptation import DomainAdaptation
from .dpsgd_classifier import DPSGDClassifier
from .dpsinkhorn import DPSinkhorn
from .dpswd_generator import DPSWDGenerator
from .dpswflow import DPSWFlow, DPSWFlowR, DPSWGen

__all__ = ["DPSGDClassifier", "DPSWDGenerator", "DPSWFlow", "DPSWFlowR", "DPSWGen", "DPSinkhorn", "DomainAdaptation",
           "GenerativeMethod", "Method", "NonFiniteLossError", "TrainContext"]
