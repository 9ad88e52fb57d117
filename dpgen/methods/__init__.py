"""Training algorithms, one module per paper method."""
from .base import GenerativeMethod, Method, NonFiniteLossError, TrainContext
from .domain_adaptation import DomainAdaptation
from .dp_class_gaussian import DPClassGaussian
from .dpsgd_classifier import DPSGDClassifier
from .dpsinkhorn import DPSinkhorn
from .dpswd_generator import DPSWDGenerator
from .dpswflow import DPSWFlow, DPSWFlowR
from .dpswgen import DPSWGen

__all__ = ["DPClassGaussian", "DPSGDClassifier", "DPSWDGenerator", "DPSWFlow", "DPSWFlowR", "DPSWGen", "DPSinkhorn", "DomainAdaptation",
           "GenerativeMethod", "Method", "NonFiniteLossError", "TrainContext"]
