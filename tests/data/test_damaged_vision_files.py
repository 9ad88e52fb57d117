"""A truncated or garbled CIFAR-10 / SVHN / CelebA file is one user error naming the file (fake layouts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpgen.data import vision
from dpgen.errors import DataFileError
from tests.helpers import fakedata


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def _garble(path: Path) -> None:
    path.write_bytes(b"\x00garbled\xff" * 40)


@pytest.mark.parametrize("damage", [_truncate, _garble])
@pytest.mark.parametrize("layout, loader, victim", [
    ("cifar10", vision.cifar10, "cifar-10-batches-py/data_batch_3"),
    ("svhn", vision.svhn, "svhn/test_32x32.mat"),
    ("celeba", vision.celeba, "celeba/img_align_celeba/000002.jpg"),
])
def test_a_damaged_file_is_named(tmp_path, layout, loader, victim, damage):
    fakedata.make(tmp_path, (layout,))
    loader(str(tmp_path))  # the intact fixture loads
    damage(tmp_path / victim)
    with pytest.raises(DataFileError, match=str(Path(victim).name)) as err:
        loader(str(tmp_path))
    assert "damaged" in str(err.value) and "fix:" in str(err.value)


def test_an_unknown_celeba_attribute_is_a_setting_error(tmp_path):
    from dpgen.errors import ConfigError

    fakedata.make(tmp_path, ("celeba",))
    with pytest.raises(ConfigError, match="dataset.label='Mal'"):
        vision.celeba(str(tmp_path), label="Mal")
