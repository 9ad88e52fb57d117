"""Each dataset loader reads the fake layout of tests/helpers/fakedata.py exactly as it reads the real files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dpgen.data.datasets import usps
from dpgen.data.domain import feature_pair
from dpgen.data.vision import celeba, cifar10, svhn
from tests.helpers import fakedata


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return fakedata.make(tmp_path_factory.mktemp("fake"))


def _in_unit_range(x: torch.Tensor) -> bool:
    return float(x.min()) >= 0.0 and float(x.max()) <= 1.0


@pytest.mark.parametrize("size", [64, 32])  # configs/dataset/celeba.yaml and celeba32.yaml
def test_celeba_reads_the_jpgs_partition_and_attribute_files(root, size):
    n_train, n_test = fakedata.SIZES["celeba"]
    ds = celeba(root=str(root), image_size=size, public_fraction=0.5)
    assert ds.image_shape == (3, size, size) and ds.num_classes == 2
    assert len(ds.private) + len(ds.public) == n_train and len(ds.test) == n_test  # valid partition unused
    assert sorted(ds.test.y.unique().tolist()) == [0, 1] and _in_unit_range(ds.test.x)
    smiling = celeba(root=str(root), image_size=size, label="Smiling")
    assert not torch.equal(smiling.test.y, ds.test.y)  # another attribute column


def test_cifar10_reads_the_five_pickled_batches_and_the_test_batch(root):
    n_train, n_test = fakedata.SIZES["cifar10"]
    ds = cifar10(root=str(root))
    assert ds.image_shape == (3, 32, 32) and len(ds.private) == n_train // 5 * 5 and len(ds.test) == n_test
    assert ds.test.y.tolist() == (np.arange(n_test) % 10).tolist() and _in_unit_range(ds.test.x)


def test_svhn_reads_the_mat_files_and_maps_label_ten_to_zero(root):
    n_train, n_test = fakedata.SIZES["svhn"]
    ds = svhn(root=str(root))
    assert ds.image_shape == (3, 32, 32) and len(ds.private) == n_train and len(ds.test) == n_test
    assert ds.test.y.tolist() == (np.arange(n_test) % 10).tolist() and _in_unit_range(ds.test.x)


@pytest.mark.parametrize("benchmark", sorted(fakedata.BENCHMARKS))
def test_feature_pairs_read_every_domain_file(root, benchmark):
    domains, num_classes = fakedata.BENCHMARKS[benchmark]
    for source, target in zip(domains, domains[1:] + domains[:1], strict=True):
        pair = feature_pair(str(root), benchmark, source, target, num_classes=num_classes)
        assert pair.input_shape == (fakedata.FEATURE_DIM,) and pair.num_classes == num_classes
        assert len(pair.private) + len(pair.test) == fakedata.SIZES[benchmark]
        assert int(pair.test.y.max()) < num_classes


def test_usps_reads_torchvisions_libsvm_bz2_files(root):
    n_train, n_test = fakedata.SIZES["usps"]
    ds = usps(root=str(root))
    assert ds.image_shape == (1, 16, 16) and len(ds.private) == n_train and len(ds.test) == n_test
    assert ds.test.y.tolist() == (np.arange(n_test) % 10).tolist() and _in_unit_range(ds.test.x)
    assert float(ds.test.x.std()) > 0.05  # the [-1, 1] values were rescaled, not clipped to a constant
