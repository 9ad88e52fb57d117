"""The user error of a generator that cannot make images of the dataset's shape (one line, no traceback)."""

from __future__ import annotations

from ..errors import ConfigError


def image_shape_error(model: str, needs: str, image_shape: tuple[int, ...]) -> ConfigError:
    """``ConfigError`` naming the preset's generator, what it needs, and the dataset's image shape."""
    shape = "x".join(str(int(s)) for s in image_shape)
    return ConfigError(f"{model} needs {needs}, but the dataset's images are {shape} (C x H x W): choose a preset "
                       "made for this size, or, for your own images, declare a size it supports "
                       "(dataset.image_size=<size> dataset.resize=true)")
