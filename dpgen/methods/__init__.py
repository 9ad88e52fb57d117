"""Training algorithms, one module per paper method."""
from .base import GenerativeMethod, Method, NonFiniteLossError, TrainContext
from .dpswd_generator import DPSWDGenerator

__all__ = ["DPSWDGenerator", "GenerativeMethod", "Method", "NonFiniteLossError", "TrainContext"]
from .dpswflow import DPSWFlow, DPSWFlowR, DPSWGen  # noqa: E402  (issue 4)

__all__ += ["DPSWFlow", "DPSWFlowR", "DPSWGen"]
