"""Run logging: a local sink (always) and an optional Weights & Biases sink, behind one interface."""
from .run_logger import LocalSink, RunLogger, SilentLogger, WandbSink

__all__ = ["LocalSink", "RunLogger", "SilentLogger", "WandbSink"]
