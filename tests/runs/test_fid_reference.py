"""A metric that cannot be measured on the data at hand is switched off (FID) or refused (a class missing from
the test split) before training, with one line saying why; every FID carries its reference size."""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit
from dpgen.errors import ConfigError
from dpgen.eval.evaluator import GenerativeEvaluator
from dpgen.logging.summary import print_summary


def splits(n_test: int, classes: int = 3, present=None) -> DataSplits:
    labels = torch.tensor([c for c in (present or range(classes))]).repeat(n_test)[:n_test]
    return DataSplits(name="small", private=PrivateSplit(torch.rand(30, 1, 8, 8), torch.arange(30) % classes),
                      test=TensorSplit(torch.rand(n_test, 1, 8, 8), labels), public=None, num_classes=classes,
                      image_shape=(1, 8, 8))


def test_a_fid_on_fewer_reference_images_than_features_is_switched_off_with_one_line(capsys):
    ev = GenerativeEvaluator(n_synthetic=0, classifiers=(), fid={"enabled": True, "extractor": "domain"})
    ev.check(splits(40))  # domain extractor: half A trains it, half B (20 images) would be the reference
    assert ev.fid_off.startswith("FID switched off: its reference set would have 20 images, no more than the 128 "
                                 "features of the domain extractor")
    assert "FID switched off" in capsys.readouterr().err  # said before training

    class Method:
        def sample(self, n, labels):
            return torch.rand(n, 1, 8, 8), labels

    metrics = ev(Method(), splits(40), logger=type("L", (), {"log_images": lambda *a, **k: None, "open_after_training": lambda *a: None})(), seed=0)
    assert "fid" not in metrics and metrics["fid_skipped"] == ev.fid_off
    ev.check(splits(600))  # a reference set larger than the features: measured
    assert ev.fid_off is None


def test_a_class_missing_from_the_test_split_is_refused_before_training():
    ev = GenerativeEvaluator(n_synthetic=300, classifiers=("logreg",))
    with pytest.raises(ConfigError, match=r"the test split has no image of class\(es\) \[2\], so the downstream "
                                          r"accuracy would not test them"):
        ev.check(splits(30, present=[0, 1]))
    ev.check(splits(30))


def test_the_console_shows_every_fid_with_its_reference_size_and_the_warning():
    results = {"experiment": "e", "privacy": {"epsilon": 1.0, "target_epsilon": 1.0, "delta": 1e-5},
               "metrics": {"fid": 12.5, "fid_n_reference": 225, "fid_note": "FID on 225 reference images, below "
                           "evaluator.fid.min_reference=1000: biased upward and noisy"}}
    buf = io.StringIO()
    print_summary(results, Console(file=buf, width=250))
    line = next(ln for ln in buf.getvalue().splitlines() if " fid " in ln)
    assert "12.5000  (on 225 reference images)" in line
    assert "below evaluator.fid.min_reference=1000" in buf.getvalue()


def test_every_fid_comes_with_its_real_vs_real_floor_on_the_console():
    results = {"experiment": "e", "privacy": {"epsilon": 1.0, "target_epsilon": 1.0, "delta": 1e-5},
               "metrics": {"fid": 12.5, "fid_n_reference": 225, "fid_real_vs_real": 9.25,
                           "fid_real_vs_real_sizes": "112 vs 113 reference images (two disjoint halves, split seed 0)"}}
    buf = io.StringIO()
    print_summary(results, Console(file=buf, width=250))
    line = next(ln for ln in buf.getvalue().splitlines() if " fid " in ln)
    assert "12.5000  (on 225 reference images; real-vs-real floor 9.2500 at 112 vs 113)" in line
    from dpgen.logging.summary import group_results

    grouped = group_results(results)  # what the W&B summary receives, flattened
    assert grouped["utility"]["fid_real_vs_real"] == 9.25 and grouped["provenance"]["fid_n_reference"] == 225
    assert grouped["provenance"]["fid_real_vs_real_sizes"].startswith("112 vs 113")


class FirstPixels(torch.nn.Module):
    """A stand-in extractor: the first 4 pixels as float64 features; counts the images it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def forward(self, x):
        self.seen.append(x.shape[0])
        return x.flatten(1)[:, :4].double()


def test_the_floor_is_the_fid_between_two_halves_of_the_reference_and_costs_no_extra_forward():
    from dpgen.eval.fid import feature_moments, fid_with_floor, frechet_distance_of_moments

    g = torch.Generator().manual_seed(0)
    real, fake = torch.rand(41, 1, 4, 4, generator=g), torch.rand(30, 1, 4, 4, generator=g)
    ext = FirstPixels()
    out = fid_with_floor(real, fake, ext, batch_size=100)
    assert ext.seen == [20, 21, 30]  # the halves' moments add up to the reference's: one pass over each image
    perm = torch.randperm(41, generator=torch.Generator().manual_seed(0))
    halves = [feature_moments(real[perm[:20]], ext), feature_moments(real[perm[20:]], ext)]
    assert out["fid_real_vs_real"] == frechet_distance_of_moments(*halves)
    assert abs(out["fid"] - frechet_distance_of_moments(feature_moments(real, ext), feature_moments(fake, ext))) < 1e-9
    assert out["fid_real_vs_real_sizes"].startswith("20 vs 21 reference images")
