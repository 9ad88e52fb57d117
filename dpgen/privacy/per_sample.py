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

``rule="ghost"`` (:class:`GhostGrads`, ghost clipping / book-keeping: Li et al. 2022, Bu et al. 2023) forms no
``(b, D)`` buffer: from the same ``a`` and ``b`` it takes each layer's share of the per-sample squared norms
(``sum((a_i a_i^T) * (b_i b_i^T))`` for a matrix-product layer where that is cheaper, else the layer's per-sample
gradient for its norm), then, given the clip factors ``c``, the clipped sum ``sum_i c_i b_i^T a_i`` of each layer
as one product over the batch (no second backward).

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
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from ..utils.misc import on_gpu

Grads = dict[str, torch.Tensor]
# ``loss(output, *targets) -> (b,)``: each sample's loss from the model's output on the batch
PerSampleLoss = Callable[..., torch.Tensor]

RULE_CHOICES = ("auto", "vmap", "unfold", "ghost")


def check_rule(value: str, setting: str = "the per-sample path") -> str:
    """``value`` if it names a per-sample path, else a ValueError naming the setting and the choices."""
    if value not in RULE_CHOICES:
        raise ValueError(f"{setting}={value!r}: choose one of {', '.join(RULE_CHOICES)} (auto: ghost on the CPU, "
                         "unfold on CUDA, where every trainable layer has a rule, else vmap)")
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


def _patches(layer: nn.Module, a: torch.Tensor) -> torch.Tensor:
    """``(n, C_in k, L)``: the convolution's input patches as columns (``F.unfold``), L output positions."""
    if isinstance(layer, nn.Conv1d):  # as a 2-d convolution of height 1
        a = a.unsqueeze(-2)
        k, pad, st, dil = (1, *layer.kernel_size), (0, *_conv_padding(layer, 1)), (1, *layer.stride), \
            (1, *layer.dilation)
    else:
        k, pad, st, dil = layer.kernel_size, _conv_padding(layer, 2), layer.stride, layer.dilation
    return F.unfold(a, k, dilation=dil, padding=pad, stride=st)


def _conv(layer: nn.Module, a: torch.Tensor, b: torch.Tensor, out: Grads) -> None:
    n, groups = a.shape[0], layer.groups
    cols = _patches(layer, a.to(b.dtype))                                         # (n, C_in k, L)
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

    def norms(self) -> torch.Tensor:
        """``(b,)``: ``||g_i||`` over all D entries jointly."""
        return torch.linalg.vector_norm(self.flat, dim=1)

    def weighted_sum(self, scale: torch.Tensor) -> torch.Tensor:
        """``(D,)``: ``sum_i scale_i g_i`` (one ``(b,) x (b, D)`` product)."""
        return scale @ self.flat

    def rows(self, k: int) -> torch.Tensor:
        """``(k, D)``: the first k samples' gradients."""
        return self.flat[:k]


def masked(losses: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """The per-sample losses with the padding rows' set to exactly 0 (``valid`` False): their gradients are 0."""
    return losses if valid is None else torch.where(valid, losses, torch.zeros_like(losses))


def _buffer(model: nn.Module, layout: Layout, rows: int, device: torch.device) -> torch.Tensor:
    dtype = next((p.dtype for p in model.parameters() if p.requires_grad), torch.float32)
    return torch.empty((rows, layout.dim), dtype=dtype, device=device)


# one covered layer of a chunk: (its name, the layer, its input a, the backprop b = dL/dz of its output)
Tape = tuple[str, nn.Module, torch.Tensor, torch.Tensor]


def layer_backprops(model: nn.Module, loss: PerSampleLoss, inputs: tuple[torch.Tensor, ...],
                    targets: tuple[torch.Tensor, ...] = (), valid: torch.Tensor | None = None) -> list[Tape]:
    """Steps 1-2 of the module docstring: one forward of the batch keeping each trainable layer's input, one
    backward of ``sum_i valid_i L_i`` to the layers' outputs; row i of every ``a`` and ``b`` is sample i's."""
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
    return [(name, module, a, torch.zeros_like(z) if b is None else b.detach())
            for (name, module, a, z), b in zip(seen, backprops, strict=True)]


def _own(name: str, module: nn.Module, slots: Grads) -> Grads:
    """The layer's trainable parameters' entries of ``slots`` (keyed by the parameter's short name)."""
    prefix = f"{name}." if name else ""
    return {k: slots[prefix + k] for k, p in module.named_parameters(recurse=False) if p.requires_grad}


def write_rules(tapes: list[Tape], slots: Grads, rows: int | None = None) -> None:
    """Step 3: every layer's per-sample gradients (of the first ``rows`` samples) by its rule into ``slots``."""
    for name, module, a, b in tapes:
        if rows is not None:
            a, b = a[:rows], b[:rows]
        RULES[type(module)][0](module, a, b, _own(name, module, slots))


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
    write_rules(layer_backprops(model, loss, inputs, targets, valid), layout.views(flat))
    return FlatGrads(flat, layout)


# -- ghost norms and book-keeping (``rule="ghost"``) ------------------------------------------------------------------
def ghost_cheaper(positions: int, d_in: int, d_out: int) -> bool:
    """The book-keeping choice (Bu et al. 2023) for a layer ``z_t = W a_t`` at T inner positions: the ghost norm
    (two T x T Gram matrices a sample) when ``2 T^2 < d_in d_out``, else the per-sample gradient (d_in d_out a
    sample) formed just for its norm."""
    return 2 * positions * positions < d_in * d_out


class _Part(NamedTuple):
    """One layer's share of a ghost chunk."""

    sq: torch.Tensor                               # (n,): the layer's part of ||g_i||^2
    add_to: Callable[[torch.Tensor, Grads], None]  # (c, {short name: slot}): writes sum_i c_i g_i of the layer


def _materialised(layer: nn.Module, a: torch.Tensor, b: torch.Tensor, own: dict[str, nn.Parameter]) -> _Part:
    """Any layer with a rule (:data:`RULES`): its per-sample gradients by the rule, kept for the weighted sum."""
    n = b.shape[0]
    grads = {k: torch.empty((n, *p.shape), dtype=p.dtype, device=b.device) for k, p in own.items()}
    RULES[type(layer)][0](layer, a, b, grads)
    flat = {k: g.view(n, -1) for k, g in grads.items()}

    def add_to(c: torch.Tensor, out: Grads) -> None:
        for k, g in flat.items():
            torch.mv(g.t(), c, out=out[k].view(-1))

    return _Part(torch.stack([g.square().sum(1) for g in flat.values()]).sum(0), add_to)


def _matmul_part(a: torch.Tensor, b: torch.Tensor, weight: bool, bias: bool,
                 weight_sum: Callable[[torch.Tensor], torch.Tensor] | None = None) -> _Part:
    """``z_t = W a_t + bias`` at T positions in G independent groups: ``a (n, G, T, d_in)``, ``b (n, G, T, d_out)``.
    Sample i's gradients are ``W: b_i^T a_i`` (per group) and ``bias: sum_t b_it``, so

    * ``||b_i^T a_i||_F^2 = sum_{t,s} (a_it . a_is)(b_it . b_is) = sum((a_i a_i^T) * (b_i b_i^T))`` (the ghost
      norm, where :func:`ghost_cheaper`; else ``b_i^T a_i`` is formed for its norm and kept for the sum);
    * ``sum_i c_i b_i^T a_i`` is ONE product over samples and positions of the scaled backprops with the inputs
      (book-keeping: the clipped sum from the stored a and b, no second backward); ``weight_sum(c)``, when given,
      computes that same sum by the layer's own batched weight-gradient kernel (a convolution's)."""
    n, groups, t, d_in = a.shape
    parts, w, bsum = [], None, None
    if weight:
        a3, b3 = a.flatten(0, 1), b.flatten(0, 1)                            # (n G, T, d): views, no copy
        if ghost_cheaper(t, d_in, b.shape[-1]):
            gram = torch.bmm(a3, a3.transpose(1, 2)) * torch.bmm(b3, b3.transpose(1, 2))
            parts.append(gram.view(n, -1).sum(1))
        else:
            w = torch.bmm(b3.transpose(1, 2), a3).view(n, groups, b.shape[-1], d_in)   # (n, G, d_out, d_in)
            parts.append(w.view(n, -1).square().sum(1))
    if bias:
        bsum = b.sum(2).reshape(n, -1)                                       # (n, G d_out)
        parts.append(bsum.square().sum(1))

    def add_to(c: torch.Tensor, out: Grads) -> None:
        if weight:
            if w is None and weight_sum is not None:
                total = weight_sum(c)
            elif w is None:
                total = torch.einsum("ngto,ngti->goi", b * c.view(n, 1, 1, 1), a)
            else:
                total = torch.tensordot(c, w, dims=1)
            out["weight"].copy_(total.reshape(out["weight"].shape))
        if bias:
            torch.mv(bsum.t(), c, out=out["bias"].view(-1))

    return _Part(torch.stack(parts).sum(0), add_to)


def _linear_ghost(layer: nn.Linear, a: torch.Tensor, b: torch.Tensor, own: dict[str, nn.Parameter]) -> _Part:
    n = a.shape[0]
    return _matmul_part(a.reshape(n, 1, -1, a.shape[-1]).to(b.dtype), b.reshape(n, 1, -1, b.shape[-1]),
                        "weight" in own, "bias" in own)


def _conv_ghost(layer: nn.Module, a: torch.Tensor, b: torch.Tensor, own: dict[str, nn.Parameter]) -> _Part:
    """A convolution is a Linear on its unfolded input patches: T = the L output positions, per group.  Its clipped
    weight sum ``sum_i c_i b_i unfold(a_i)^T`` is the ordinary batched weight gradient of the convolution for the
    output gradient ``c_i b_i`` (``torch.nn.grad.conv*d_weight``: groups as the layer's, never the batch)."""
    n, groups = a.shape[0], layer.groups
    a = a.to(b.dtype)
    cols = _patches(layer, a)                                                     # (n, C_in k, L)
    length = cols.shape[-1]
    dims = 1 if isinstance(layer, nn.Conv1d) else 2
    kernel = torch.nn.grad.conv1d_weight if dims == 1 else torch.nn.grad.conv2d_weight

    def weight_sum(c: torch.Tensor) -> torch.Tensor:
        return kernel(a, layer.weight.shape, b * c.view(-1, *([1] * (b.dim() - 1))), stride=layer.stride,
                      padding=_conv_padding(layer, dims), dilation=layer.dilation, groups=groups)

    return _matmul_part(cols.view(n, groups, -1, length).transpose(2, 3),
                        b.reshape(n, groups, -1, length).transpose(2, 3), "weight" in own, "bias" in own, weight_sum)


def _embedding_ghost(layer: nn.Embedding, ids: torch.Tensor, b: torch.Tensor,
                     own: dict[str, nn.Parameter]) -> _Part:
    """A Linear on one-hot inputs (d_in = the vocabulary): ``a_it . a_is = [ids_it = ids_is]``; positions holding
    ``padding_idx`` give no gradient.  The sum is a scatter-add of the scaled backprops into the rows."""
    n, dim = ids.shape[0], layer.embedding_dim
    ids2 = ids.reshape(n, -1)
    if not ghost_cheaper(ids2.shape[1], layer.num_embeddings, dim):
        return _materialised(layer, ids, b, own)
    b2 = b.reshape(n, -1, dim)
    if layer.padding_idx is not None:
        b2 = b2 * (ids2 != layer.padding_idx).unsqueeze(-1).to(b2.dtype)
    same = (ids2.unsqueeze(2) == ids2.unsqueeze(1)).to(b2.dtype)
    sq = (same * (b2 @ b2.transpose(1, 2))).sum((1, 2))

    def add_to(c: torch.Tensor, out: Grads) -> None:
        w = out["weight"]
        w.zero_()
        w.index_add_(0, ids2.reshape(-1), (b2 * c.view(n, 1, 1)).reshape(-1, dim))

    return _Part(sq, add_to)


# layer type -> its ghost rule; every other layer of RULES (GroupNorm, LayerNorm: C entries a sample) is materialised
GHOST_RULES: dict[type, Callable[..., _Part]] = {
    nn.Linear: _linear_ghost, nn.Conv1d: _conv_ghost, nn.Conv2d: _conv_ghost, nn.Embedding: _embedding_ghost,
}


class GhostGrads:
    """A chunk's per-sample gradient norms and its clipped sum, its ``(b, D)`` per-sample gradients never formed
    (``rule="ghost"``).

    From the same forward and backward as the layer rules (the inputs ``a`` and backprops ``b`` of every layer), each
    layer gives its share of ``||g_i||^2`` (:data:`GHOST_RULES`: the ghost norm where :func:`ghost_cheaper`, else
    the layer's per-sample gradient formed for its norm; a layer without a ghost rule is materialised by its
    :data:`RULES` entry, exact either way); the shares add up to ONE ``(b,)`` norm vector (:meth:`norms`).  Given the
    clip factors c (``privacy.mechanisms.NoisyGradientSum``), :meth:`weighted_sum` writes ``sum_i c_i g_i`` of every
    layer into ONE flat ``(D,)`` vector: for a matrix-product layer ``sum_i c_i b_i^T a_i``, one product over the
    batch and the positions.  It is the sum of the same clipped per-sample gradients as the other rules (exact
    maths: each sample's contribution ``c_i g_i`` has norm <= C), so the sensitivity and the noise are unchanged.
    :meth:`rows` forms the first k samples' gradients by the layer rules (the data-dependent reports' few rows)."""

    def __init__(self, tapes: list[Tape], layout: Layout, n: int, like: torch.Tensor) -> None:
        self.tapes, self.layout, self.n, self._like = tapes, layout, n, like
        self.parts = []
        for _, module, a, b in tapes:
            own = {k: p for k, p in module.named_parameters(recurse=False) if p.requires_grad}
            rule = GHOST_RULES.get(type(module), _materialised)
            self.parts.append(rule(module, a, b, own))

    def norms(self) -> torch.Tensor:
        """``(b,)``: ``||g_i||`` over every trainable entry jointly (the layers' shares added)."""
        if not self.parts:
            return self._like.new_zeros(self.n)
        return torch.stack([p.sq for p in self.parts]).sum(0).sqrt()

    def weighted_sum(self, scale: torch.Tensor) -> torch.Tensor:
        """``(D,)``: ``sum_i scale_i g_i``, layer by layer into one flat vector."""
        total = self._like.new_zeros(self.layout.dim)
        slots = self.layout.views(total)
        for (name, module, _, _), part in zip(self.tapes, self.parts, strict=True):
            part.add_to(scale, _own(name, module, slots))
        return total

    def rows(self, k: int) -> torch.Tensor:
        """``(k, D)``: the first k samples' gradients, formed by the layer rules."""
        k = min(k, self.n)
        out = self._like.new_zeros((k, self.layout.dim))
        if k:
            write_rules(self.tapes, self.layout.views(out), rows=k)
        return out

    def as_dict(self) -> Grads:
        return self.layout.views(self.rows(self.n))


def ghost_grads(model: nn.Module, loss: PerSampleLoss, inputs: tuple[torch.Tensor, ...],
                targets: tuple[torch.Tensor, ...] = (), valid: torch.Tensor | None = None,
                layout: Layout | None = None) -> GhostGrads:
    """:class:`GhostGrads` of ``loss(model(*inputs), *targets)`` (every trainable layer must have a rule)."""
    layout = layout or Layout.of(model)
    n = inputs[0].shape[0]
    dtype = next((p.dtype for p in model.parameters() if p.requires_grad), torch.float32)
    like = torch.empty(0, dtype=dtype, device=inputs[0].device)
    tapes = layer_backprops(model, loss, inputs, targets, valid) if n else []
    return GhostGrads(tapes, layout, n, like)


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
    """The per-sample setting (``auto``, ``unfold``, ``ghost``, ``vmap``) -> the path a run takes: ``vmap``,
    ``unfold`` or ``ghost``.

    ``auto``, when every trainable layer has a rule: ``ghost`` on the CPU (measured faster than ``unfold`` there,
    with less memory: docs/methods/dp-sgd.md), ``unfold`` on CUDA (its matrix products replace the grouped
    convolutions of vmap; ghost is not measured on a GPU yet); else ``vmap``.  ``ghost`` needs the same rules
    (:class:`GhostGrads`).  A model with a layer outside the rules takes ``vmap`` (also when ``unfold`` or
    ``ghost`` is asked for) and says so once."""
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
    if setting == "auto":
        return "unfold" if on_gpu(device) else "ghost"
    return setting


class PerSampleGradients:
    """The per-sample gradients of one model and loss by one rule, chunk by chunk, into one reused buffer.

    ``chunks(inputs, targets, valid, size)`` yields :class:`FlatGrads` (``ghost``: :class:`GhostGrads`) of at most
    ``size`` rows (at least one chunk, possibly empty); each chunk is overwritten by the next, so a consumer reads
    it before asking for the next (``privacy.mechanisms.NoisyGradientSum.release`` does)."""

    def __init__(self, model: nn.Module, loss: PerSampleLoss, rule: str) -> None:
        if rule not in ("vmap", "unfold", "ghost"):
            raise ValueError(f"per-sample rule must be vmap, unfold or ghost (resolve_rule), got {rule!r}")
        self.model, self.loss, self.rule = model, loss, rule
        self.layout = Layout.of(model)
        self._buf: torch.Tensor | None = None

    def __call__(self, inputs: tuple[torch.Tensor, ...], targets: tuple[torch.Tensor, ...] = (),
                 valid: torch.Tensor | None = None) -> FlatGrads | GhostGrads:
        n, device = inputs[0].shape[0], inputs[0].device
        if self.rule == "ghost":
            return ghost_grads(self.model, self.loss, inputs, targets, valid, self.layout)
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
