from __future__ import annotations

import contextlib
import math
import random

import numpy as np
import torch

from .settings import PRECISIONS, check_precision, device_fix, no_apple_gpu, no_cuda_gpu  # noqa: F401


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pick_device(device: str = "auto", setting: str = "trainer.device") -> torch.device:
    """``auto``: cuda when available, else cpu; a device this machine lacks raises ValueError (the
    message of :func:`unavailable_device`, naming ``setting``)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = unavailable_device(device, setting)
    if problem is not None:
        raise ValueError(problem)
    return torch.device(device)


def unavailable_device(device: str, setting: str) -> str | None:
    """Why the device ``device`` (the value of ``setting``: ``trainer.device``, ``evaluator.device``) cannot
    be used on this machine, naming the setting and the fix; None when it can (``auto`` always can)."""
    if str(device) == "auto":
        return None
    fix = device_fix(setting)
    try:
        dev = torch.device(str(device))
    except RuntimeError:
        return f"{setting}={device} is not a device; {fix}"
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            return no_cuda_gpu(device, setting)
        if dev.index is not None and dev.index >= n:
            return f"{setting}={device} but this machine has {n} CUDA GPU{'s' if n > 1 else ''} (cuda:0..cuda:{n - 1}); {fix}"
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        return no_apple_gpu(device, setting)
    elif dev.type not in ("cpu", "cuda", "mps"):
        return f"{setting}={device}: dpgen runs on cpu, cuda or mps; {fix}"
    return None


def on_gpu(device: torch.device) -> bool:
    """True when ``device`` is a CUDA GPU (the paths that use GPU-only features: streams, fused Adam, TF32)."""
    return torch.device(device).type == "cuda"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (timings); nothing on the CPU."""
    if device.type != "cpu":
        getattr(torch, device.type).synchronize()


def device_name(device: torch.device) -> str | None:
    """The accelerator's name (benchmark provenance); None on the CPU."""
    backend = getattr(torch, device.type, None)
    return backend.get_device_name() if device.type != "cpu" and hasattr(backend, "get_device_name") else None


def on_host(t: torch.Tensor) -> bool:
    """True when reading ``t``'s value costs no device sync (``t`` is on the CPU).

    Code that branches on a tensor's value only to save work (an early exit, a rare fix-up) takes
    that branch only when this holds; on an accelerator it runs the branch-free form, so a step
    never waits for the device.  tests/runs/test_device.py patches it to False to exercise those paths on CPU.
    """
    return t.device.type == "cpu"


def one_hot(y: torch.Tensor, n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``(b,) -> (b, n)``: the one-hot rows of labels ``y`` in ``dtype``, by comparison with ``arange(n)`` (no host
    read: ``F.one_hot`` checks the labels' range on the host on a CPU; a label outside [0, n) gives a zero row)."""
    return (y[:, None] == torch.arange(n, device=y.device)).to(dtype)


def autocast(device: torch.device, precision: str = "32"):
    """Mixed precision for a MODEL FORWARD only: ``torch.autocast(device.type, bfloat16)`` when
    ``precision == "bf16"``, else a no-op context.

    Never wrap the privacy-critical maths in it (clipping, the norms that bound a sensitivity, noise
    addition, released projections, accounting): callers cast the forward's output back with
    ``.float()`` before any of those, so every released tensor is float32.
    """
    if check_precision(precision) == "32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def json_safe(obj):
    """Replace inf/nan floats by strings so results.json stays standard JSON."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, (np.floating, np.integer)):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return "inf" if obj > 0 else ("-inf" if obj < 0 else "nan")
    return obj


def without_keys(node, keys: tuple[str, ...]):
    """A copy of a nested dict / list structure without the dict entries named in ``keys`` (at any depth)."""
    if isinstance(node, dict):
        return {k: without_keys(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [without_keys(v, keys) for v in node]
    return node
