"""The checks of ``trainer.precision``, ``trainer.compile``, ``trainer.graph`` and the devices (no torch: the command-line checks run them before
torch loads; :mod:`dpgen.utils.misc` and :mod:`dpgen.utils.compiling` use them)."""

from __future__ import annotations

PRECISIONS = ("32", "bf16")
COMPILE_SETTINGS = ("off", "on")


def check_precision(precision) -> str:
    """``trainer.precision`` -> ``"32"`` or ``"bf16"``; anything else fails naming the setting."""
    p = str(precision)
    if p not in PRECISIONS:
        raise ValueError(f"trainer.precision={precision!r} is unknown; choose 32 (float32 everywhere) or bf16 "
                         "(bfloat16 autocast around the generator / feature-extractor forwards)")
    return p


def check_compile(value) -> bool:
    """``trainer.compile`` (off | on; a YAML boolean is taken as such) -> whether to compile."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in COMPILE_SETTINGS:
        raise ValueError(f"trainer.compile={value!r} is unknown; choose off (eager steps, the default) or on "
                         "(torch.compile of the model, the public loss and the optimiser step)")
    return text == "on"


GRAPH_SETTINGS = ("auto", "on", "off")


def check_graph(value) -> str:
    """``trainer.graph`` (auto | on | off; a YAML boolean is taken as on / off) -> the setting."""
    if isinstance(value, bool):
        return "on" if value else "off"
    text = str(value).strip().lower()
    if text not in GRAPH_SETTINGS:
        raise ValueError(f"trainer.graph={value!r} is unknown; choose auto (one CUDA graph per step on a GPU, the "
                         "default), on or off (eager steps)")
    return text


def device_fix(setting: str) -> str:
    return f"use {setting}=auto (the GPU when there is one, else the CPU) or {setting}=cpu"


def no_cuda_gpu(device: str, setting: str) -> str:
    return f"{setting}={device} but this machine has no CUDA GPU (torch sees none); {device_fix(setting)}"


def no_apple_gpu(device: str, setting: str) -> str:
    return f"{setting}={device} but this machine has no Apple GPU (MPS); {device_fix(setting)}"


def certainly_no_cuda_gpu() -> bool:
    """True when torch cannot see a CUDA GPU here, known without importing torch: ``CUDA_VISIBLE_DEVICES`` hides
    every GPU, or the system has no GPU driver (Linux: no NVIDIA device files, no ``/proc/driver/nvidia``, no
    ROCm ``/dev/kfd``; macOS has no CUDA).  False when a GPU may be there (torch then answers)."""
    import os
    import sys
    from pathlib import Path

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return True
    if sys.platform == "darwin":
        return True
    if not sys.platform.startswith("linux"):
        return False
    dev = Path("/dev")
    return not (Path("/proc/driver/nvidia").exists() or (dev / "kfd").exists()
                or any(dev.glob("nvidia[0-9]*")) or (dev / "nvidiactl").exists())


def device_problem_before_torch(device, setting: str) -> str | None:
    """Why the device ``device`` (the value of ``setting``) cannot be used here, when that is certain without
    torch: not a device dpgen runs on, a GPU named on a machine without one (:func:`certainly_no_cuda_gpu`), MPS
    off macOS.  None when it can be used or only torch can say (``dpgen.utils.misc.unavailable_device`` then has
    the last word)."""
    import re
    import sys

    text = str(device)
    if text in ("auto", "cpu"):
        return None
    match = re.fullmatch(r"(cpu|cuda|mps)(:\d+)?", text)
    if match is None:
        return f"{setting}={text}: dpgen runs on cpu, cuda or mps; {device_fix(setting)}"
    if match.group(1) == "cpu":
        return None
    if match.group(1) == "cuda":
        return no_cuda_gpu(text, setting) if certainly_no_cuda_gpu() else None
    return no_apple_gpu(text, setting) if sys.platform != "darwin" else None
