"""Training algorithms, one module per paper method."""
from .base import GenerativeMethod, Method, NonFiniteLossError, TrainContext
from .dpswd_generator import DPSWDGenerator

__all__ = ["DPSWDGenerator", "GenerativeMethod", "Method", "NonFiniteLossError", "TrainContext"]
