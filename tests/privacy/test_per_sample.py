"""Per-sample gradients by layer rules (privacy.per_sample): equal to vmap(grad) on every preset model, padding rows
give nothing, a layer without a rule takes vmap, and no grouped convolution is left in a DP-SGD step; the ghost path's
norms and clipped sum equal vmap's."""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dpgen.paths import ROOT
from dpgen.privacy import per_sample
from dpgen.privacy.dpsgd import clip_scale
from dpgen.privacy.per_sample import (
    Layout,
    PerSampleGradients,
    check_rule,
    flat_per_sample_grads,
    ghost_grads,
    resolve_rule,
    uncovered_layers,
    vmap_per_sample_grads,
)


def _ce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y, reduction="none")


def _target_domain(out: torch.Tensor) -> torch.Tensor:  # DP-DANN's per-sample loss (label 0: target)
    return F.cross_entropy(out, torch.zeros(out.shape[0], dtype=torch.long), reduction="none")


def _max_rule_error(model: nn.Module, loss, inputs, targets=(), valid=None) -> float:
    """max |unfold - vmap| over every entry of every sample's gradient, relative to the largest entry."""
    rule = flat_per_sample_grads(model, loss, inputs, targets, valid).flat
    ref = Layout.of(model).flatten(vmap_per_sample_grads(model, loss, inputs, targets, valid))
    return float((rule - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


def _ghost_errors(model: nn.Module, loss, inputs, targets=(), valid=None) -> tuple[float, float]:
    """(max relative |ghost - vmap| of the per-sample norms, of the clipped sum), C = the median vmap norm (so some
    samples are clipped and some are not); the clip factors by the mechanism's own rule (``clip_scale``)."""
    ref = Layout.of(model).flatten(vmap_per_sample_grads(model, loss, inputs, targets, valid))
    ref_norms = torch.linalg.vector_norm(ref, dim=1)
    c = float(ref_norms[ref_norms > 0].median())
    ref_sum = clip_scale(ref_norms, c).to(ref.dtype) @ ref
    ghost = ghost_grads(model, loss, inputs, targets, valid)
    norms = ghost.norms()
    total = ghost.weighted_sum(clip_scale(norms, c).to(norms.dtype))
    return (float((norms - ref_norms).abs().max() / ref_norms.abs().max()),
            float((total - ref_sum).abs().max() / ref_sum.abs().max()))


# -- every preset's network ---------------------------------------------------------------------------------------
# the input shape of each dataset a DP-SGD / DP-DANN preset trains on (a preset on another dataset fails here)
SHAPES = {"mnist": (1, 28, 28), "fashion_mnist": (1, 28, 28), "cifar10": (3, 32, 32), "svhn": (3, 32, 32),
          "digits": (1, 8, 8), "domain_pair": (1, 28, 28), "feature_pair": (2048,)}
PRESETS = sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml")
                 if p.stem.endswith(("_dpsgd", "_dp_dann")))


def _preset_model(preset: str, tmp: Path) -> tuple[nn.Module, tuple[int, ...], bool]:
    """(the preset's network through which per-sample gradients are taken, its input shape, is DP-DANN)."""
    from hydra.utils import instantiate

    from dpgen.bench.step_overhead import compose
    from dpgen.methods.domain_adaptation import _DomainPath

    cfg = compose([f"experiment={preset}"], tmp)
    shape = SHAPES[cfg.dataset._target_.rsplit(".", 1)[-1]]
    if "network" in cfg.model:  # the DP-SGD classifier
        return instantiate(cfg.model.network)(in_channels=shape[0], image_size=shape[-1], num_classes=10), shape, False
    g = instantiate(cfg.model.feature_extractor)(in_shape=shape)
    disc = instantiate(cfg.model.alignment.discriminator)(in_dim=g.out_dim)
    return _DomainPath(g, disc), shape, True


def test_the_presets_are_the_dpsgd_and_dp_dann_ones():
    assert len(PRESETS) >= 10 and any(p.endswith("_dp_dann") for p in PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_rule_equals_vmap_grad_in_float64_on_every_preset_model(preset, tmp_path):
    torch.manual_seed(0)
    model, shape, dann = _preset_model(preset, tmp_path / "run")
    model = model.double().eval()  # eval: no dropout, so both paths see the same function
    assert uncovered_layers(model) == [], f"{preset}: layers without a rule"
    x = torch.randn(5, *shape, dtype=torch.float64)
    if dann:
        err = _max_rule_error(model, _target_domain, (x,))
    else:
        err = _max_rule_error(model, _ce, (x,), (torch.randint(10, (5,)),))
    assert err < 1e-6, f"{preset}: unfold vs vmap(grad) differ by {err:.3g} (relative)"


@pytest.mark.parametrize("preset", PRESETS)
def test_the_ghost_norms_and_clipped_sum_equal_vmaps_in_float64_on_every_preset_model(preset, tmp_path):
    """``model.per_sample=ghost``: the per-sample norms and the clipped sum (no ``(b, D)`` buffer) equal those of
    ``vmap(grad)`` to 1e-6, with and without a padding mask."""
    torch.manual_seed(0)
    model, shape, dann = _preset_model(preset, tmp_path / "run")
    model = model.double().eval()
    x = torch.randn(6, *shape, dtype=torch.float64)
    loss, targets = (_target_domain, ()) if dann else (_ce, (torch.randint(10, (6,)),))
    for valid in (None, torch.tensor([True, False, True, True, False, True])):
        norm_err, sum_err = _ghost_errors(model, loss, (x,), targets, valid)
        assert norm_err < 1e-6 and sum_err < 1e-6, f"{preset} (mask: {valid is not None}): {norm_err:.3g}, {sum_err:.3g}"
        if valid is not None:
            assert (ghost_grads(model, loss, (x,), targets, valid).norms()[~valid] == 0).all()


# -- layers beyond the presets' (every rule) -------------------------------------------------------------------------
class _Tokens(nn.Module):
    """Embedding (with a padding row) -> LayerNorm -> Conv1d (strided, dilated) -> Linear on a sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 6, padding_idx=0)
        self.norm = nn.LayerNorm(6)
        self.conv = nn.Conv1d(6, 4, 3, stride=2, dilation=2, padding=1)
        self.seq = nn.Linear(4, 5)   # on (n, L, 4): summed over positions
        self.out = nn.Linear(5, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.emb(ids)).transpose(1, 2)
        h = torch.tanh(self.conv(h)).transpose(1, 2)
        return self.out(torch.tanh(self.seq(h)).mean(1))


class _Grouped(nn.Module):
    """A grouped, strided Conv2d without bias and a GroupNorm with an affine map."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), groups=2, bias=False)
        self.norm = nn.GroupNorm(3, 6)
        self.head = nn.Linear(6 * 4 * 5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.conv(x))).flatten(1))


def test_every_layer_rule_equals_vmap_grad_beyond_the_presets():
    torch.manual_seed(1)
    tokens = _Tokens().double()
    ids = torch.randint(11, (4, 9))
    ids[0, :3] = 0  # the padding row of the embedding
    assert _max_rule_error(tokens, _ce, (ids,), (torch.randint(3, (4,)),)) < 1e-6
    grouped = _Grouped().double()
    assert _max_rule_error(grouped, _ce, (torch.randn(4, 4, 8, 6, dtype=torch.float64),),
                           (torch.randint(3, (4,)),)) < 1e-6


@pytest.mark.parametrize("ghost", [None, True, False])
def test_every_ghost_rule_equals_vmap_beyond_the_presets(ghost, monkeypatch):
    """Every layer's ghost rule and its materialised branch (``ghost_cheaper`` forced either way, and as it chooses)
    on an embedding with a padding row, LayerNorm, a strided dilated Conv1d, a Linear over positions, a grouped
    Conv2d without bias and GroupNorm; with a padding mask."""
    if ghost is not None:
        monkeypatch.setattr(per_sample, "ghost_cheaper", lambda *_: ghost)
    torch.manual_seed(1)
    ids = torch.randint(11, (5, 9))
    ids[0, :3] = 0  # the padding row of the embedding
    valid = torch.tensor([True, True, False, True, True])
    for model, x, y in ((_Tokens().double(), ids, torch.randint(3, (5,))),
                        (_Grouped().double(), torch.randn(5, 4, 8, 6, dtype=torch.float64), torch.randint(3, (5,)))):
        for mask in (None, valid):
            errors = _ghost_errors(model, _ce, (x,), (y,), mask)
            assert max(errors) < 1e-6, (type(model).__name__, ghost, errors)


def test_a_wrong_ghost_rule_is_caught(monkeypatch):
    """The ghost comparison fails when one rule is wrong: here a Linear's ghost norm without its cross terms
    (``sum_t ||a_t||^2 ||b_t||^2``, right only for one position), and the conv's clipped sum with a flipped kernel."""
    monkeypatch.setattr(per_sample, "ghost_cheaper", lambda *_: True)
    torch.manual_seed(2)
    tokens, ids, y = _Tokens().double(), torch.randint(1, 11, (4, 9)), torch.randint(3, (4,))
    assert max(_ghost_errors(tokens, _ce, (ids,), (y,))) < 1e-6
    linear = per_sample.GHOST_RULES[nn.Linear]

    def diagonal_only(layer, a, b, own):
        n = a.shape[0]
        a2, b2 = a.reshape(n, -1, a.shape[-1]), b.reshape(n, -1, b.shape[-1])
        right = linear(layer, a, b, own)
        cross = ((a2 @ a2.transpose(1, 2)) * (b2 @ b2.transpose(1, 2))).sum((1, 2))
        diag = (a2.square().sum(-1) * b2.square().sum(-1)).sum(1)
        return per_sample._Part(right.sq - cross + diag, right.add_to)

    monkeypatch.setitem(per_sample.GHOST_RULES, nn.Linear, diagonal_only)
    assert _ghost_errors(tokens, _ce, (ids,), (y,))[0] > 1e-3
    monkeypatch.setitem(per_sample.GHOST_RULES, nn.Linear, linear)
    conv = per_sample.GHOST_RULES[nn.Conv2d]

    def flipped(layer, a, b, own):
        right = conv(layer, a, b, own)

        def add_to(c, out):
            right.add_to(c, out)
            out["weight"].copy_(out["weight"].flip(-1))
        return per_sample._Part(right.sq, add_to)

    monkeypatch.setitem(per_sample.GHOST_RULES, nn.Conv2d, flipped)
    grouped = _Grouped().double()
    assert _ghost_errors(grouped, _ce, (torch.randn(3, 4, 8, 6, dtype=torch.float64),), (torch.randint(3, (3,)),))[1] > 1e-3


def test_the_ghost_chunk_forms_the_rows_the_reports_read_and_handles_an_empty_batch():
    torch.manual_seed(4)
    model = _Grouped().double()
    x, y = torch.randn(5, 4, 8, 6, dtype=torch.float64), torch.randint(3, (5,))
    eng = PerSampleGradients(model, _ce, "ghost")
    chunk = eng((x,), (y,))
    torch.testing.assert_close(chunk.rows(2), flat_per_sample_grads(model, _ce, (x,), (y,)).flat[:2])
    empty = eng((x[:0],), (y[:0],))
    assert empty.norms().shape == (0,) and torch.count_nonzero(empty.weighted_sum(empty.norms())) == 0
    assert empty.weighted_sum(empty.norms()).shape == (Layout.of(model).dim,)


def test_a_wrong_rule_is_caught(monkeypatch):
    """The comparison fails when one rule is wrong (here the conv rule with its weight gradient transposed)."""
    torch.manual_seed(2)
    model = _Grouped().double()
    x, y = torch.randn(3, 4, 8, 6, dtype=torch.float64), torch.randint(3, (3,))
    conv_rule, ok = per_sample.RULES[nn.Conv2d]

    def wrong(layer, a, b, out):
        conv_rule(layer, a, b, out)
        if "weight" in out:
            out["weight"].copy_(out["weight"].flip(-1))

    monkeypatch.setitem(per_sample.RULES, nn.Conv2d, (wrong, ok))
    assert _max_rule_error(model, _ce, (x,), (y,)) > 1e-3


def test_padding_rows_give_a_zero_gradient_and_the_real_rows_their_own():
    torch.manual_seed(3)
    model = _Grouped().double()
    x, y = torch.randn(6, 4, 8, 6, dtype=torch.float64), torch.randint(3, (6,))
    valid = torch.tensor([True, False, True, True, False, True])
    for rule in ("unfold", "vmap"):
        flat = PerSampleGradients(model, _ce, rule)((x,), (y,), valid).flat
        assert torch.count_nonzero(flat[~valid]) == 0 and (torch.linalg.vector_norm(flat, dim=1)[~valid] == 0).all()
        alone = PerSampleGradients(model, _ce, rule)((x[valid],), (y[valid],)).flat
        torch.testing.assert_close(flat[valid], alone)


def test_chunks_reuse_one_buffer_and_cover_the_batch():
    model = _Grouped()
    x, y = torch.randn(7, 4, 8, 6), torch.randint(3, (7,))
    eng = PerSampleGradients(model, _ce, "unfold")
    whole = eng((x,), (y,)).flat.clone()
    parts = [c.flat.clone() for c in eng.chunks((x,), (y,), size=3)]
    assert [p.shape[0] for p in parts] == [3, 3, 1]
    torch.testing.assert_close(torch.cat(parts), whole)
    assert [c.flat.shape[0] for c in eng.chunks((x[:0],), (y[:0],), size=3)] == [0]


def test_a_layer_without_a_rule_falls_back_to_vmap_and_says_so_once():
    model = nn.Sequential(nn.Linear(3, 4), nn.PReLU(), nn.Linear(4, 2))
    assert uncovered_layers(model) == ["1 (PReLU)"]
    per_sample._WARNED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert resolve_rule("auto", model, torch.device("cpu")) == "vmap"
        assert resolve_rule("unfold", model, torch.device("cpu")) == "vmap"
        assert resolve_rule("ghost", model, torch.device("cpu")) == "vmap"
    assert len(caught) == 1 and "PReLU" in str(caught[0].message)
    assert resolve_rule("auto", nn.Linear(3, 2), torch.device("cpu")) == "ghost"  # measured faster on the CPU
    assert resolve_rule("auto", nn.Linear(3, 2), torch.device("cuda")) == "unfold"
    assert resolve_rule("unfold", nn.Linear(3, 2), torch.device("cpu")) == "unfold"
    assert resolve_rule("ghost", nn.Linear(3, 2), torch.device("cpu")) == "ghost"
    assert resolve_rule("vmap", nn.Linear(3, 2), torch.device("cpu")) == "vmap"


def test_a_bad_per_sample_value_names_the_setting_and_the_choices():
    with pytest.raises(ValueError, match=r"model.per_sample='fast'.*auto, vmap, unfold, ghost"):
        check_rule("fast", "model.per_sample")
    assert check_rule("ghost") == "ghost"
    from dpgen.methods.dpsgd_classifier import DPSGDClassifier
    from dpgen.models import mnist_convnet

    with pytest.raises(ValueError, match="model.per_sample"):
        DPSGDClassifier(network=mnist_convnet, per_sample="ghosts")
    from dpgen.preflight import PER_SAMPLE_PATHS, preflight

    assert PER_SAMPLE_PATHS == per_sample.RULE_CHOICES
    line = preflight(["experiment=digits_dpsgd", "model.per_sample=ghosts"])
    assert line.startswith("model.per_sample='ghosts' is not a per-sample path") and "\n" not in line
    assert "ghost" in line.split(":", 1)[1]
    assert preflight(["experiment=digits_dpsgd", "model.per_sample=ghost"]) is None
    assert preflight(["experiment=digits_shift_dp_dann", "model.alignment.per_sample=fast"]).startswith(
        "model.alignment.per_sample='fast'")


# -- a DP-SGD step at mnist_dpsgd sizes: no grouped convolution -------------------------------------------------------
class _ConvBackwards(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts ``aten.convolution_backward`` calls whose weight gradient is a grouped convolution (groups > 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.grouped = self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten.convolution_backward:
            self.total += 1
            groups, mask = args[9], args[10]
            self.grouped += int(groups > 1 and mask[1])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("rule,grouped", [("auto", False), ("unfold", False), ("ghost", False), ("vmap", True)])
def test_a_dpsgd_step_of_the_mnist_cnn_makes_no_grouped_conv_weight_gradient(rule, grouped, tmp_path):
    """``model.per_sample=auto`` (the layer rules): 0 grouped convolutions in a step of the mnist_dpsgd network;
    the vmap path makes them (so the count can fail)."""
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit
    from dpgen.methods.dpsgd_classifier import DPSGDClassifier
    from dpgen.models import mnist_convnet
    from dpgen.privacy import PrivacyLedger
    from tests.helpers.context import train_context

    x, y = torch.rand(400, 1, 28, 28), torch.randint(10, (400,))
    data = DataSplits("t", PrivateSplit(x, y), TensorSplit(x[:4], y[:4]), None, 10, (1, 28, 28))
    m = DPSGDClassifier(network=partial(mnist_convnet), batch_size=64, epochs=1, noise_multiplier=1.0,
                        per_sample=rule, microbatch=32)
    m.setup(data, PrivacyLedger(None, 1e-5, data_dependent_reports=True), train_context(tmp_path))
    m.step(0)
    with _ConvBackwards() as c:
        m.step(1)
    assert c.total > 0 and (c.grouped > 0) == grouped, (c.grouped, c.total)
