"""Domain-adaptation networks (DP-SWD paper, domain-adaptation networks) and the gradient-reversal layer.

Feature extractors ``g`` map an input batch to features ``(n, out_dim)``; classifiers ``h`` map
features to class logits ``(n, num_classes)``; the DANN discriminator maps features to 2 domain
logits.  No network here has BatchNorm: a per-sample gradient (DP-DANN) and a per-record feature
map (DP-SWD) need every output row to depend on its own input row only.

Each extractor exposes ``out_dim`` and ``feature_bound``: a *public* upper bound on the L2 norm of
one feature row (``sqrt(out_dim)`` after a Sigmoid, ``None`` when the output is unbounded).  DP-SWD
uses it (or a configured public radius) to scale rows to norm <= 1/2 — never a statistic of the
private batch.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class _GradientReversal(torch.autograd.Function):
    """Identity forward, ``-scale * grad`` backward (Ganin & Lempitsky 2015)."""

    generate_vmap_rule = True  # usable inside torch.func.vmap/grad (DP-DANN per-sample gradients)

    @staticmethod
    def forward(x: torch.Tensor, scale: float) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return -ctx.scale * grad, None


def grad_reverse(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """Gradient reversal: ``y = x``; ``dL/dx = -scale * dL/dy``."""
    return _GradientReversal.apply(x, float(scale))


# ----------------------------------------------------------------------------------- digits
class DigitsFeatureExtractor(nn.Module):
    """g for MNIST/USPS 28x28 (DP-SWD paper, domain-adaptation networks): Conv(1->32,5) -> MaxPool2 -> ReLU -> Conv(32->20,5) ->
    Dropout2d(0.5) -> MaxPool2 -> Sigmoid -> flatten (20*4*4 = 320).

    Input ``(n, 1, 28, 28)`` in [0, 1], normalised inside with mean 0.5, std 0.5 (DP-SWD paper, domain-adaptation settings).
    """

    def __init__(self, in_shape: tuple[int, ...] = (1, 28, 28), channels: tuple[int, int] = (32, 20),
                 dropout: float = 0.5) -> None:
        super().__init__()
        if tuple(in_shape[-2:]) != (28, 28) or len(in_shape) != 3:
            raise ValueError(f"DigitsFeatureExtractor needs (C, 28, 28) images, got {tuple(in_shape)}; resize the "
                             "domain to 28x28 (dataset.*.image_size=28)")
        c1, c2 = channels
        self.net = nn.Sequential(nn.Conv2d(in_shape[0], c1, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(c1, c2, 5),
                                 nn.Dropout2d(dropout), nn.MaxPool2d(2), nn.Sigmoid(), nn.Flatten())
        self.out_dim = c2 * 4 * 4
        self.feature_bound: float | None = math.sqrt(self.out_dim)  # Sigmoid outputs lie in [0, 1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(n, C, 28, 28)`` -> ``(n, 320)`` in [0, 1]."""
        return self.net((x - 0.5) / 0.5)


# ---------------------------------------------------------------------- ResNet-50 features
class MLPFeatureExtractor(nn.Module):
    """g on pre-extracted 2048-d features: Linear(D->hidden) -> ReLU -> Linear(hidden->out_dim)
    [-> ReLU if ``out_relu``].  VisDA: hidden 100, out 100, ReLU; Office-31: hidden 100, out 50,
    no output ReLU (as the released code; the paper says ReLU)."""

    def __init__(self, in_shape: tuple[int, ...], hidden: int = 100, out_dim: int = 100, out_relu: bool = True) -> None:
        super().__init__()
        d = int(math.prod(in_shape))
        layers: list[nn.Module] = [nn.Flatten(), nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, out_dim)]
        if out_relu:
            layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)
        self.out_dim = int(out_dim)
        self.feature_bound: float | None = None  # unbounded: DP-SWD needs a public model.alignment.feature_radius

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MLPClassifier(nn.Module):
    """h on features: Linear(in->hidden) -> ReLU -> Dropout -> Linear(hidden->num_classes); the digits head
    is Linear(320->100) -> ReLU -> Dropout(0.5) -> Linear(100->10), Office-31 / VisDA the same on their features."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int = 100, dropout: float = 0.5) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, num_classes))

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.net(f)


DigitsClassifier = MLPClassifier  # the digits head is the same network; stored configs and runs name it so


class DomainDiscriminator(nn.Module):
    """DANN domain classifier: Linear(in->hidden) -> ReLU -> Linear(hidden->2) (DP-SWD paper, domain-adaptation networks).

    Domain labels: source 1, target 0 (DP-SWD paper, domain-adaptation baselines).
    """

    def __init__(self, in_dim: int, hidden: int = 100) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, 2))

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.net(f)
