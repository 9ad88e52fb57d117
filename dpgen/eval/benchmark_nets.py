"""The three classifiers of DPImageBench's utility protocol and its parameter EMA.

DPImageBench (Gong, Li, Lin, Wang; CCS 2025) trains a ResNet, a Wide-ResNet and a ResNeXt on the
synthetic images.  For 28×28 and 32×32 grey images (its non-CIFAR branch) it builds them with the class
defaults of its ``evaluation/classifier/{resnet,wrn,resnext}.py``:

* ``ResNet(depth=110)``, BasicBlock, widths 16 / 32 / 64, average pool over ``img_size // 4``;
* ``WideResNet(depth=40, widen_factor=4, dropRate=0.3)`` (WRN-40-4), pre-activation blocks;
* ``ResNeXt(depth=29, cardinality=8, widen_factor=4)``; the benchmark passes ``dropRate=0.3``, which its
  ResNeXt accepts and never uses, so this one has no dropout either.

The initialisations follow the same files.  Inputs are ``(n, C, H, W)`` with ``H = W`` divisible by 4 (the
8×8 digits, 16×16 USPS, 28×28 MNIST / F-MNIST, 32×32); inputs are mapped to [-1, 1] by the caller.

:class:`ParameterEMA` is the benchmark's ``evaluation/ema.py`` (itself ``torch_ema``): the average of the
trainable parameters with decay ``min(decay, (1 + t) / (10 + t))`` after the ``t``-th optimiser step; batch-norm
running statistics are not averaged; the averaged weights are the ones evaluated.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

ARCHITECTURES = ("resnet", "wrn", "resnext")
# the benchmark's sizes for 28x28 / 32x32 grey images (its class defaults)
DEFAULT_SIZES: dict[str, dict] = {
    "resnet": {"depth": 110},
    "wrn": {"depth": 40, "widen_factor": 4, "drop_rate": 0.3},
    "resnext": {"depth": 29, "cardinality": 8, "widen_factor": 4},
}
DISPLAY = {"resnet": "ResNet-{depth}", "wrn": "WRN-{depth}-{widen_factor}", "resnext": "ResNeXt-{depth} ({cardinality}x{widen_factor})"}


def describe(name: str, size: dict) -> str:
    """``ResNet-110``, ``WRN-40-4``, ``ResNeXt-29 (8x4)``."""
    return DISPLAY[name].format(**size)


# ------------------------------------------------------------------------------ ResNet
def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = _conv3x3(cout, cout), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """CIFAR-style ResNet of depth ``6n + 2`` with basic blocks (16, 32, 64 channels)."""

    def __init__(self, in_c: int, img_size: int, num_classes: int, depth: int = 110) -> None:
        super().__init__()
        if (depth - 2) % 6:
            raise ValueError(f"ResNet depth must be 6n+2 (20, 32, 44, 56, 110), got {depth}")
        n = (depth - 2) // 6
        self.conv1, self.bn1 = nn.Conv2d(in_c, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        layers, cin = [], 16
        for width, stride in ((16, 1), (32, 2), (64, 2)):
            for i in range(n):
                layers.append(_BasicBlock(cin, width, stride if i == 0 else 1))
                cin = width
        self.layers = nn.Sequential(*layers)
        self.pool = img_size // 4
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                m.weight.data.normal_(0, math.sqrt(2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.avg_pool2d(x, self.pool).flatten(1))


# ------------------------------------------------------------------------------ Wide-ResNet
class _WideBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, drop_rate: float) -> None:
        super().__init__()
        self.bn1, self.conv1 = nn.BatchNorm2d(cin), nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn2, self.conv2 = nn.BatchNorm2d(cout), nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.drop_rate = drop_rate
        self.shortcut = None if cin == cout else nn.Conv2d(cin, cout, 1, stride=stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.bn1(x))
        if self.shortcut is not None:  # the benchmark's block: a projection shortcut reads the activated input
            x = pre
        out = F.relu(self.bn2(self.conv1(pre)))
        if self.drop_rate > 0:
            out = F.dropout(out, p=self.drop_rate, training=self.training)
        out = self.conv2(out)
        return out + (x if self.shortcut is None else self.shortcut(x))


class WideResNet(nn.Module):
    """WRN-``depth``-``widen_factor`` (``depth = 6n + 4``), dropout ``drop_rate`` inside each block."""

    def __init__(self, in_c: int, img_size: int, num_classes: int, depth: int = 40, widen_factor: int = 4,
                 drop_rate: float = 0.3) -> None:
        super().__init__()
        if (depth - 4) % 6:
            raise ValueError(f"WideResNet depth must be 6n+4 (16, 28, 40), got {depth}")
        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.conv1 = nn.Conv2d(in_c, widths[0], 3, padding=1, bias=False)
        blocks, cin = [], widths[0]
        for width, stride in zip(widths[1:], (1, 2, 2), strict=True):
            for i in range(n):
                blocks.append(_WideBlock(cin, width, stride if i == 0 else 1, drop_rate))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(widths[3])
        self.fc = nn.Linear(widths[3], num_classes)
        self.pool = img_size // 4
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn(self.blocks(self.conv1(x))))
        return self.fc(F.avg_pool2d(x, self.pool).flatten(1))


# ------------------------------------------------------------------------------ ResNeXt
class _NeXtBlock(nn.Module):
    """Bottleneck type C: 1×1 reduce to ``D = cardinality * cout / widen_factor``, grouped 3×3, 1×1 expand."""

    def __init__(self, cin: int, cout: int, stride: int, cardinality: int, widen_factor: int) -> None:
        super().__init__()
        d = cardinality * cout // widen_factor
        self.conv_reduce, self.bn_reduce = nn.Conv2d(cin, d, 1, bias=False), nn.BatchNorm2d(d)
        self.conv_conv = nn.Conv2d(d, d, 3, stride=stride, padding=1, groups=cardinality, bias=False)
        self.bn = nn.BatchNorm2d(d)
        self.conv_expand, self.bn_expand = nn.Conv2d(d, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn_reduce(self.conv_reduce(x)))
        out = F.relu(self.bn(self.conv_conv(out)))
        out = self.bn_expand(self.conv_expand(out))
        return F.relu(self.shortcut(x) + out)


class ResNeXt(nn.Module):
    """ResNeXt-``depth`` (``depth = 9n + 2``) of the CIFAR paper: stages 64·w, 128·w, 256·w channels."""

    def __init__(self, in_c: int, img_size: int, num_classes: int, depth: int = 29, cardinality: int = 8,
                 widen_factor: int = 4) -> None:
        super().__init__()
        if (depth - 2) % 9:
            raise ValueError(f"ResNeXt depth must be 9n+2 (11, 20, 29), got {depth}")
        n = (depth - 2) // 9
        stages = [64, 64 * widen_factor, 128 * widen_factor, 256 * widen_factor]
        self.conv_1_3x3, self.bn_1 = nn.Conv2d(in_c, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64)
        blocks, cin = [], stages[0]
        for width, stride in zip(stages[1:], (1, 2, 2), strict=True):
            for i in range(n):
                blocks.append(_NeXtBlock(cin, width, stride if i == 0 else 1, cardinality, widen_factor))
                cin = width
        self.blocks = nn.Sequential(*blocks)
        self.classifier = nn.Linear(stages[3], num_classes)
        self.pool = img_size // 4
        nn.init.kaiming_normal_(self.classifier.weight)
        self.classifier.bias.data.zero_()
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(F.relu(self.bn_1(self.conv_1_3x3(x))))
        return self.classifier(F.avg_pool2d(x, self.pool, 1).flatten(1))


_CLASSES = {"resnet": ResNet, "wrn": WideResNet, "resnext": ResNeXt}


def build_classifier(name: str, in_c: int, img_size: int, num_classes: int, size: dict) -> nn.Module:
    """The classifier ``name`` (resnet | wrn | resnext) at ``size`` (its keys of :data:`DEFAULT_SIZES`)."""
    if img_size % 4:
        raise ValueError(f"the benchmark's classifiers pool over img_size // 4: image size {img_size} is not a "
                         "multiple of 4")
    return _CLASSES[name](in_c, img_size, num_classes, **size)


class ParameterEMA:
    """Exponential moving average of the trainable parameters (DPImageBench's ``evaluation/ema.py``).

    The averages live in one flat float buffer (``shadow`` are views of it, one per parameter): an update is
    one concatenation and three element-wise operations on the whole buffer (a few kernel launches per step on
    a GPU instead of three per parameter tensor), rounding exactly as the per-tensor ``s -= (1 - d) * (s - p)``."""

    def __init__(self, parameters, decay: float) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"EMA decay must be in [0, 1], got {decay}")
        self.decay, self.updates = float(decay), 0
        params = [p for p in parameters if p.requires_grad]
        self._flat = _flat(params).clone()
        self.shadow, offset = [], 0
        for p in params:
            self.shadow.append(self._flat[offset:offset + p.numel()].view(p.shape))
            offset += p.numel()
        self._stored: list[torch.Tensor] = []

    @torch.no_grad()
    def update(self, parameters) -> None:
        """After each optimiser step: ``shadow -= (1 - d) (shadow - p)``, ``d = min(decay, (1 + t) / (10 + t))``."""
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        current = _flat([p for p in parameters if p.requires_grad])
        if current.numel() != self._flat.numel():
            raise ValueError(f"EMA of {self._flat.numel()} parameter values updated with {current.numel()}")
        self._flat.sub_((1.0 - d) * (self._flat - current))

    @torch.no_grad()
    def swap_in(self, parameters) -> None:
        """Keep the current parameters and load the averages (evaluate with the EMA weights)."""
        params = [p for p in parameters if p.requires_grad]
        self._stored = [p.detach().clone() for p in params]
        for s, p in zip(self.shadow, params, strict=True):
            p.copy_(s)

    @torch.no_grad()
    def swap_out(self, parameters) -> None:
        """Restore the parameters kept by :meth:`swap_in` (training goes on from them)."""
        for c, p in zip(self._stored, [p for p in parameters if p.requires_grad], strict=True):
            p.copy_(c)
        self._stored = []


def _flat(params: list[torch.Tensor]) -> torch.Tensor:
    """The parameters' values in one vector, each in its logical (NCHW) order whatever its memory format."""
    return torch.cat([p.detach().reshape(-1) for p in params])
