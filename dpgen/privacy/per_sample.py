"""Per-sample gradients by layer rules: one batched forward and backward, then dense matrix products.

DP-SGD needs ``g_i = grad_theta L(theta; x_i)`` for every sample i of a batch.  :func:`flat_per_sample_grads`
computes them for a model whose trainable parameters all sit in layers with a rule (:data:`RULES`):

1. one forward of the whole batch, keeping each covered layer's input ``a`` and output ``z``;
2. one backward of ``sum_i valid_i L_i`` to the layers' outputs only, ``b = dL/dz`` (the "backprops"; no
   parameter gradient is formed): as samples do not mix inside the model (no BatchNorm), row i of ``b`` is
   sample i's own ``dL_i/dz_i``;
3. per layer, sample i's parameter gradient from ``(a_i, b_i)`` alone (Opacus' ``grad_sample`` formulas):

   * ``Linear``   ``W: b_i^T a_i`` (summed over any inner positions), ``bias: sum b_i``;
   * ``Conv1d/2d`` ``W: b_i unfold(a_i)^T`` per group (the input patches as columns: a batched matrix product,
     never a convolution with groups = batch size), ``bias: sum_positions b_i``;
   * ``GroupNorm`` / ``LayerNorm``  ``W: sum_positions norm(a_i) * b_i``, ``bias: sum_positions b_i``;
   * ``Embedding`` ``W[k] = sum_{positions p: ids_i[p] = k} b_i[p]`` (a scatter-add), row ``padding_idx`` 0.

The gradients are written straight into ONE ``(b, D)`` buffer (D = all trainable entries, in the order of
``model.named_parameters()``), so the clipping reads one flat tensor: one norm per sample, one weighted sum
(``privacy.mechanisms.NoisyGradientSum``).  ``valid`` (bool ``(b,)``, optional) marks the batch's real rows: a
padding row's loss is multiplied by 0, so its gradient and its norm are exactly 0.

``rule="vmap"`` (:func:`vmap_per_sample_grads`) is ``torch.func.vmap(grad(...))`` of a one-sample loss: any
layer, but functorch lowers a convolution's per-sample weight gradient to a grouped convolution with groups =
batch size, a slow kernel on a GPU.  A model with a trainable layer outside :data:`RULES` takes the vmap path and
says so once (:func:`uncovered_layers`).  Which of the two ``auto`` takes: :func:`resolve_rule`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

Grads = dict[str, torch.Tensor]
# ``loss(output, *targets) -> (b,)``: each sample's loss from the model's output on the batch
PerSampleLoss = Callable[..., torch.Tensor]

RULE_CHOICES = ("auto", "vmap", "unfold")


def check_rule(value: str, setting: str = "the per-sample path") -> str:
    """``value`` if it names a per-sample path, else a ValueError naming the setting and the choices."""
    if value not in RULE_CHOICES:
        raise ValueError(f"{setting}={value!r}: choose one of {', '.join(RULE_CHOICES)} (auto: unfold where every "
                         "trainable layer has a rule, else vmap)")
    return value


# -- the rules: (layer, input a, backprop b) -> {parameter name: (n, *shape)} written into ``out`` -----------------
def _linear(layer: nn.Linear, a: torch.Tensor, b: torch.Tensor, out: Grads) -> None:
    n = a.shape[0]
    a2, b2 = a.reshape(n, -1, a.shape[-1]).to(b.dtype), b.reshape(n, -1, b.shape[-1])
    if "weight" in out:
        if a2.shape[1] == 1:  # one position: the outer product b_i a_i^T
            torch.mul(b2.transpose(1, 2), a2, out=out["weight"])
        else:
            torch.bmm(b2.transpose(1, 2), a2, out=out["weight"])
    if "bias" in out:
        torch.sum(b2, dim=1, out=out["bias"])


def _conv_padding(layer: nn.Module, dims: int) -> tuple[int, ...] | None:
    """The numeric zero padding of a convolution (None: a padding this rule does not take)."""
    if layer.padding_mode != "zeros":
        return None
    if isinstance(layer.padding, str):
        return (0,) * dims if layer.padding == "valid" else None
    return tuple(layer.padding)


def _conv(layer: nn.Module, a: torch.Tensor, b: torch.Tensor, out: Grads) -> None:
    n, groups = a.shape[0], layer.groups
    if isinstance(layer, nn.Conv1d):  # as a 2-d convolution of height 1
        a = a.unsqueeze(-2)
        k, pad, st, dil = (1, *layer.kernel_size), (0, *_conv_padding(layer, 1)), (1, *layer.stride), \
            (1, *layer.dilation)
    else:
        k, pad, st, dil = layer.kernel_size, _conv_padding(layer, 2), layer.stride, layer.dilation
    cols = F.unfold(a.to(b.dtype), k, dilation=dil, padding=pad, stride=st)       # (n, C_in k, L)
    bp = b.reshape(n, b.shape[1], -1)                                              # (n, C_out, L)
    if "weight" in out:
        w = out["weight"].view(n, groups, layer.out_channels // groups, -1)       # (n, G, C_out/G, C_in/G k)
        if groups == 1:
            torch.bmm(bp, cols.transpose(1, 2), out=w.view(n, layer.out_channels, -1))
        else:
            torch.matmul(bp.view(n, groups, -1, bp.shape[-1]),
                         cols.view(n, groups, -1, cols.shape[-1]).transpose(2, 3), out=w)
    if "bias" in out:
        torch.sum(bp, dim=2, out=out["bias"])


def _group_norm(layer: nn.GroupNorm, a: torch.Tensor, b: torch.Tensor, out: Grads) -> None:
    n, c = b.shape[:2]
    if "weight" in out:
        normed = F.group_norm(a, layer.num_groups, eps=layer.eps)
        torch.sum((normed * b).reshape(n, c, -1), dim=2, out=out["weight"])
    if "bias" in out:
        torch.sum(b.reshape(n, c, -1), dim=2, out=out["bias"])


def _layer_norm(layer: nn.LayerNorm, a: torch.Tensor, b: torch.Tensor, out: Grads) -> None:
    n, shape = b.shape[0], tuple(layer.normalized_shape)
    inner = (n, -1, *shape)
    if "weight" in out:
        normed = F.layer_norm(a, shape, eps=layer.eps)
        torch.sum((normed * b).reshape(inner), dim=1, out=out["weight"])
    if "bias" in out:
        torch.sum(b.reshape(inner), dim=1, out=out["bias"])


def _embedding(layer: nn.Embedding, ids: torch.Tensor, b: torch.Tensor, out: Grads) -> None:
    n, dim = ids.shape[0], layer.embedding_dim
    w = out["weight"]
    w.zero_()
    index = ids.reshape(n, -1, 1).expand(n, -1, dim)
    w.scatter_add_(1, index, b.reshape(n, -1, dim))
    if layer.padding_idx is not None:  # the embedding's backward leaves this row's gradient at 0
        w[:, layer.padding_idx].zero_()


def _embedding_ok(layer: nn.Embedding) -> bool:
    return layer.max_norm is None and not layer.scale_grad_by_freq and not layer.sparse


# layer type -> (rule, does this instance qualify); exact types (a subclass may change its forward)
RULES: dict[type, tuple[Callable, Callable[[nn.Module], bool]]] = {
    nn.Linear: (_linear, lambda m: True),
    nn.Conv1d: (_conv, lambda m: _conv_padding(m, 1) is not None),
    nn.Conv2d: (_conv, lambda m: _conv_padding(m, 2) is not None),
    nn.GroupNorm: (_group_norm, lambda m: True),
    nn.LayerNorm: (_layer_norm, lambda m: True),
    nn.Embedding: (_embedding, _embedding_ok),
}


def uncovered_layers(model: nn.Module) -> list[str]:
    """``'name (Type)'`` of every layer that holds a trainable parameter and has no rule in :data:`RULES`."""
    bad = []
    for name, m in model.named_modules():
        if not any(p.requires_grad for p in m.parameters(recurse=False)):
            continue
        rule = RULES.get(type(m))
        if rule is None or not rule[1](m):
            bad.append(f"{name or '<root>'} ({type(m).__name__})")
    return bad


@dataclass
class Layout:
    """Where each trainable parameter lives in the flat ``(b, D)`` per-sample buffer."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]

    @classmethod
    def of(cls, model: nn.Module) -> Layout:
        named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
        return cls(tuple(k for k, _ in named), tuple(p.shape for _, p in named))

    @classmethod
    def of_grads(cls, grads: Grads) -> Layout:
        """The layout of a dict of per-sample gradients ``{name: (b, *shape)}`` (its order)."""
        return cls(tuple(grads), tuple(g.shape[1:] for g in grads.values()))

    @property
    def sizes(self) -> list[int]:
        return [math.prod(s) for s in self.shapes]

    @property
    def dim(self) -> int:
        return sum(self.sizes)

    def views(self, flat: torch.Tensor) -> Grads:
        """``(..., D) -> {name: (..., *shape)}``: views of ``flat``, no copy."""
        lead = flat.shape[:-1]
        return {k: v.view(*lead, *s) for k, v, s in
                zip(self.names, flat.split(self.sizes, dim=-1), self.shapes, strict=True)}

    def flatten(self, grads: Grads) -> torch.Tensor:
        """``{name: (b, *shape)} -> (b, D)`` (one copy; the vmap path's gradients into the flat layout)."""
        return torch.cat([grads[k].reshape(grads[k].shape[0], n) for k, n in zip(self.names, self.sizes, strict=True)],
                         dim=1)


@dataclass
class FlatGrads:
    """Per-sample gradients of a chunk as one ``(b, D)`` tensor and its :class:`Layout`."""

    flat: torch.Tensor
    layout: Layout

    def as_dict(self) -> Grads:
        return self.layout.views(self.flat)


def masked(losses: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """The per-sample losses with the padding rows' set to exactly 0 (``valid`` False): their gradients are 0."""
    return losses if valid is None else torch.where(valid, losses, torch.zeros_like(losses))


def _buffer(model: nn.Module, layout: Layout, rows: int, device: torch.device) -> torch.Tensor:
    dtype = next((p.dtype for p in model.parameters() if p.requires_grad), torch.float32)
    return torch.empty((rows, layout.dim), dtype=dtype, device=device)


def flat_per_sample_grads(model: nn.Module, loss: PerSampleLoss, inputs: tuple[torch.Tensor, ...],
                          targets: tuple[torch.Tensor, ...] = (), valid: torch.Tensor | None = None,
                          layout: Layout | None = None, out: torch.Tensor | None = None) -> FlatGrads:
    """Per-sample gradients of ``loss(model(*inputs), *targets)`` (a ``(b,)`` vector of per-sample losses) by the
    layer rules (module docstring); every trainable layer must have one (:func:`uncovered_layers`).  ``out``: a
    ``(>= b, D)`` buffer to write into (its first b rows; on a CPU a fresh buffer of this size costs more in page
    faults than the products themselves)."""
    layout = layout or Layout.of(model)
    x0 = inputs[0]
    n = x0.shape[0]
    flat = _buffer(model, layout, n, x0.device) if out is None else out[:n]
    if n == 0:
        return FlatGrads(flat, layout)
    slots = layout.views(flat)
    seen: list[tuple[str, nn.Module, torch.Tensor, torch.Tensor]] = []

    def keep(name: str):
        def hook(module, args, output):
            seen.append((name, module, args[0].detach(), output))
        return hook

    handles = [m.register_forward_hook(keep(name)) for name, m in model.named_modules()
               if any(p.requires_grad for p in m.parameters(recurse=False))]
    try:
        out = model(*inputs)
    finally:
        for h in handles:
            h.remove()
    total = masked(loss(out, *targets), valid).sum()
    backprops = torch.autograd.grad(total, [z for *_, z in seen], allow_unused=True)
    for (name, module, a, z), b in zip(seen, backprops, strict=True):
        if b is None:
            b = torch.zeros_like(z)
        prefix = f"{name}." if name else ""
        own = {k: slots[prefix + k] for k, p in module.named_parameters(recurse=False) if p.requires_grad}
        RULES[type(module)][0](module, a, b.detach(), own)
    return FlatGrads(flat, layout)


def vmap_per_sample_grads(model: nn.Module, loss: PerSampleLoss, inputs: tuple[torch.Tensor, ...],
                          targets: tuple[torch.Tensor, ...] = (), valid: torch.Tensor | None = None,
                          params: Grads | None = None) -> Grads:
    """``{name: (b, *shape)}``: ``vmap(grad)`` of each sample's loss, the model applied to a batch of one (any
    layer; dropout masks differ per sample).  Padding rows (``valid`` False) get a zero gradient."""
    if params is None:
        params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    k_in = len(inputs)

    def one(p: Grads, *sample: torch.Tensor) -> torch.Tensor:
        rows = tuple(t.unsqueeze(0) for t in sample)
        out = functional_call(model, (p, buffers), rows[:k_in])
        return loss(out, *rows[k_in:])[0]

    batch = (*inputs, *targets)
    grads = vmap(grad(one), in_dims=(None,) + (0,) * len(batch), randomness="different")(params, *batch)
    if valid is not None:
        grads = {k: torch.where(valid.view(-1, *([1] * (g.dim() - 1))), g, torch.zeros_like(g))
                 for k, g in grads.items()}
    return grads


_WARNED: set[str] = set()


def resolve_rule(setting: str, model: nn.Module, device: torch.device) -> str:
    """The per-sample setting (``auto``, ``unfold``, ``vmap``) -> the path a run takes: ``vmap`` or ``unfold``.

    ``auto``: ``unfold`` when every trainable layer has a rule (on a GPU its matrix products replace the grouped
    convolutions of vmap; on the CPU it measured faster too: docs/methods/dp-sgd.md), else ``vmap``.  A model with
    a layer outside the rules takes ``vmap`` (also when ``unfold`` is asked for) and says so once."""
    check_rule(setting)
    if setting == "vmap":
        return "vmap"
    missing = uncovered_layers(model)
    if missing:
        key = f"{type(model).__name__}: {', '.join(missing)}"
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(f"per-sample gradients: no rule for {', '.join(missing)}; this model takes the vmap path "
                          f"(asked for: {setting})", stacklevel=2)
        return "vmap"
    del device  # the same choice on every device (measured: module docstring of resolve_rule)
    return "unfold"


class PerSampleGradients:
    """The per-sample gradients of one model and loss by one rule, chunk by chunk, into one reused buffer.

    ``chunks(inputs, targets, valid, size)`` yields :class:`FlatGrads` of at most ``size`` rows (at least one
    chunk, possibly empty); each chunk is overwritten by the next, so a consumer reads it before asking for the
    next (``privacy.mechanisms.NoisyGradientSum.release`` does)."""

    def __init__(self, model: nn.Module, loss: PerSampleLoss, rule: str) -> None:
        if rule not in ("vmap", "unfold"):
            raise ValueError(f"per-sample rule must be vmap or unfold (resolve_rule), got {rule!r}")
        self.model, self.loss, self.rule = model, loss, rule
        self.layout = Layout.of(model)
        self._buf: torch.Tensor | None = None

    def __call__(self, inputs: tuple[torch.Tensor, ...], targets: tuple[torch.Tensor, ...] = (),
                 valid: torch.Tensor | None = None) -> FlatGrads:
        n, device = inputs[0].shape[0], inputs[0].device
        if self.rule == "vmap":
            if n == 0:
                return FlatGrads(_buffer(self.model, self.layout, 0, device), self.layout)
            grads = vmap_per_sample_grads(self.model, self.loss, inputs, targets, valid)
            return FlatGrads(self.layout.flatten(grads), self.layout)
        if self._buf is None or self._buf.shape[0] < n or self._buf.device != device:
            self._buf = _buffer(self.model, self.layout, n, device)
        return flat_per_sample_grads(self.model, self.loss, inputs, targets, valid, self.layout, out=self._buf)

    def chunks(self, inputs: tuple[torch.Tensor, ...], targets: tuple[torch.Tensor, ...] = (),
               valid: torch.Tensor | None = None, size: int | None = None):
        n = inputs[0].shape[0]
        size = max(1, n if size is None else int(size))
        if n == 0:
            yield self(inputs, targets, valid)
        for i in range(0, n, size):
            part = slice(i, i + size)
            yield self(tuple(t[part] for t in inputs), tuple(t[part] for t in targets),
                       None if valid is None else valid[part])
