"""Classifier networks of the WDP / Bayesian-DP experiments (WDP paper, Table 2 models).

The authors' ``MNISTConvNet`` / ``CIFARConvNet`` put BatchNorm after each convolution.  BatchNorm in
training mode mixes the samples of a batch, so per-sample gradients (DP-SGD) are not defined for
it; here the normalisation layer is GroupNorm (per sample) or none (``norm``).  Everything else is
the authors' architecture:

    Conv(c->64, k) -> ReLU -> MaxPool 2 -> Norm(64) -> Conv(64->64, k) -> ReLU -> Norm(64) -> MaxPool 2
    -> flatten -> Linear(F->h1) -> act -> Linear(h1->h2) -> act -> Linear(h2->classes)

MNIST / F-MNIST (1x28x28, k = 5): F = 64*4*4 = 1024, h = (384, 192), act = SELU.
CIFAR-10 / SVHN (3x32x32, k = 5): F = 64*5*5 = 1600, h = (384, 384), act = ReLU.
Other image sizes (the 8x8 digits) use a smaller kernel with padding; F is inferred.
"""

from __future__ import annotations

import torch
from torch import nn

_ACTS = {"selu": nn.SELU, "relu": nn.ReLU, "tanh": nn.Tanh}


def _norm(kind: str, channels: int, groups: int) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(min(groups, channels), channels)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"model.network.norm={kind!r}: choose 'group' or 'none' (BatchNorm in training mode mixes "
                     "samples, so DP-SGD's per-sample gradients are undefined for it)")


class ConvClassifier(nn.Module):
    """Two conv blocks + three linear layers; input ``(n, C, H, W)`` -> logits ``(n, num_classes)``."""

    def __init__(self, in_channels: int = 1, image_size: int = 28, num_classes: int = 10,
                 channels: tuple[int, int] = (64, 64), kernel_size: int = 5, padding: int = 0,
                 hidden: tuple[int, int] = (384, 192), activation: str = "selu", norm: str = "group",
                 groups: int = 8) -> None:
        super().__init__()
        if activation not in _ACTS:
            raise ValueError(f"model.network.activation={activation!r}: choose one of {', '.join(_ACTS)}")
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, kernel_size, padding=padding), nn.ReLU(), nn.MaxPool2d(2),
            _norm(norm, c1, groups),
            nn.Conv2d(c1, c2, kernel_size, padding=padding), nn.ReLU(), _norm(norm, c2, groups), nn.MaxPool2d(2),
            nn.Flatten(),
        )
        with torch.no_grad():
            try:
                flat = self.features(torch.zeros(1, in_channels, image_size, image_size)).shape[1]
            except RuntimeError as e:
                raise ValueError(f"image size {image_size} is too small for kernel_size={kernel_size}, "
                                 f"padding={padding}; use a smaller model.network.kernel_size or padding") from e
        act = _ACTS[activation]
        h1, h2 = hidden
        self.head = nn.Sequential(nn.Linear(flat, h1), act(), nn.Linear(h1, h2), act(), nn.Linear(h2, num_classes))
        self.flat_dim = flat

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def mnist_convnet(in_channels: int = 1, image_size: int = 28, num_classes: int = 10, **kw) -> ConvClassifier:
    """The authors' ``MNISTConvNet`` (GroupNorm for BatchNorm): 1024 -> 384 -> 192 -> 10, SELU."""
    kw = {"hidden": (384, 192), "activation": "selu", **kw}
    return ConvClassifier(in_channels, image_size, num_classes, **kw)


def cifar_convnet(in_channels: int = 3, image_size: int = 32, num_classes: int = 10, **kw) -> ConvClassifier:
    """The authors' ``CIFARConvNet`` (GroupNorm for BatchNorm): 1600 -> 384 -> 384 -> 10, ReLU."""
    kw = {"hidden": (384, 384), "activation": "relu", **kw}
    return ConvClassifier(in_channels, image_size, num_classes, **kw)
