"""Sampling and exporting from a release (``dpgen sample``) with its privacy card."""

from .release import Release, load_release

__all__ = ["Release", "load_release"]
