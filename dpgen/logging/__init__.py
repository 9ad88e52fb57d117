"""Run logging: a local sink (always) and an optional Weights & Biases sink, behind one interface.

The names load on first use (PEP 562): the settings' checks (``wandb_checks``) import no torch."""
from __future__ import annotations

from ..utils.lazy import lazy_exports

_WHERE = {"LocalSink": "run_logger", "RunLogger": "run_logger", "SilentLogger": "run_logger", "WandbSink": "run_logger"}
__all__ = ["LocalSink", "RunLogger", "SilentLogger", "WandbSink"]

__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
