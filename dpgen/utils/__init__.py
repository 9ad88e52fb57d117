"""Small run utilities: seeding, device choice, atomic checkpoints, JSON sanitising."""
from .checkpoint import atomic_save, load_checkpoint, rng_state, set_rng_state
from .misc import (
           autocast,
           check_precision,
           json_safe,
           pick_device,
           seed_everything,
           unavailable_device,
           with_prog,
           without_keys,
)

__all__ = ["atomic_save", "autocast", "check_precision", "json_safe", "load_checkpoint", "pick_device", "rng_state", "seed_everything",
           "set_rng_state", "unavailable_device", "with_prog", "without_keys"]
