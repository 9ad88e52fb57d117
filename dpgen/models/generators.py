"""Generator networks (no training loops here)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..utils.misc import one_hot
from .shapes import image_shape_error


def with_label(z: torch.Tensor, y: torch.Tensor | None, n_labels: int) -> torch.Tensor:
    """``[z || onehot(y)]`` for a conditional generator (``z`` unchanged when ``n_labels == 0``)."""
    if not n_labels:
        return z
    return torch.cat([z, one_hot(y, n_labels, z.dtype)], dim=1)


class ConvCondGen(nn.Module):
    """DP-MERF's conditional convolutional generator (DP-SWD Table 3, DP-SWD paper, MNIST / F-MNIST generator).

    ``[z || onehot(y)]`` (d_code + n_labels) -> Linear(hidden) -> BN -> ReLU ->
    Linear(C0 * H/4 * W/4) -> BN -> reshape (C0, H/4, W/4) -> bilinear x2 -> Conv(C0->C1, ks) -> ReLU
    -> bilinear x2 -> Conv(C1->C_out, ks) -> Sigmoid.  For MNIST (1, 28, 28): 784 = 16*7*7,
    ~167k parameters.  Output ``(n, C_out, H, W)`` in [0, 1].
    """

    def __init__(self, d_code: int = 10, n_labels: int = 10, hidden: int = 200,
                 channels: tuple[int, int] = (16, 8), kernel_size: int = 5,
                 image_shape: tuple[int, int, int] = (1, 28, 28)) -> None:
        super().__init__()
        c_out, h, w = image_shape
        if h % 4 or w % 4:
            raise image_shape_error("model.generator (ConvCondGen)", "image sides divisible by 4", image_shape)
        self.d_code, self.n_labels, self.image_shape = d_code, n_labels, tuple(image_shape)
        self.c0, self.h0, self.w0 = channels[0], h // 4, w // 4
        self.fc1 = nn.Linear(d_code + n_labels, hidden)
        self.bn1 = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, self.c0 * self.h0 * self.w0)
        self.bn2 = nn.BatchNorm1d(self.c0 * self.h0 * self.w0)
        pad = kernel_size // 2
        self.conv1 = nn.Conv2d(channels[0], channels[1], kernel_size, padding=pad)
        self.conv2 = nn.Conv2d(channels[1], c_out, kernel_size, padding=pad)

    @property
    def conditional(self) -> bool:
        return self.n_labels > 0

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """``z: (n, d_code)``, ``y: (n,)`` long -> ``(n, C, H, W)``: ``tail(head(z, y))``."""
        return self.tail(self.head(z, y))

    def head(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        """The layers that mix the rows of a batch (both BatchNorms) and are cheap: ``(n, C0 H/4 W/4)``.  On
        several processes every rank runs the head on the whole batch and the tail on its own rows only
        (``methods.parallel.GeneratedSide``), so no BatchNorm statistic crosses the processes."""
        x = F.relu(self.bn1(self.fc1(with_label(z, y, self.n_labels))))
        return self.bn2(self.fc2(x))

    def tail(self, h: torch.Tensor) -> torch.Tensor:
        """The row-wise layers (upsampling and convolutions, the step's costly part): ``(n, C, H, W)``."""
        x = h.view(-1, self.c0, self.h0, self.w0)
        # channels-last layout (same values): oneDNN's convolutions with these few channels run ~2x faster
        # in it on CPU, above all the backward of conv2 (8 -> 1 channel); the layout carries through
        # interpolate and both convolutions (dpgen/bench/steps.py)
        x = x.contiguous(memory_format=torch.channels_last)
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        x = F.relu(self.conv1(x))
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return torch.sigmoid(self.conv2(x))


class MLPGen(nn.Module):
    """Small conditional MLP generator for vector data (the toy Gaussians).  Output unbounded."""

    def __init__(self, d_code: int = 5, n_labels: int = 2, hidden: int = 64,
                 image_shape: tuple[int, int, int] = (1, 1, 5)) -> None:
        super().__init__()
        self.d_code, self.n_labels, self.image_shape = d_code, n_labels, tuple(image_shape)
        out = int(torch.tensor(image_shape).prod())
        self.net = nn.Sequential(nn.Linear(d_code + n_labels, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, out))

    @property
    def conditional(self) -> bool:
        return self.n_labels > 0

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return self.net(with_label(z, y, self.n_labels)).view(-1, *self.image_shape)


class DCGANDecoder(nn.Module):
    """DSW's ``LSUNDecoder`` (DP-SWD paper, CelebA generator): latent 32 -> 3x64x64 in [0, 1].

    ConvT(32->512, 4, s1, p0) -> BN -> ReLU -> ConvT(512->256, 4, s2, p1) -> BN -> ReLU ->
    ConvT(256->128) -> BN -> ReLU -> ConvT(128->64) -> BN -> ReLU -> ConvT(64->3, 4, s2, p1) -> Tanh.
    The Tanh output in [-1, 1] is mapped to [0, 1] (dpgen keeps every image in [0, 1]).
    Unconditional (``n_labels = 0``).  ``image_shape=(3, 32, 32)`` drops one up-sampling block.
    """

    def __init__(self, d_code: int = 32, width: int = 64, image_shape: tuple[int, int, int] = (3, 64, 64),
                 n_labels: int = 0) -> None:
        super().__init__()
        c, h, _ = image_shape
        n_up = {64: 4, 32: 3}.get(h)
        if n_up is None:
            raise image_shape_error("model.generator (DCGANDecoder)", "32x32 or 64x64 images", image_shape)
        self.d_code, self.n_labels, self.image_shape = d_code, 0, tuple(image_shape)
        ch = [width * 2 ** i for i in range(n_up - 1, -1, -1)]  # 64x64: 512, 256, 128, 64
        layers: list[nn.Module] = [nn.ConvTranspose2d(d_code, ch[0], 4, 1, 0, bias=False), nn.BatchNorm2d(ch[0]),
                                   nn.ReLU(True)]
        for a, b in zip(ch[:-1], ch[1:], strict=True):
            layers += [nn.ConvTranspose2d(a, b, 4, 2, 1, bias=False), nn.BatchNorm2d(b), nn.ReLU(True)]
        layers += [nn.ConvTranspose2d(ch[-1], c, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    @property
    def conditional(self) -> bool:
        return False

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return (self.net(z[:, :, None, None]) + 1.0) / 2.0
