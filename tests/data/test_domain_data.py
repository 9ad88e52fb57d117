"""Domain-adaptation data: USPS/MNIST domains from the shared data root, the embedded
digits_shift pair, and the Office-31 / VisDA feature-file loaders on fixture files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpgen.data import DatasetNotFoundError
from dpgen.data.domain import (
    UNLABELLED,
    domain_pair,
    feature_pair,
    mnist_box,
    read_feature_file,
    shift_digits,
    sklearn_digits_domain,
    usps_domain,
)
from dpgen.privacy import PrivateSampler


def test_usps_h5_loader_reads_the_shared_data_as_28x28(data_root):
    d = usps_domain(str(data_root), image_size=28)
    assert (len(d.train), len(d.test)) == (7291, 2007)
    assert d.train.x.shape[1:] == (1, 28, 28) and d.train.x.dtype == torch.float32
    assert 0.0 <= float(d.train.x.min()) and float(d.train.x.max()) <= 1.0
    assert torch.bincount(d.train.y).tolist() == [1194, 1005, 731, 658, 652, 556, 664, 645, 542, 644]


def _ink_extent(x: torch.Tensor) -> float:
    """Mean height (pixels) of the rows holding ink (> 0.3) per image, ``x: (n, 1, H, W)``."""
    rows = (x[:, 0] > 0.3).any(dim=2).float()
    idx = torch.arange(x.shape[-2]).float()
    top = torch.where(rows.bool(), idx, torch.inf).amin(1)
    bottom = torch.where(rows.bool(), idx, -torch.inf).amax(1)
    return float((bottom - top + 1).mean())


def test_usps_mnist_box_layout_matches_mnist_digit_geometry(data_root):
    from dpgen.data.domain import mnist_domain

    box = usps_domain(str(data_root), image_size=28, layout="mnist_box")
    full = usps_domain(str(data_root), image_size=28, layout="resize")
    assert box.train.x.shape[1:] == (1, 28, 28) and torch.equal(box.train.y, full.train.y)
    assert float(box.train.x[..., :4, :].abs().max()) == 0.0 and float(box.train.x[..., :, 24:].abs().max()) == 0.0
    mnist_h = _ink_extent(mnist_domain(str(data_root)).test.x[:2000])
    # MNIST digits are ~19 px tall; the stretched USPS ones ~27 px, the boxed ones within 1.5 px of MNIST
    assert abs(_ink_extent(box.test.x) - mnist_h) < 1.5
    assert _ink_extent(full.test.x) - mnist_h > 6


def test_mnist_box_pure_function_shapes_and_errors(data_root):
    x = torch.ones(2, 1, 16, 16)
    y = mnist_box(x)
    assert y.shape == (2, 1, 28, 28) and float(y.sum()) == 2 * 400.0  # a full 20x20 box of ones
    with pytest.raises(ValueError, match="layout"):
        usps_domain(str(data_root), layout="pad")


def test_mnist_to_usps_pair_keeps_the_target_unlabelled_and_private(data_root):
    from dpgen.data.domain import mnist_domain

    pair = domain_pair(mnist_domain(str(data_root), train_size=2000), usps_domain(str(data_root)))
    assert len(pair.public) == 2000 and len(pair.private) == 7291 and len(pair.test) == 2007
    assert pair.name == "mnist->usps" and pair.input_shape == (1, 28, 28)
    x, y = PrivateSampler(pair.private, 64, "without_replacement", seed=0).sample()
    assert x.shape == (64, 1, 28, 28) and (y == UNLABELLED).all()  # target labels never reach training
    assert not hasattr(pair.private, "x")


def test_usps_missing_file_error_names_the_expected_path(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="usps.h5"):
        usps_domain(str(tmp_path))


def test_digits_shift_halves_are_disjoint_and_the_target_is_shifted():
    src = sklearn_digits_domain(half=0)
    tgt = sklearn_digits_domain(half=1, rotation=30.0, thicken=3)
    plain = sklearn_digits_domain(half=1)
    assert len(src.train) + len(src.test) + len(tgt.train) + len(tgt.test) == 1797
    assert src.input_shape == tgt.input_shape == (1, 28, 28)
    # no target image equals a source image
    a, b = src.train.x.flatten(1), plain.train.x.flatten(1)
    assert torch.cdist(a, b).min() > 1e-3
    # the shift: same records as the plain half, rotated and thicker (more ink)
    assert torch.equal(tgt.train.y, plain.train.y)
    assert tgt.train.x.sum() > 1.2 * plain.train.x.sum()


def test_shift_digits_rotates_about_the_centre_and_thickens_strokes():
    x = torch.zeros(1, 1, 28, 28)
    x[0, 0, 4:24, 13:15] = 1.0  # a vertical bar
    rot = shift_digits(x, 90.0, 1)
    assert rot[0, 0, 13:15, 4:24].mean() > 0.9 and rot[0, 0, 4:12, 13:15].mean() < 0.1  # now horizontal
    thick = shift_digits(x, 0.0, 3)
    assert thick.sum() > x.sum() and torch.equal(thick[x > 0], x[x > 0])


def _write_npz(path, n, d, c, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    np.savez(path, features=rng.normal(size=(n, d)).astype(np.float32) + y[:, None], labels=y)
    return y


def _write_csv(path, n, d, c, seed):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    np.savetxt(path, np.hstack([rng.normal(size=(n, d)), y[:, None]]), delimiter=",")
    return y


def test_office31_feature_pair_reads_npz_and_csv_fixture_files(tmp_path):
    (tmp_path / "office31").mkdir()
    _write_npz(tmp_path / "office31" / "amazon.npz", 93, 2048, 31, 0)
    _write_csv(tmp_path / "office31" / "webcam.csv", 62, 2048, 31, 1)
    pair = feature_pair(str(tmp_path), "office31", "amazon", "webcam", num_classes=31, test_fraction=0.5)
    assert pair.name == "office31:amazon->webcam" and pair.input_shape == (2048,)
    assert len(pair.public) + len(pair.source_test) == 93
    assert len(pair.private) + len(pair.test) == 62 and len(pair.test) == 31
    assert pair.num_classes == 31 and pair.image_shape == (1, 1, 2048)
    assert sorted(pair.test.y.tolist()) == list(range(31))  # stratified: one per class


def test_visda_feature_pair_uses_train_and_validation_files(tmp_path):
    (tmp_path / "visda").mkdir()
    _write_npz(tmp_path / "visda" / "train.npz", 60, 16, 12, 0)
    _write_npz(tmp_path / "visda" / "validation.npz", 48, 16, 12, 1)
    pair = feature_pair(str(tmp_path), "visda", "train", "validation", num_classes=12)
    assert (pair.source_name, pair.target_name) == ("train", "validation")
    assert len(pair.private) == 48 - len(pair.test)


def test_feature_file_errors_name_the_expected_files_and_fix(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        feature_pair(str(tmp_path), "office31", "dslr", "webcam", num_classes=31)
    assert "office31/dslr.npz" in str(e.value) and "office31/dslr.csv" in str(e.value)
    bad = tmp_path / "bad.npz"
    np.savez(bad, feats=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="'features'"):
        read_feature_file(bad)
    with pytest.raises(ValueError, match="different domains"):
        feature_pair(str(tmp_path), "office31", "dslr", "dslr", num_classes=31)


def test_labels_beyond_num_classes_are_rejected(tmp_path):
    (tmp_path / "office31").mkdir()
    _write_npz(tmp_path / "office31" / "amazon.npz", 40, 8, 40, 0)
    _write_npz(tmp_path / "office31" / "dslr.npz", 40, 8, 31, 0)
    with pytest.raises(ValueError, match="num_classes"):
        feature_pair(str(tmp_path), "office31", "amazon", "dslr", num_classes=31)


def test_transductive_evaluation_needs_the_explicit_flag_and_is_labelled(tmp_path):
    """test_fraction=0 evaluates on the private target records: refused unless allowed, then labelled."""
    from dpgen.eval import DomainAdaptationEvaluator

    (tmp_path / "office31").mkdir()
    _write_npz(tmp_path / "office31" / "amazon.npz", 62, 8, 31, 0)
    _write_npz(tmp_path / "office31" / "webcam.npz", 62, 8, 31, 1)
    with pytest.raises(ValueError, match="dataset.allow_transductive_eval=true"):
        feature_pair(str(tmp_path), "office31", "amazon", "webcam", num_classes=31, test_fraction=0)
    with pytest.warns(UserWarning, match="not covered"):
        pair = feature_pair(str(tmp_path), "office31", "amazon", "webcam", num_classes=31, test_fraction=0,
                            allow_transductive_eval=True)
    assert pair.transductive_eval and len(pair.test) == len(pair.private) == 62

    class Const:
        def predict(self, x, batch_size=1000):
            return torch.zeros(len(x), dtype=torch.long)

    m = DomainAdaptationEvaluator(plot=False)(Const(), pair, logger=None)
    assert m["acc_target_note"] == "computed on private records — not covered by ε"
    split = feature_pair(str(tmp_path), "office31", "amazon", "webcam", num_classes=31, test_fraction=0.5)
    assert not split.transductive_eval
    assert "acc_target_note" not in DomainAdaptationEvaluator(plot=False)(Const(), split, logger=None)


@pytest.mark.parametrize("preset,side", [("mnist_usps_swd", "target"), ("usps_mnist_dpswd", "source")])
def test_digit_da_presets_put_usps_in_the_mnist_box_layout(preset, side, tmp_path):
    from tests.helpers.configs import compose_cfg

    cfg = compose_cfg([f"experiment={preset}"], out_dir=tmp_path)
    assert cfg.dataset[side]._target_.endswith("usps_domain") and cfg.dataset[side].layout == "mnist_box"
