"""Evaluation sized to the data's public size, every evaluability check before anything is generated, and numbers
that warn when they mean nothing (an accuracy at or below chance or below the class prior, an FID without a usable
floor)."""

from __future__ import annotations

import io
import json

import pytest
import torch
from rich.console import Console

from dpgen.data.base import DataSplits, TensorSplit
from dpgen.data.own import evaluation_size, image_folder
from dpgen.errors import ConfigError
from dpgen.eval.evaluator import GenerativeEvaluator, accuracy_baselines, accuracy_note, floor_note
from dpgen.eval.sizing import MIN_PER_CLASS, evaluation_sizes, min_steps_for
from dpgen.logging.summary import print_summary


class _SecretSize:
    """A private split whose size must not be read: it is private under add/remove."""

    def __len__(self):
        raise AssertionError("the evaluation read the number of private records")


def _patterns(n: int, classes: int = 3, side: int = 8, seed: int = 0) -> TensorSplit:
    """Class k: a bright k-th band of rows plus noise (a signal LogReg learns from a few dozen images)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    x = 0.2 * torch.rand(n, 1, side, side, generator=g)
    for k in range(classes):
        band = slice(k * side // classes, (k + 1) * side // classes)
        x[y == k, :, band, :] += 0.7
    return TensorSplit(x.clamp(0, 1), y)


def _own(n_test: int, eval_size: int | None, classes: int = 3, side: int = 8, n_public: int = 0) -> DataSplits:
    return DataSplits(name="image_folder", private=_SecretSize(), test=_patterns(n_test, classes, side),
                      public=_patterns(n_public, classes, side, seed=1) if n_public else None, num_classes=classes,
                      image_shape=(1, side, side), eval_size=eval_size,
                      eval_size_from=None if eval_size is None else f"the test split's {n_test} images")


class _Method:
    """Images of the test patterns for the asked labels (``shift``: drawn for the wrong class); records every ask."""

    def __init__(self, classes: int = 3, side: int = 8, shift: int = 0) -> None:
        self.asked: list[int] = []
        self.classes, self.side, self.shift = classes, side, shift

    def sample(self, n, labels=None):
        self.asked.append(int(n))
        labels = torch.arange(n) % self.classes if labels is None else labels
        pool = _patterns(max(n, self.classes), self.classes, self.side, seed=len(self.asked) + 7)
        idx = torch.stack([torch.nonzero(pool.y == (int(c) + self.shift) % self.classes)[0, 0] for c in labels])
        return pool.x[idx] + 0.0 * torch.rand(n, 1, 1, 1), labels


class _Logger:
    def log_images(self, *a, **k):
        pass

    def open_after_training(self):
        pass


FAST_DOMAIN = {"epochs": 1, "min_steps": 60, "batch_size": 64, "num_features": 16}


def _fid(tmp_path, **kw) -> dict:
    return {"enabled": True, "extractor": "domain", "n_fid": 10000, "cache_dir": str(tmp_path / "cache"),
            "domain": FAST_DOMAIN, **kw}


# ------------------------------------------------------------------------------------------------ sizes
def test_own_data_is_evaluated_at_its_public_size_with_the_preset_as_cap_and_never_reads_n():
    ev = GenerativeEvaluator(n_synthetic=60000, classifiers=("logreg",), logreg_max_iter=200, grid_per_class=2,
                             class_grids=False, fid={"enabled": False}, device="cpu")
    data = _own(120, eval_size=120)
    ev.check(data)
    assert ev.sizes.n_synthetic == 3 * MIN_PER_CLASS  # 120 public images: the floor of 100 per class
    method = _Method()
    m = ev(method, data, _Logger(), seed=0)
    assert max(method.asked) == 300 and m["n_synthetic"] == 300, method.asked  # not the preset's 60,000
    assert m["eval_sized_to"] == "the test split's 120 images"
    ev.check(_own(120, eval_size=5000))
    assert ev.sizes.n_synthetic == 5000
    ev.check(_own(120, eval_size=10**6))
    assert ev.sizes.n_synthetic == 60000  # the preset's value is the cap


def test_a_built_in_dataset_keeps_its_presets_published_sizes():
    sizes = evaluation_sizes(60000, 10000, 300, 128, 1000, 128, 10, None, None, 10000, None)
    assert (sizes.n_synthetic, sizes.n_fid, sizes.cnn_min_steps, sizes.domain_min_steps) == (60000, 10000, 300, 1000)
    assert sizes.sized_to is None


def test_schedules_and_the_fid_count_follow_the_public_size():
    sizes = evaluation_sizes(60000, 10000, 300, 128, 1000, 128, 3, 360, "declared", 60, 60)
    assert sizes.n_synthetic == 360 and sizes.n_fid == 60  # as many generated images as reference images
    assert sizes.cnn_min_steps == min_steps_for(300, 324, 128) == 90  # 30 epochs of 3 steps, not 100 epochs
    assert sizes.domain_min_steps == 30  # 60 images: one step an epoch, 30 epochs (not 1000 steps)
    assert min_steps_for(300, 100000, 128) == 300  # never above the preset's value


def test_the_own_data_size_comes_from_public_numbers_only():
    assert evaluation_size(None, 120, 0.0) == (120, "the test split's 120 images")
    assert evaluation_size(None, 120, 0.25)[0] == 360  # the held-out fraction: 120 * 0.75 / 0.25
    assert evaluation_size(5000, 120, 0.25) == (5000, "dataset.declared_size=5000")
    for bad in (0, -3, 2.5, True, "many"):
        with pytest.raises(ConfigError, match="dataset.declared_size"):
            evaluation_size(bad, 120, 0.0)


def test_an_image_folder_carries_its_public_size(tmp_path):
    from PIL import Image

    for split, n in (("train", 7), ("test", 4)):
        for name in ("a", "b"):
            (tmp_path / split / name).mkdir(parents=True)
            for i in range(n):
                Image.new("L", (4, 4), 40 * i).save(tmp_path / split / name / f"{i}.png")
    d = image_folder(str(tmp_path / "train"), 4, 1, ["a", "b"], test_path=str(tmp_path / "test"))
    assert d.eval_size == 8 and d.eval_size_from == "the test split's 8 images"  # not the 14 private images
    d = image_folder(str(tmp_path / "train"), 4, 1, ["a", "b"], test_path=str(tmp_path / "test"), declared_size=900)
    assert d.eval_size == 900
    with pytest.raises(ConfigError, match="dataset.declared_size"):
        image_folder(str(tmp_path / "train"), 4, 1, ["a", "b"], test_path=str(tmp_path / "test"), declared_size=0)


# ------------------------------------------------------------------------------------------------ the FID
def test_when_inception_cannot_score_the_domain_extractor_is_chosen_before_training(tmp_path, capsys):
    ev = GenerativeEvaluator(n_synthetic=0, classifiers=(), class_grids=False, grid_per_class=2, device="cpu",
                             fid=_fid(tmp_path, extractor="inception", fallback="domain"))
    data = _own(600, eval_size=600)
    ev.check(data)
    assert ev.fid_off is None and ev.fid_use == "domain"
    assert "evaluator.fid.extractor=domain" in ev.fid_switch and "NOT comparable with Inception" in ev.fid_switch
    assert "FID with the domain extractor instead of Inception" in capsys.readouterr().err  # said before training
    method = _Method()
    m = ev(method, data, _Logger(), seed=0)
    assert m["fid_extractor"] == "domain" and m["fid_extractor_requested"] == "inception" and "fid" in m
    assert m["fid_n_generated"] == 300 == m["fid_n_reference"]  # sized to the reference, not the preset's 10,000
    assert max(method.asked) == 300


def test_a_test_split_too_small_for_either_extractor_names_the_domain_extractor_and_its_size():
    ev = GenerativeEvaluator(n_synthetic=0, classifiers=(), fid={"enabled": True, "extractor": "inception",
                                                                 "fallback": "domain"})
    ev.check(_own(120, eval_size=120))
    assert ev.fid_off.startswith("FID switched off: the test split's 120 images are no more than the 2048 features "
                                 "of the Inception extractor")
    assert "evaluator.fid.extractor=domain evaluator.fid.domain.num_features=16" in ev.fid_off
    assert "a test split of at least 516 images" in ev.fid_off


def test_a_refused_fid_generates_nothing_for_it(tmp_path, monkeypatch):
    """The extractor is judged before any image is generated: a refused FID costs no generated image."""
    import dpgen.eval.evaluator as evaluator

    real = evaluator.domain_extractor
    monkeypatch.setattr(evaluator, "domain_extractor",
                        lambda *a, **k: (lambda ext, plan, info: (ext, plan, {**info, "fid_extractor_accuracy": 0.2}))(
                            *real(*a, **k)))
    method = _Method()
    m = GenerativeEvaluator(n_synthetic=0, classifiers=(), class_grids=False, grid_per_class=2, device="cpu",
                            fid=_fid(tmp_path))(method, _own(600, eval_size=None), _Logger(), seed=0)
    assert "fid_refused" in m and "fid" not in m
    assert method.asked == [6]  # the sample grid only: none of the FID's 10,000


def test_an_fid_without_a_usable_floor_says_so(tmp_path):
    ev = GenerativeEvaluator(n_synthetic=0, classifiers=(), class_grids=False, grid_per_class=2, device="cpu",
                             fid=_fid(tmp_path, domain={**FAST_DOMAIN, "num_features": 32}))
    m = ev(_Method(), _own(100, eval_size=100), _Logger(), seed=0)  # reference 50 > 32 features; halves 25 and 25
    assert "fid" in m and m["fid_floor_note"].startswith("no usable floor: the real-vs-real floor compares two halves "
                                                          "of 25 and 25 reference images, no more than the 32 features")
    buf = io.StringIO()
    print_summary({"experiment": "x", "metrics": m, "privacy": {}}, Console(file=buf, width=400))
    assert "WARNING: no usable floor" in buf.getvalue()
    assert floor_note({"fid": 5.0, "fid_real_vs_real": 7.0}, 1000, 16).startswith("the FID 5.00 is at or below")
    assert floor_note({"fid": 9.0, "fid_real_vs_real": 7.0}, 1000, 16) is None


# ------------------------------------------------------------------------------------------------ accuracies
def test_accuracy_baselines_and_notes():
    chance, prior = accuracy_baselines(torch.tensor([0, 0, 0, 1, 2, 2]), 3)
    assert chance == pytest.approx(1 / 3) and prior == pytest.approx(0.5)
    assert accuracy_note(1 / 3, chance, prior, 3).startswith("at or below chance (0.3333 = 1/3)")
    assert accuracy_note(0.45, chance, prior, 3).startswith("below the class-prior baseline (0.5000")
    assert accuracy_note(0.5, chance, prior, 3) is None and accuracy_note(0.9, chance, prior, 3) is None


def test_an_accuracy_at_or_below_chance_is_marked_in_the_table_the_console_and_results(tmp_path, capsys):
    from dpgen.logging.summary import group_results
    from dpgen.utils import json_safe

    ev = GenerativeEvaluator(n_synthetic=300, classifiers=("logreg",), logreg_max_iter=300, grid_per_class=2,
                             class_grids=False, fid={"enabled": False}, device="cpu")
    wrong = ev(_Method(shift=1), _own(90, eval_size=None), _Logger(), seed=0)  # every class drawn as the next one
    assert wrong["acc_logreg"] < 0.2 and wrong["acc_logreg_note"].startswith("at or below chance (0.3333 = 1/3)")
    assert "warning: logreg accuracy" in capsys.readouterr().err
    results = {"experiment": "x", "metrics": wrong, "privacy": {}}
    assert "acc_logreg_note" in json.loads(json.dumps(json_safe({**results, "summary": group_results(results)})))["metrics"]
    buf = io.StringIO()
    print_summary(results, Console(file=buf, width=400))
    row = next(line for line in buf.getvalue().splitlines() if "acc_logreg" in line)
    assert "WARNING: at or below chance" in row
    right = ev(_Method(), _own(90, eval_size=None), _Logger(), seed=0)
    assert right["acc_logreg"] > 0.9 and "acc_logreg_note" not in right
