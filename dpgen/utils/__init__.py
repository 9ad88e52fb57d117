"""Small run utilities: seeding, device choice, atomic checkpoints, JSON sanitising.

The names load on first use (PEP 562), so a command that needs only ``with_prog`` imports no torch."""

from __future__ import annotations

from .lazy import lazy_exports

_WHERE = {  # name -> the module of this package that defines it
    "atomic_save": "checkpoint", "load_checkpoint": "checkpoint", "rng_state": "checkpoint", "set_rng_state": "checkpoint",
    "autocast": "misc", "check_precision": "misc", "json_safe": "misc", "pick_device": "misc",
    "seed_everything": "misc", "unavailable_device": "misc", "with_prog": "prog", "without_keys": "misc",
}

__all__ = ["atomic_save", "autocast", "check_precision", "json_safe", "load_checkpoint", "pick_device", "rng_state", "seed_everything",
           "set_rng_state", "unavailable_device", "with_prog", "without_keys"]


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
