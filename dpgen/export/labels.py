"""The label plan of an export: balanced, proportional to RELEASED or public class counts, or chosen classes."""

from __future__ import annotations

import torch

from ..errors import ConfigError


def parse_labels(spec: str | None):
    """``--labels`` text -> ``None`` (balanced), ``"proportional"`` or a list of classes (``"0,3,7"``)."""
    if spec is None or spec == "balanced":
        return None
    if spec == "proportional":
        return spec
    try:
        return [int(c) for c in spec.split(",") if c.strip()]
    except ValueError:
        raise ConfigError(f"--labels {spec!r}: use balanced, proportional or a list of classes such as 0,3,7") from None


def class_weights(release) -> tuple[torch.Tensor, str]:
    """Class proportions from what may be used: the released noisy counts, else the public split's counts.

    Never the exact private class counts (they are not in a release)."""
    counts = release.state.get("counts")  # DP class-Gaussian: the released, noised class counts
    if counts is not None:
        return torch.as_tensor(counts, dtype=torch.float64).clamp_min(0), "released noisy class counts"
    public = release.data.get("public_class_counts")
    if public is not None:
        return torch.tensor(public, dtype=torch.float64), "public split's class counts"
    raise ConfigError(f"--labels proportional needs released or public class counts, and this {release.method_name} "
                      "release has neither (no public split): use --labels balanced or a list of classes")


def allocate(n: int, weights: torch.Tensor) -> torch.Tensor:
    """Integer counts summing to ``n`` proportional to ``weights`` (largest remainder)."""
    if float(weights.sum()) <= 0:
        raise ConfigError("--labels proportional: every class count is 0; use --labels balanced")
    exact = n * weights / weights.sum()
    counts = exact.floor().long()
    rest = n - int(counts.sum())
    counts[torch.argsort(exact - counts, descending=True)[:rest]] += 1
    return counts


def plan_labels(n: int, labels, release, seed: int) -> torch.Tensor:
    """``(n,)`` labels in a seeded random order."""
    k = release.num_classes
    if isinstance(labels, torch.Tensor):
        y = labels.long().flatten()
        if y.numel() != n:
            raise ConfigError(f"labels: {y.numel()} labels for n={n} samples")
    elif labels is None or labels == "balanced":
        y = torch.arange(n) % k
    elif labels == "proportional":
        weights, _ = class_weights(release)
        y = torch.repeat_interleave(torch.arange(k), allocate(n, weights))
    else:
        chosen = [int(c) for c in labels]
        bad = [c for c in chosen if not 0 <= c < k]
        if not chosen or bad:
            raise ConfigError(f"--labels: classes {bad or chosen} are not in 0..{k - 1} of this release")
        y = torch.tensor(chosen)[torch.arange(n) % len(chosen)]
    if int(y.min()) < 0 or int(y.max()) >= k:
        raise ConfigError(f"labels must be in 0..{k - 1}")
    return y[torch.randperm(n, generator=torch.Generator().manual_seed(seed))]


def describe(labels) -> str:
    """The label plan in words (for the export card)."""
    if labels is None or labels == "balanced":
        return "balanced"
    if isinstance(labels, str):
        return labels
    if isinstance(labels, torch.Tensor):
        return "given by the caller"
    return "balanced over classes " + ",".join(str(int(c)) for c in labels)
