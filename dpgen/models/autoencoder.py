"""Autoencoders of DPSWflow (DPSWflow paper, autoencoder) and the DPSWgen latent generator.

Networks only (training lives in ``dpgen.methods.latent``).  Every encoder ends with an L2
normalisation: ``encode(x)`` returns latents of norm exactly 1 (the sensitivity assumption of the
flows: two latents differ by at most 2).  Decoders take latents ``(n, d)`` and return images in
[0, 1] of the *input* shape (the padding to the network's working size is undone).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..privacy.rows import unit_normalise  # the row map that makes the sensitivity bound true
from .shapes import image_shape_error


class _PadCrop(nn.Module):
    """Zero-pads (n, C, H, W) images to ``size`` x ``size`` (= torchvision CenterCrop(32) on 28x28)."""

    def __init__(self, image_shape: tuple[int, int, int], size: int | None) -> None:
        super().__init__()
        _, h, w = image_shape
        self.size = max(h, w) if size is None else int(size)
        if self.size < max(h, w):
            raise image_shape_error(f"model.autoencoder (pad_to={size})", f"images of at most {size}x{size}", image_shape)
        self.top, self.left = (self.size - h) // 2, (self.size - w) // 2
        self.h, self.w = h, w

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (self.left, self.size - self.w - self.left, self.top, self.size - self.h - self.top))

    def crop(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., self.top:self.top + self.h, self.left:self.left + self.w]


class LiutkusAutoencoder(nn.Module):
    """MNIST / F-MNIST autoencoder ("Liutkus" architecture, DPSWflow paper, autoencoder), C channels, input padded to S x S.

    Encoder: Conv(C->3, 3, s1, p1) -> ReLU -> Conv(3->W, 2, s2, p0) -> ReLU -> Conv(W->W, 3, 1, 1) -> ReLU
    -> Conv(W->W, 3, 1, 1) -> ReLU -> flatten (W * S/2 * S/2) -> Linear(-> d) -> L2 normalisation.
    Decoder: Linear(d -> W * S/2 * S/2) -> ReLU -> (W, S/2, S/2) -> ConvT(W->W, 3, 1, 1) -> ReLU ->
    ConvT(W->W, 3, 1, 1) -> ReLU -> ConvT(W->W, 2, 2, 0) -> ReLU -> Conv(W->C, 3, 1, 1) -> Sigmoid.
    MNIST: S = 32 (28 zero-padded), W = 32, d = 8 (8192-d bottleneck input as in the code).
    """

    def __init__(self, image_shape: tuple[int, int, int] = (1, 28, 28), latent_dim: int = 8, width: int = 32,
                 pad_to: int | None = 32) -> None:
        super().__init__()
        c = image_shape[0]
        self.image_shape, self.latent_dim = tuple(image_shape), int(latent_dim)
        self.frame = _PadCrop(self.image_shape, pad_to)
        s = self.frame.size
        if s % 2:
            raise image_shape_error(f"model.autoencoder (LiutkusAutoencoder, working size {s})",
                                    "an even working size (set model.autoencoder.pad_to)", image_shape)
        self.w, self.s2 = width, s // 2
        flat = width * self.s2 * self.s2
        self.enc = nn.Sequential(nn.Conv2d(c, 3, 3, 1, 1), nn.ReLU(), nn.Conv2d(3, width, 2, 2, 0), nn.ReLU(),
                                 nn.Conv2d(width, width, 3, 1, 1), nn.ReLU(), nn.Conv2d(width, width, 3, 1, 1),
                                 nn.ReLU(), nn.Flatten(), nn.Linear(flat, latent_dim))
        self.dec_fc = nn.Linear(latent_dim, flat)
        self.dec = nn.Sequential(nn.ConvTranspose2d(width, width, 3, 1, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(width, width, 3, 1, 1), nn.ReLU(),
                                 nn.ConvTranspose2d(width, width, 2, 2, 0), nn.ReLU(),
                                 nn.Conv2d(width, c, 3, 1, 1), nn.Sigmoid())

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (n, C, H, W)`` in [0, 1] -> unit-norm latents ``(n, d)``."""
        return unit_normalise(self.enc(self.frame.pad(x)))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """``z: (n, d)`` -> images ``(n, C, H, W)`` in [0, 1]."""
        h = F.relu(self.dec_fc(z)).view(-1, self.w, self.s2, self.s2)
        return self.frame.crop(self.dec(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))


class DCGANAutoencoder(nn.Module):
    """CelebA 64x64 autoencoder (DCGAN-64, nf = 64; DPSWflow paper, autoencoder). Blocks: conv -> BN -> LeakyReLU(0.2), no bias.

    Encoder: Conv(3->64, 4, 2, 1) -> LReLU ; Conv(64->128) ; Conv(128->256) ; Conv(256->512) (4, 2, 1, + BN +
    LReLU) ; Conv(512->d, 4, 1, 0) -> BN -> Tanh -> (n, d) -> L2 normalisation.
    Decoder: ConvT(d->512, 4, 1, 0) -> BN -> LReLU ; ConvT(512->256) ; ConvT(256->128) ; ConvT(128->64)
    (4, 2, 1, + BN + LReLU) ; ConvT(64->3, 4, 2, 1) -> Sigmoid.
    """

    def __init__(self, image_shape: tuple[int, int, int] = (3, 64, 64), latent_dim: int = 48, width: int = 64) -> None:
        super().__init__()
        c, h, w = image_shape
        if (h, w) != (64, 64):
            raise image_shape_error("model.autoencoder (DCGANAutoencoder)", "64x64 images", image_shape)
        self.image_shape, self.latent_dim = tuple(image_shape), int(latent_dim)
        nf = width

        def down(a: int, b: int) -> list[nn.Module]:
            return [nn.Conv2d(a, b, 4, 2, 1, bias=False), nn.BatchNorm2d(b), nn.LeakyReLU(0.2)]

        def up(a: int, b: int) -> list[nn.Module]:
            return [nn.ConvTranspose2d(a, b, 4, 2, 1, bias=False), nn.BatchNorm2d(b), nn.LeakyReLU(0.2)]

        self.enc = nn.Sequential(nn.Conv2d(c, nf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2), *down(nf, 2 * nf),
                                 *down(2 * nf, 4 * nf), *down(4 * nf, 8 * nf), nn.Conv2d(8 * nf, latent_dim, 4, 1, 0,
                                                                                          bias=False),
                                 nn.BatchNorm2d(latent_dim), nn.Tanh(), nn.Flatten())
        self.dec = nn.Sequential(nn.ConvTranspose2d(latent_dim, 8 * nf, 4, 1, 0, bias=False), nn.BatchNorm2d(8 * nf),
                                 nn.LeakyReLU(0.2), *up(8 * nf, 4 * nf), *up(4 * nf, 2 * nf), *up(2 * nf, nf),
                                 nn.ConvTranspose2d(nf, c, 4, 2, 1, bias=False), nn.Sigmoid())

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return unit_normalise(self.enc(x))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.dec(z[:, :, None, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(self.encode(x))


class LatentMLPGen(nn.Module):
    """DPSWgen's latent generator (DPSWflow paper, DPSWgen baseline): Linear(in->256) -> ReLU -> Linear(256->512) -> BN -> ReLU ->
    Linear(512->256) -> ReLU -> Linear(256->out); Gaussian input ``z: (n, d_code)`` -> ``(n, out)``."""

    def __init__(self, d_code: int = 8, out_dim: int = 8, hidden: tuple[int, int, int] = (256, 512, 256)) -> None:
        super().__init__()
        self.d_code, self.out_dim = int(d_code), int(out_dim)
        h1, h2, h3 = hidden
        self.net = nn.Sequential(nn.Linear(d_code, h1), nn.ReLU(), nn.Linear(h1, h2), nn.BatchNorm1d(h2), nn.ReLU(),
                                 nn.Linear(h2, h3), nn.ReLU(), nn.Linear(h3, out_dim))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)
