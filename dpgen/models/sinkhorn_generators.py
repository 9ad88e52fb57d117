"""DP-Sinkhorn's generators (DP-Sinkhorn paper, generators).  Outputs are in [-1, 1] (tanh), as in the paper;
the method maps them to [0, 1] for the data's value range and for ``sample``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import spectral_norm

from .shapes import image_shape_error


class DCGANCondGenerator(nn.Module):
    """Conditional DCGAN-like generator (``ConvCondGenerator``, DP-Sinkhorn paper, MNIST generator), h = ``hidden``:

    label -> Embedding(K, embed_dim); [z ‖ emb] reshaped to (latent+embed)×1×1 ->
    ConvT(->4h, H/4, s1, p0) -> BN -> LReLU(0.2)      (4h × H/4 × H/4; 7×7 for MNIST)
    ConvT(4h->2h, 4, s2, p1) -> BN -> LReLU           (2h × H/2)
    ConvT(2h->h, 4, s2, p1) -> BN -> LReLU            (h × H)
    Conv(h->C, 3, s1, p1) -> tanh                     (C × H × W in [-1, 1])
    MNIST: latent 16, embed 8, h = 64.  ``z ~ U(0, 1)^latent`` (the reference code's default noise).
    """

    def __init__(self, image_shape: tuple[int, int, int] = (1, 28, 28), n_labels: int = 10, latent_dim: int = 16,
                 embed_dim: int = 8, hidden: int = 64) -> None:
        super().__init__()
        c, h, w = image_shape
        if h != w or h % 4:
            raise image_shape_error("model.generator (DCGANCondGenerator)", "square images with sides divisible by 4",
                                      image_shape)
        self.image_shape, self.n_labels, self.d_code = tuple(image_shape), n_labels, latent_dim
        self.embed = nn.Embedding(max(n_labels, 1), embed_dim)
        d_in = latent_dim + embed_dim
        self.net = nn.Sequential(
            nn.ConvTranspose2d(d_in, 4 * hidden, h // 4, 1, 0, bias=False), nn.BatchNorm2d(4 * hidden),
            nn.LeakyReLU(0.2),
            nn.ConvTranspose2d(4 * hidden, 2 * hidden, 4, 2, 1, bias=False), nn.BatchNorm2d(2 * hidden),
            nn.LeakyReLU(0.2),
            nn.ConvTranspose2d(2 * hidden, hidden, 4, 2, 1, bias=False), nn.BatchNorm2d(hidden), nn.LeakyReLU(0.2),
            nn.Conv2d(hidden, c, 3, 1, 1), nn.Tanh())

    @property
    def conditional(self) -> bool:
        return self.n_labels > 0

    def latent(self, n: int, device: torch.device | str = "cpu", generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.rand(n, self.d_code, device=device, generator=generator)

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """``z: (n, latent_dim)``, ``y: (n,)`` -> ``(n, C, H, W)`` in [-1, 1]."""
        if y is None:
            y = torch.zeros(z.shape[0], dtype=torch.long, device=z.device)
        h = torch.cat([z, self.embed(y)], dim=1)[:, :, None, None]
        # channels-last layout from the first (1x1 -> H/4) layer on (same values): oneDNN's transposed
        # convolutions run ~1.2x faster in it on CPU (dpgen/bench/steps.py)
        h = self.net[0](h).contiguous(memory_format=torch.channels_last)
        return self.net[1:](h)


class ConditionalBatchNorm2d(nn.Module):
    """BatchNorm without affine parameters, then gain ``1 + E_g[y]`` and bias ``E_b[y]`` (BigGAN)."""

    def __init__(self, channels: int, n_labels: int) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels, affine=False, eps=1e-5)
        self.gain = nn.Embedding(n_labels, channels)
        self.bias = nn.Embedding(n_labels, channels)
        nn.init.zeros_(self.gain.weight)
        nn.init.zeros_(self.bias.weight)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.bn(x) * (1 + self.gain(y))[:, :, None, None] + self.bias(y)[:, :, None, None]


def _sn(m: nn.Module) -> nn.Module:
    nn.init.orthogonal_(m.weight)
    return spectral_norm(m, n_power_iterations=1, eps=1e-12)


class ResUpBlock(nn.Module):
    """``h = conv2(act(BN2(conv1(up(act(BN1(x)))))))`` + ``conv_sc(up(x))`` (nearest ×2, ReLU)."""

    def __init__(self, c_in: int, c_out: int, n_labels: int) -> None:
        super().__init__()
        self.bn1, self.bn2 = ConditionalBatchNorm2d(c_in, n_labels), ConditionalBatchNorm2d(c_out, n_labels)
        self.conv1, self.conv2 = _sn(nn.Conv2d(c_in, c_out, 3, 1, 1)), _sn(nn.Conv2d(c_out, c_out, 3, 1, 1))
        self.conv_sc = _sn(nn.Conv2d(c_in, c_out, 1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = F.interpolate(F.relu(self.bn1(x, y)), scale_factor=2, mode="nearest")
        h = self.conv2(F.relu(self.bn2(self.conv1(h), y)))
        return h + self.conv_sc(F.interpolate(x, scale_factor=2, mode="nearest"))


class BigGANCondGenerator(nn.Module):
    """BigGAN-style residual generator for 32×32 (``cond_biggan``, DP-Sinkhorn paper, CelebA generator), ch = ``hidden`` (64):

    SNLinear(latent -> 4ch·4·4) -> 3 × ResUpBlock(4ch -> 4ch) (4 -> 8 -> 16 -> 32) ->
    BN -> ReLU -> SNConv(4ch -> C, 3) -> tanh.  Class-conditional BN (gender: 2 classes),
    orthogonal initialisation, spectral norm (1 power iteration).  ``z ~ U(0, 1)^latent``.
    """

    def __init__(self, image_shape: tuple[int, int, int] = (3, 32, 32), n_labels: int = 2, latent_dim: int = 32,
                 hidden: int = 64, bottom_width: int = 4) -> None:
        super().__init__()
        c, h, w = image_shape
        n_blocks = 0
        while bottom_width * 2 ** n_blocks < h:
            n_blocks += 1
        if h != w or bottom_width * 2 ** n_blocks != h:
            raise image_shape_error("model.generator (BigGANCondGenerator)", "square images of size bottom_width * 2^k",
                                      image_shape)
        ch = 4 * hidden
        self.image_shape, self.n_labels, self.d_code = tuple(image_shape), max(n_labels, 1), latent_dim
        self.bottom, self.ch = bottom_width, ch
        self.linear = _sn(nn.Linear(latent_dim, ch * bottom_width ** 2))
        self.blocks = nn.ModuleList([ResUpBlock(ch, ch, self.n_labels) for _ in range(n_blocks)])
        self.out_bn = nn.BatchNorm2d(ch)
        self.out_conv = _sn(nn.Conv2d(ch, c, 3, 1, 1))
        self._labels = n_labels

    @property
    def conditional(self) -> bool:
        return self._labels > 0

    def latent(self, n: int, device: torch.device | str = "cpu", generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.rand(n, self.d_code, device=device, generator=generator)

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """``z: (n, latent_dim)``, ``y: (n,)`` -> ``(n, C, H, W)`` in [-1, 1]."""
        if y is None:
            y = torch.zeros(z.shape[0], dtype=torch.long, device=z.device)
        x = self.linear(z).view(-1, self.ch, self.bottom, self.bottom)
        for block in self.blocks:
            x = block(x, y)
        return torch.tanh(self.out_conv(F.relu(self.out_bn(x))))
