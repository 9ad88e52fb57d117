"""Feature maps used to compute distances in a latent space."""

from __future__ import annotations

import torch
from torch import nn


class DCGANFeatureMap(nn.Module):
    """DSW discriminator trunk (DP-SWD paper, CelebA generator): 3x64x64 -> 8192 features in [-1, 1].

    Conv(3->64, 4, s2, p1) -> LReLU(0.2) -> Conv(64->128) -> BN -> LReLU -> Conv(128->256) -> BN ->
    LReLU -> Conv(256->512) -> BN -> Tanh, flattened (512*4*4).  ``head`` (Conv(512->1, 4) ->
    logits) is the real/fake classifier used to train it.  Inputs in [0, 1] are mapped to [-1, 1].
    """

    def __init__(self, width: int = 64, in_channels: int = 3, image_size: int = 64) -> None:
        super().__init__()
        n_down = {64: 4, 32: 3}[image_size]
        ch = [width * 2 ** i for i in range(n_down)]
        layers: list[nn.Module] = [nn.Conv2d(in_channels, ch[0], 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True)]
        for a, b in zip(ch[:-1], ch[1:], strict=True):
            layers += [nn.Conv2d(a, b, 4, 2, 1, bias=False), nn.BatchNorm2d(b)]
            layers += [nn.LeakyReLU(0.2, True)] if b != ch[-1] else [nn.Tanh()]
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Conv2d(ch[-1], 1, 4, 1, 0, bias=False)
        self.out_dim = ch[-1] * 4 * 4

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (n, 3, H, W)`` in [0, 1] -> ``(n, out_dim)``."""
        return self.trunk(x * 2.0 - 1.0).flatten(1)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        h = self.trunk(x * 2.0 - 1.0)
        return self.head(h).flatten()
