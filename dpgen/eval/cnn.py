"""Small torch CNN: DP-Sinkhorn's downstream classifier and dpgen's domain FID feature extractor.

Architecture (DP-Sinkhorn paper, Table 1 protocol, ``finalize_result.py``):
  Conv(C->32, 3) -> MaxPool 2 -> ReLU -> Dropout2d 0.5 -> Conv(32->64, 3) -> MaxPool 2 -> ReLU ->
  Dropout2d 0.5 -> Conv(64->128, 3) -> ReLU -> flatten -> Linear(->F) -> ReLU -> Dropout 0.5 ->
  Linear(F->#classes),  F = 128.
At 28 px the flattened size is 1152 (128*3*3), at 32 px 2048.  Images smaller than 20 px (the
8x8 digits) use padding 1 in the convolutions so that the three convolutions still fit.

Training (dpgen, CPU-friendly; the paper uses SGD lr 1e-3 for up to 500 epochs, patience 60):
Adam, the first 90 % of the (synthetic) training set for fitting and the last 10 % for early
stopping on validation accuracy; the best validation state is restored (as in the paper).
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn


class SmallCNN(nn.Module):
    """``x: (n, C, H, W)`` in [0, 1] -> logits ``(n, num_classes)``; ``features(x)``: ``(n, num_features)``
    (the penultimate layer, after ReLU)."""

    def __init__(self, in_channels: int, image_size: int, num_classes: int, num_features: int = 128,
                 dropout: float = 0.5) -> None:
        super().__init__()
        pad = 1 if image_size < 20 else 0
        self.trunk = nn.Sequential(
            nn.Conv2d(in_channels, 32, 3, padding=pad), nn.MaxPool2d(2), nn.ReLU(), nn.Dropout2d(dropout),
            nn.Conv2d(32, 64, 3, padding=pad), nn.MaxPool2d(2), nn.ReLU(), nn.Dropout2d(dropout),
            nn.Conv2d(64, 128, 3, padding=pad), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            flat = self.trunk(torch.zeros(1, in_channels, image_size, image_size)).shape[1]
        self.penultimate = nn.Sequential(nn.Linear(flat, num_features), nn.ReLU())
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(num_features, num_classes))
        self.num_features = int(num_features)
        # channels-last convolution weights: oneDNN then runs every convolution and max-pool in NHWC, about
        # 20 % less CPU per step on these small images than NCHW (the same network, float rounding aside)
        self.trunk.to(memory_format=torch.channels_last)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.penultimate(self.trunk(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class Adam:
    """Adam (Kingma & Ba) with L2 weight decay: ``torch.optim.Adam``'s default CPU update, the same tensor
    operations in the same order (bit for bit; tests/test_eval_fid.py checks it).  The evaluator's classifiers
    use it instead of ``torch.optim``, whose first optimizer imports ``torch._dynamo`` (about 2 s of CPU at
    start-up, more than a default run spends on anything but the CNN itself)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, (self.beta1, self.beta2), self.eps, self.weight_decay = float(lr), betas, float(eps), float(weight_decay)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps = [0] * len(self.params)  # per parameter, as torch counts them (a step without a gradient skips it)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for i, (p, m, v) in enumerate(zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True)):
            if p.grad is None:
                continue
            self.steps[i] += 1
            step_size = self.lr / (1 - self.beta1 ** self.steps[i])
            bias_correction2_sqrt = (1 - self.beta2 ** self.steps[i]) ** 0.5
            grad = p.grad if self.weight_decay == 0 else p.grad.add(p, alpha=self.weight_decay)
            m.lerp_(grad, 1 - self.beta1)
            v.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
            p.addcdiv_(m, (v.sqrt() / bias_correction2_sqrt).add_(self.eps), value=-step_size)


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1000,
             device: torch.device | str = "cpu") -> float:
    """Top-1 accuracy of ``model`` (eval mode) on ``(x, y)``."""
    model.eval()
    correct = 0
    for i in range(0, x.shape[0], batch_size):
        pred = model(x[i:i + batch_size].to(device)).argmax(1).cpu()
        correct += int((pred == y[i:i + batch_size]).sum())
    return correct / max(int(x.shape[0]), 1)


def fit_cnn(x: torch.Tensor, y: torch.Tensor, num_classes: int, epochs: int = 10, batch_size: int = 128,
            lr: float = 1e-3, weight_decay: float = 0.0, patience: int = 3, val_fraction: float = 0.1,
            num_features: int = 128, seed: int = 0, device: torch.device | str = "cpu",
            progress=None, min_steps: int = 0) -> SmallCNN:
    """Train a :class:`SmallCNN` on ``x: (n, C, H, W)`` in [0, 1], ``y: (n,)`` with Adam; early stopping on
    the last ``val_fraction`` of the rows; returns the best-validation model in eval mode.

    ``progress``: an optional callable ``progress(epoch, val_acc)`` (e.g. to update a rich bar).
    ``min_steps``: the number of epochs is raised so that at least this many Adam steps are taken
    (small training sets, e.g. the 8x8 digits).
    """
    torch.manual_seed(seed)
    _, c, h, _ = x.shape
    model = SmallCNN(c, h, num_classes, num_features).to(device)
    opt = Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    return fit_early_stopping(model, opt, x, y, epochs=epochs, batch_size=batch_size, patience=patience,
                              val_fraction=val_fraction, seed=seed, device=device, progress=progress,
                              min_steps=min_steps)


def fit_early_stopping(model: nn.Module, opt: Adam | torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                       epochs: int, batch_size: int, patience: int, val_fraction: float = 0.1, seed: int = 0,
                       device: torch.device | str = "cpu", progress=None, min_steps: int = 0) -> nn.Module:
    """Minibatch cross-entropy training of ``model`` with early stopping on validation accuracy.

    ``x: (n, ...)``, ``y: (n,)``.  The first ``1 - val_fraction`` of the rows train, the last ``val_fraction``
    validate (as DP-Sinkhorn's ``torch_evaluate``: no shuffling before the split, so ``x`` must already be in
    random order); after each epoch the validation accuracy is measured, the best state is kept (the first
    epoch always counts), and training stops after ``patience`` epochs without improvement or after
    ``max(epochs, ceil(min_steps / steps_per_epoch))`` epochs.  Returns the best-validation model in eval mode.
    """
    if epochs < 1:
        raise ValueError(f"classifier epochs must be >= 1, got {epochs} (evaluator.cnn.epochs / "
                         "evaluator.fid.domain.epochs / evaluator.torch_clf.max_epochs)")
    gen = torch.Generator().manual_seed(seed)
    n = int(x.shape[0])
    n_val = int(round(val_fraction * n)) if n >= 20 else 0
    x_tr, y_tr = x[:n - n_val], y[:n - n_val]
    x_va, y_va = x[n - n_val:], y[n - n_val:]
    steps_per_epoch = max(1, math.ceil(x_tr.shape[0] / batch_size))
    epochs = max(int(epochs), math.ceil(min_steps / steps_per_epoch))
    best, best_state, bad = -1.0, None, 0
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(x_tr.shape[0], generator=gen)
        for i in range(0, x_tr.shape[0], batch_size):
            idx = perm[i:i + batch_size]
            loss = F.cross_entropy(model(x_tr[idx].to(device)), y_tr[idx].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        if n_val == 0:
            best_state = copy.deepcopy(model.state_dict())
            continue
        acc = accuracy(model, x_va, y_va, device=device)
        if progress is not None:
            progress(epoch + 1, acc)
        if acc > best:
            best, best_state, bad = acc, copy.deepcopy(model.state_dict()), 0
        else:
            bad += 1
            if bad >= patience:
                break
    model.load_state_dict(best_state)
    return model.eval()
