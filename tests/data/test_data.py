"""Data layer: embedded digits, torchvision layouts from a data root, splits, missing-file errors."""

from __future__ import annotations

import pytest
import torch

from dpgen.data import DatasetNotFoundError
from dpgen.data.datasets import digits, fashion_mnist, mnist, toy_gaussians, usps


def test_digits_split_is_deterministic_and_in_unit_range():
    a, b = digits(), digits()
    assert len(a.private) == 1347 and len(a.test) == 450 and a.image_shape == (1, 8, 8)
    assert torch.equal(a.test.x, b.test.x)
    assert a.test.x.min() >= 0 and a.test.x.max() <= 1


def test_public_fraction_moves_records_out_of_the_private_split():
    d = digits(public_fraction=0.2, seed=1)
    assert len(d.public) + len(d.private) == 1347 and len(d.public) == round(0.2 * 1347)
    with pytest.raises(ValueError, match="public_fraction"):
        digits(public_fraction=1.5)


def test_mnist_loader_reads_shared_data(data_root):
    d = mnist(root=str(data_root))
    assert len(d.private) == 60000 and len(d.test) == 10000 and d.image_shape == (1, 28, 28)
    assert torch.bincount(d.test.y).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert 0 <= d.test.x.min() and d.test.x.max() <= 1


def test_fashion_mnist_loader_reads_shared_data(data_root):
    d = fashion_mnist(root=str(data_root))
    assert len(d.private) == 60000 and torch.bincount(d.test.y).tolist() == [1000] * 10


def test_usps_reads_the_h5_form_when_torchvision_files_are_incomplete(data_root):
    d = usps(root=str(data_root))
    assert len(d.private) == 7291 and len(d.test) == 2007 and d.image_shape == (1, 16, 16)
    assert d.test.x.max() <= 1 and d.test.x.min() >= 0
    d28 = usps(root=str(data_root), image_size=28)
    assert d28.image_shape == (1, 28, 28)


@pytest.mark.parametrize("loader,folder", [(mnist, "MNIST"), (fashion_mnist, "FashionMNIST")])
def test_missing_files_raise_with_expected_paths_and_fix(tmp_path, loader, folder):
    with pytest.raises(DatasetNotFoundError) as e:
        loader(root=str(tmp_path))
    msg = str(e.value)
    assert str(tmp_path / folder / "raw" / "train-images-idx3-ubyte") in msg
    assert "dataset.download=true" in msg and "paths.data_root" in msg


def test_missing_usps_lists_both_accepted_forms(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        usps(root=str(tmp_path))
    assert "usps.bz2" in str(e.value) and "usps.h5" in str(e.value)


def test_toy_gaussians_class_means_are_shifted():
    d = toy_gaussians(n_train=4000, dim=5, shift=1.0)
    m0 = d.test.x[d.test.y == 0].mean().item()
    m1 = d.test.x[d.test.y == 1].mean().item()
    assert m1 - m0 == pytest.approx(1.0, abs=0.15)
