"""Small run utilities: seeding, device choice, atomic checkpoints, JSON sanitising.

The names load on first use (PEP 562), so a command that needs only ``with_prog`` imports no torch."""

from __future__ import annotations

import importlib

_WHERE = {  # name -> the module of this package that defines it
    "atomic_save": "checkpoint", "load_checkpoint": "checkpoint", "rng_state": "checkpoint", "set_rng_state": "checkpoint",
    "autocast": "misc", "check_precision": "misc", "json_safe": "misc", "pick_device": "misc",
    "seed_everything": "misc", "with_prog": "prog", "without_keys": "misc",
}

__all__ = ["atomic_save", "autocast", "check_precision", "json_safe", "load_checkpoint", "pick_device", "rng_state", "seed_everything",
           "set_rng_state", "with_prog", "without_keys"]


def __getattr__(name: str):
    """``dpgen.utils.<name>``: the name from its module, imported now."""
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
