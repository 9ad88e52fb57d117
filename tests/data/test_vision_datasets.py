"""Readers for CelebA / CIFAR-10 / SVHN on small fixtures written in the real on-disk formats."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio
import torch
import torchvision
from PIL import Image
from torchvision import transforms

from dpgen.data.base import DatasetNotFoundError
from dpgen.data.vision import celeba, cifar10, svhn
from tests.helpers.fakedata import CELEBA_ATTRS

# ----------------------------------------------------------------------------------- fixtures
MALE, SMILING = CELEBA_ATTRS.index("Male"), CELEBA_ATTRS.index("Smiling")
# file -> (partition, Male, Smiling): 3 train, 1 valid, 2 test
CELEBA_ROWS = {
    "000001.jpg": (0, -1, 1),
    "000002.jpg": (0, 1, -1),
    "000003.jpg": (0, -1, -1),
    "000004.jpg": (1, 1, 1),
    "000005.jpg": (2, 1, -1),
    "000006.jpg": (2, -1, 1),
}
N_TRAIN, N_TEST = 3, 2
RED_BAND = 10  # rows at the top of every CelebA fixture image painted pure red


def _celeba_image(i: int) -> Image.Image:
    rng = np.random.default_rng(i)
    a = rng.integers(0, 40, size=(218, 178, 3), dtype=np.uint8)  # H=218, W=178 like img_align_celeba
    a[40:180, 30:150, 1] = 200  # a green "face" in the middle
    a[:RED_BAND] = (255, 0, 0)  # lies in the region the center crop removes
    return Image.fromarray(a)


@pytest.fixture
def celeba_root(tmp_path: Path) -> Path:
    base = tmp_path / "celeba"
    (base / "img_align_celeba").mkdir(parents=True)
    for i, f in enumerate(CELEBA_ROWS):
        _celeba_image(i).save(base / "img_align_celeba" / f, quality=95)
    with open(base / "list_eval_partition.txt", "w") as fh:
        for f, (p, _, _) in CELEBA_ROWS.items():
            fh.write(f"{f} {p}\n")
    with open(base / "list_attr_celeba.txt", "w") as fh:
        fh.write(f"{len(CELEBA_ROWS)}\n")
        fh.write(" ".join(CELEBA_ATTRS) + " \n")  # the real header has a trailing space
        for f, (_, male, smiling) in CELEBA_ROWS.items():
            vals = [-1] * len(CELEBA_ATTRS)
            vals[MALE], vals[SMILING] = male, smiling
            fh.write(f + " " + " ".join(f"{v:2d}" for v in vals) + "\n")  # "-1  1  1 ..." spacing
    return tmp_path


CIFAR_PER_BATCH, CIFAR_TEST = 2, 3


def _cifar_batch(path: Path, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
    data[0, 0] = 255  # R at (0, 0)
    data[0, 1024 + 32 * 1 + 2] = 0  # G at (1, 2)
    labels = [int(v) for v in rng.integers(0, 10, size=n)]
    d = {b"batch_label": b"fixture", b"labels": labels, b"data": data,
         b"filenames": [f"img_{k}.png".encode() for k in range(n)]}
    with open(path, "wb") as fh:
        pickle.dump(d, fh, protocol=2)


@pytest.fixture
def cifar_root(tmp_path: Path) -> Path:
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    for i in range(1, 6):
        _cifar_batch(base / f"data_batch_{i}", CIFAR_PER_BATCH, seed=i)
    _cifar_batch(base / "test_batch", CIFAR_TEST, seed=99)
    return tmp_path


SVHN_TRAIN_Y = [10, 1, 5, 10, 9, 3]
SVHN_TEST_Y = [2, 10, 7]


def _svhn_mat(path: Path, labels: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 200, size=(32, 32, 3, len(labels)), dtype=np.uint8)  # H, W, C, N
    x[1, 2, 0, 0] = 255  # image 0, channel R, row 1, column 2
    sio.savemat(path, {"X": x, "y": np.asarray(labels, dtype=np.uint8).reshape(-1, 1)})


@pytest.fixture
def svhn_root(tmp_path: Path) -> Path:
    base = tmp_path / "svhn"
    base.mkdir()
    _svhn_mat(base / "train_32x32.mat", SVHN_TRAIN_Y, seed=0)
    _svhn_mat(base / "test_32x32.mat", SVHN_TEST_Y, seed=1)
    return tmp_path


def _private_len(ds) -> int:
    return len(ds.private)


# -------------------------------------------------------------------------------------- CelebA
def test_celeba_reader_center_crops_to_64(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root))
    assert ds.image_shape == (3, 64, 64)
    assert ds.private.feature_shape == (3, 64, 64)
    assert ds.test.x.shape == (N_TEST, 3, 64, 64)
    assert ds.test.x.dtype == torch.float32


def test_celeba_reader_center_crops_to_32(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root), image_size=32)
    assert ds.image_shape == (3, 32, 32)
    assert ds.test.x.shape == (N_TEST, 3, 32, 32)


@pytest.mark.parametrize("size", [64, 32])
def test_celeba_preprocessing_matches_resize_centercrop_totensor(celeba_root: Path, size: int) -> None:
    ds = celeba(root=str(celeba_root), image_size=size)
    tf = transforms.Compose([transforms.Resize(size), transforms.CenterCrop(size), transforms.ToTensor()])
    test_files = [f for f, (p, _, _) in CELEBA_ROWS.items() if p == 2]
    img_dir = celeba_root / "celeba" / "img_align_celeba"
    expected = torch.stack([tf(Image.open(img_dir / f).convert("RGB")) for f in test_files])
    torch.testing.assert_close(ds.test.x, expected)


def test_celeba_center_crop_removes_top_band_instead_of_squashing(celeba_root: Path) -> None:
    # a squash (Resize((64, 64))) would keep the red top band; resize-short-side + center crop drops it
    ds = celeba(root=str(celeba_root), image_size=64)
    top_row = ds.test.x[:, :, 0, :]
    assert float(top_row[:, 0].mean()) < 0.3  # no red band left
    squashed = transforms.ToTensor()(transforms.Resize((64, 64))(_celeba_image(0)))
    assert float(squashed[0, 0].mean()) > 0.8  # sanity: the band would survive a squash


def test_celeba_values_within_unit_interval(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root))
    assert float(ds.test.x.min()) >= 0.0 and float(ds.test.x.max()) <= 1.0


def test_celeba_split_sizes_follow_partition_file(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root))
    assert len(ds.test) == N_TEST  # partition 2
    assert _private_len(ds) == N_TRAIN  # partition 0 only (partition 1 dropped)
    assert ds.public is None
    assert ds.num_classes == 2


def test_celeba_male_label_maps_minus_one_to_zero(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root))
    expected = [0 if m == -1 else 1 for p, m, _ in CELEBA_ROWS.values() if p == 2]
    assert ds.test.y.dtype == torch.long
    assert ds.test.y.tolist() == expected == [1, 0]


def test_celeba_label_selects_named_attribute_column(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root), label="Smiling")
    assert ds.test.y.tolist() == [0, 1]
    with pytest.raises(ValueError, match="Not_An_Attribute"):
        celeba(root=str(celeba_root), label="Not_An_Attribute")


def test_celeba_max_train_and_max_test_keep_first_n(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root), max_train=2, max_test=1)
    assert _private_len(ds) == 2
    assert len(ds.test) == 1
    assert ds.test.y.tolist() == [1]  # 000005.jpg, Male


def test_celeba_public_fraction_half_gives_public_split(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root), public_fraction=0.5, seed=3)
    assert ds.public is not None and len(ds.public) >= 1
    assert len(ds.public) + _private_len(ds) == N_TRAIN


def test_celeba_ignores_extra_hydra_keys(celeba_root: Path) -> None:
    ds = celeba(root=str(celeba_root), name="celeba", _target_="x", channels=3)
    assert ds.name == "celeba"


def test_celeba_reader_never_constructs_torchvision_dataset_without_download(
        celeba_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a, **k):
        raise AssertionError("torchvision.datasets.CelebA must not be used for reading")

    monkeypatch.setattr(torchvision.datasets, "CelebA", boom)
    assert len(celeba(root=str(celeba_root)).test) == N_TEST


def test_celeba_download_fetches_via_torchvision_then_reads_own_parser(
        celeba_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(torchvision.datasets, "CelebA", lambda *a, **k: calls.append((a, k)))
    ds = celeba(root=str(celeba_root), download=True)
    assert calls == [((str(celeba_root),), {"split": "all", "target_type": "attr", "download": True})]
    assert len(ds.test) == N_TEST


@pytest.mark.parametrize("missing", ["img_align_celeba", "list_eval_partition.txt", "list_attr_celeba.txt"])
def test_celeba_missing_file_raises_with_path_and_download_hint(celeba_root: Path, missing: str) -> None:
    target = celeba_root / "celeba" / missing
    if target.is_dir():
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
    else:
        target.unlink()
    with pytest.raises(DatasetNotFoundError) as exc:
        celeba(root=str(celeba_root))
    assert str(target) in str(exc.value)
    assert "dataset.download=true" in str(exc.value)


def test_celeba_empty_root_lists_all_expected_paths(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as exc:
        celeba(root=str(tmp_path))
    msg = str(exc.value)
    for p in ["img_align_celeba", "list_eval_partition.txt", "list_attr_celeba.txt"]:
        assert str(tmp_path / "celeba" / p) in msg
    assert "dataset.download=true" in msg


def test_celeba_missing_image_raises_before_reading(celeba_root: Path) -> None:
    target = celeba_root / "celeba" / "img_align_celeba" / "000006.jpg"
    target.unlink()
    with pytest.raises(DatasetNotFoundError) as exc:
        celeba(root=str(celeba_root))
    assert str(target) in str(exc.value)


# ------------------------------------------------------------------------------------ CIFAR-10
def test_cifar10_reader_shapes_and_split_sizes(cifar_root: Path) -> None:
    ds = cifar10(root=str(cifar_root))
    assert ds.image_shape == (3, 32, 32)
    assert _private_len(ds) == 5 * CIFAR_PER_BATCH
    assert ds.test.x.shape == (CIFAR_TEST, 3, 32, 32)
    assert ds.test.x.dtype == torch.float32 and ds.test.y.dtype == torch.long
    assert ds.num_classes == 10 and ds.public is None


def test_cifar10_values_within_unit_interval_and_channel_major_layout(cifar_root: Path) -> None:
    ds = cifar10(root=str(cifar_root))
    x = ds.test.x
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(x[0, 0, 0, 0]) == 1.0  # data[0] is R at (0, 0)
    assert float(x[0, 1, 1, 2]) == 0.0  # data[1024 + 32 + 2] is G at (1, 2)
    with open(cifar_root / "cifar-10-batches-py" / "test_batch", "rb") as fh:
        d = pickle.load(fh, encoding="bytes")
    assert ds.test.y.tolist() == d[b"labels"]
    expected = torch.from_numpy(d[b"data"].reshape(-1, 3, 32, 32)).float() / 255.0
    torch.testing.assert_close(x, expected)


def test_cifar10_public_fraction_half_gives_public_split(cifar_root: Path) -> None:
    ds = cifar10(root=str(cifar_root), public_fraction=0.5)
    assert ds.public is not None and len(ds.public) == 5
    assert _private_len(ds) == 5


def test_cifar10_missing_batch_raises_with_path_and_download_hint(cifar_root: Path) -> None:
    target = cifar_root / "cifar-10-batches-py" / "data_batch_4"
    target.unlink()
    with pytest.raises(DatasetNotFoundError) as exc:
        cifar10(root=str(cifar_root))
    assert str(target) in str(exc.value)
    assert "dataset.download=true" in str(exc.value)


def test_cifar10_empty_root_lists_all_batches(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError) as exc:
        cifar10(root=str(tmp_path))
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        assert str(tmp_path / "cifar-10-batches-py" / f) in str(exc.value)


# ---------------------------------------------------------------------------------------- SVHN
def test_svhn_reader_shapes_and_split_sizes(svhn_root: Path) -> None:
    ds = svhn(root=str(svhn_root))
    assert ds.image_shape == (3, 32, 32)
    assert _private_len(ds) == len(SVHN_TRAIN_Y)
    assert ds.test.x.shape == (len(SVHN_TEST_Y), 3, 32, 32)
    assert ds.num_classes == 10 and ds.public is None


def test_svhn_label_ten_maps_to_digit_zero(svhn_root: Path) -> None:
    ds = svhn(root=str(svhn_root))
    assert ds.test.y.dtype == torch.long
    assert ds.test.y.tolist() == [2, 0, 7]
    assert int(ds.test.y.max()) <= 9


def test_svhn_values_within_unit_interval_and_hwcn_transposed(svhn_root: Path) -> None:
    ds = svhn(root=str(svhn_root))
    x = ds.test.x
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(x[0, 0, 1, 2]) == 1.0  # X[1, 2, 0, 0] -> image 0, R, row 1, col 2
    raw = sio.loadmat(str(svhn_root / "svhn" / "test_32x32.mat"))["X"]
    expected = torch.from_numpy(np.transpose(raw, (3, 2, 0, 1)).copy()).float() / 255.0
    torch.testing.assert_close(x, expected)


def test_svhn_public_fraction_half_gives_public_split(svhn_root: Path) -> None:
    ds = svhn(root=str(svhn_root), public_fraction=0.5, seed=1)
    assert ds.public is not None and len(ds.public) == 3
    assert _private_len(ds) == 3
    assert int(ds.public.y.max()) <= 9


def test_svhn_download_uses_torchvision_svhn_folder(svhn_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(torchvision.datasets, "SVHN", lambda **k: calls.append(k))
    svhn(root=str(svhn_root), download=True)
    assert sorted(c["split"] for c in calls) == ["test", "train"]
    assert all(c["root"] == str(svhn_root / "svhn") and c["download"] for c in calls)


@pytest.mark.parametrize("missing", ["train_32x32.mat", "test_32x32.mat"])
def test_svhn_missing_file_raises_with_path_and_download_hint(svhn_root: Path, missing: str) -> None:
    target = svhn_root / "svhn" / missing
    target.unlink()
    with pytest.raises(DatasetNotFoundError) as exc:
        svhn(root=str(svhn_root))
    assert str(target) in str(exc.value)
    assert "dataset.download=true" in str(exc.value)
