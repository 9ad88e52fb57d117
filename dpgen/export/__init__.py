"""Sampling and exporting from a release (``dpgen sample``) with its privacy card.

The names load on first use (PEP 562): ``dpgen sample`` checks its places (:mod:`.places`) before torch loads."""

from __future__ import annotations

from ..utils.lazy import lazy_exports

__all__ = ["Release", "load_release"]

__getattr__, __dir__ = lazy_exports(__name__, {"Release": "release", "load_release": "release"})
