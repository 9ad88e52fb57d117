"""Generative evaluator: FID (domain / Inception extractors), the CNN classifier, grids, results keys."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from dpgen.data.datasets import digits
from dpgen.errors import ConfigError
from dpgen.eval import GenerativeEvaluator
from dpgen.eval.cnn import Adam, SmallCNN, accuracy, fit_cnn
from dpgen.eval.fid import (
    DomainSettings,
    InceptionFeatures,
    InceptionUnavailableError,
    domain_extractor,
    frechet_distance,
    plan_domain_split,
)

FAST_DOMAIN = {"epochs": 1, "min_steps": 150, "batch_size": 64}


@pytest.fixture(scope="module")
def data():
    return digits(public_fraction=0.0, seed=0)


@pytest.fixture(scope="module")
def extractor(data, tmp_path_factory):
    ext, plan, info = domain_extractor(data, tmp_path_factory.mktemp("cache"), DomainSettings(**FAST_DOMAIN),
                                       log=lambda *_: None)
    return ext, plan, info


def test_domain_extractor_is_trained_on_the_test_half_disjoint_from_the_reference(data):
    plan = plan_domain_split(data)
    assert "test split" in plan.trained_on and "other half" in plan.reference
    a = {tuple(r) for r in plan.train.x.flatten(1).numpy().round(4).tolist()}
    b = {tuple(r) for r in plan.ref.x.flatten(1).numpy().round(4).tolist()}
    assert len(plan.train) + len(plan.ref) == len(data.test)
    assert len(a & b) <= 2  # the 8x8 digits contain a few exact duplicate images; the rows themselves are disjoint


def test_domain_extractor_uses_the_public_split_when_it_is_large_enough():
    d = digits(public_fraction=0.3, seed=0)
    plan = plan_domain_split(d, min_public=100)
    assert plan.trained_on.startswith("public split") and plan.train is d.public and plan.ref is d.test
    plan_small = plan_domain_split(d, min_public=10_000)
    assert plan_small.trained_on.startswith("test split")


def test_domain_extractor_features_separate_classes_and_are_cached(data, extractor, tmp_path):
    ext, plan, info = extractor
    assert info["fid_extractor_accuracy"] > 0.6  # the features carry class information
    feats = ext(plan.ref.x[:7])
    assert feats.shape == (7, 128) and feats.dtype == torch.float64
    # second call: loaded from the same cache file, identical features
    cache = tmp_path / "c"
    e1, _, i1 = domain_extractor(data, cache, DomainSettings(**FAST_DOMAIN), log=lambda *_: None)
    msgs: list[str] = []
    e2, _, i2 = domain_extractor(data, cache, DomainSettings(**FAST_DOMAIN), log=msgs.append)
    assert i1["fid_extractor_cache"] == i2["fid_extractor_cache"] and any("cache" in m for m in msgs)
    torch.testing.assert_close(e1(plan.ref.x[:5]), e2(plan.ref.x[:5]))


def test_fid_of_a_set_against_itself_is_zero_and_grows_with_noise(extractor):
    ext, plan, _ = extractor
    ref = plan.ref.x
    assert abs(frechet_distance(ref, ref, ext)) < 1e-4
    g = torch.Generator().manual_seed(0)
    fids = [frechet_distance(ref, (ref + s * torch.randn(ref.shape, generator=g)).clamp(0, 1), ext)
            for s in (0.05, 0.2, 0.5)]
    assert 0 < fids[0] < fids[1] < fids[2]


@pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")  # dead ReLU units: singular covariances
def test_fid_matches_scipy_frechet_distance_in_float64(extractor):
    ext, plan, _ = extractor
    real, fake = plan.ref.x, plan.train.x[:210]
    f1, f2 = ext(real).numpy(), ext(fake).numpy()
    mu1, mu2 = f1.mean(0), f2.mean(0)
    s1, s2 = np.cov(f1, rowvar=False), np.cov(f2, rowvar=False)
    covmean = scipy.linalg.sqrtm(s1 @ s2).real
    expected = float(((mu1 - mu2) ** 2).sum() + np.trace(s1 + s2 - 2 * covmean))
    assert frechet_distance(real, fake, ext, batch_size=37) == pytest.approx(expected, rel=1e-3)


def test_fid_is_torchmetrics_frechet_inception_distance_bit_for_bit(extractor):
    """frechet_distance runs torchmetrics' float64 operations without importing torchmetrics."""
    from torchmetrics.image.fid import FrechetInceptionDistance

    ext, plan, _ = extractor
    real = plan.ref.x
    fake = (plan.train.x[:200] + 0.1 * torch.randn(200, 1, 8, 8, generator=torch.Generator().manual_seed(0))).clamp(0, 1)
    for batch_size in (500, 37):
        metric = FrechetInceptionDistance(feature=ext, normalize=True, reset_real_features=True)
        for x, is_real in ((real, True), (fake, False)):
            for i in range(0, x.shape[0], batch_size):
                metric.update(x[i:i + batch_size], real=is_real)
        assert frechet_distance(real, fake, ext, batch_size=batch_size) == float(metric.compute())


def test_missing_inception_weights_raise_a_clear_error():
    with pytest.raises(InceptionUnavailableError, match="evaluator.fid.inception_weights"):
        InceptionFeatures("/nonexistent/weights-inception.pth")


class _RealImageMethod:
    """A stand-in 'generator' that returns held-out real test digits of the requested labels."""

    def __init__(self, pool_x, pool_y, noise: float = 0.0):
        self.x, self.y, self.noise = pool_x, pool_y, noise

    def sample(self, n, labels=None, batch_size=1000):
        g = torch.Generator().manual_seed(n)
        out = torch.empty(n, *self.x.shape[1:])
        for c in labels.unique():
            idx = (labels == c).nonzero().flatten()
            pool = (self.y == c).nonzero().flatten()
            out[idx] = self.x[pool[torch.randint(len(pool), (len(idx),), generator=g)]]
        out = (out + self.noise * torch.randn(out.shape, generator=g)).clamp(0, 1)
        return out, labels


def _fid_cfg(tmp_path, **kw):
    return {"enabled": True, "extractor": "domain", "n_fid": 400, "cache_dir": str(tmp_path), "domain": FAST_DOMAIN,
            **kw}


def _logger(tmp_path):
    from dpgen.logging import RunLogger

    return RunLogger(tmp_path / "run")


def test_evaluator_reports_cnn_accuracy_fid_and_extractor_provenance(data, tmp_path):
    method = _RealImageMethod(data.test.x, data.test.y)
    ev = GenerativeEvaluator(n_synthetic=600, classifiers=("logreg", "cnn"), logreg_max_iter=200, grid_per_class=4,
                             cnn={"epochs": 3, "min_steps": 150}, fid=_fid_cfg(tmp_path), device="cpu")
    m = ev(method, data, _logger(tmp_path), seed=0)
    assert m["acc_logreg"] > 0.8 and m["acc_cnn"] > 0.7  # classifiers fit on (copies of) real digits work
    assert m["fid_extractor"] == "domain" and m["fid_n_generated"] == 400
    assert m["fid_note"].startswith(f"FID on {m['fid_n_reference']} reference images, below evaluator.fid.min_reference=1000")
    assert m["fid_extractor_trained_on"].startswith("test split") and "other half" in m["fid_reference"]
    assert (tmp_path / "run" / "samples.png").exists() and (tmp_path / "run" / "samples_class9.png").exists()
    noisy = GenerativeEvaluator(n_synthetic=0, classifiers=(), grid_per_class=2, class_grids=False,
                                fid=_fid_cfg(tmp_path), device="cpu")(
        _RealImageMethod(data.test.x, data.test.y, noise=0.3), data, _logger(tmp_path), seed=0)
    assert noisy["fid"] > m["fid"]


def test_evaluator_falls_back_to_domain_only_when_allowed(data, tmp_path):
    method = _RealImageMethod(data.test.x, data.test.y)
    cfg = _fid_cfg(tmp_path, extractor="inception", inception_weights="/nonexistent/inception.pth")
    m = GenerativeEvaluator(n_synthetic=0, classifiers=(), class_grids=False, fid={**cfg, "fallback": "domain"},
                            device="cpu")(method, data, _logger(tmp_path), seed=0)
    assert m["fid_extractor"] == "domain" and m["fid_extractor_requested"] == "inception"
    assert "evaluator.fid.inception_weights" in m["fid_fallback_reason"]
    # refused before anything is generated: the evaluability check (run by the call when it was not run before)
    with pytest.raises(ConfigError, match="allow the offline extractor with evaluator.fid.fallback=domain"):
        GenerativeEvaluator(n_synthetic=0, classifiers=(), class_grids=False, fid={**cfg, "fallback": None},
                            device="cpu")(method, data, _logger(tmp_path), seed=0)


def test_a_below_chance_domain_extractor_refuses_its_fid(data, tmp_path, monkeypatch):
    """An extractor no better than chance on its held-out images: no FID number (not a tiny one with a note),
    one line saying why, shown with the results."""
    import io

    from rich.console import Console

    import dpgen.eval.evaluator as evaluator
    from dpgen.logging.summary import print_summary

    real = evaluator.domain_extractor
    monkeypatch.setattr(evaluator, "domain_extractor",
                        lambda *a, **k: (lambda ext, plan, info: (ext, plan, {**info, "fid_extractor_accuracy": 0.09}))(
                            *real(*a, **k)))
    m = GenerativeEvaluator(n_synthetic=0, classifiers=(), class_grids=False, fid=_fid_cfg(tmp_path),
                            device="cpu")(_RealImageMethod(data.test.x, data.test.y), data, _logger(tmp_path), seed=0)
    assert "fid" not in m and "fid_note" not in m
    assert m["fid_refused"].startswith("the domain FID extractor classifies its held-out images at 9%, no better than "
                                       "chance (10% for 10 classes)")
    buf = io.StringIO()
    print_summary({"experiment": "x", "metrics": m, "privacy": {}}, Console(file=buf, width=400))
    assert "fid_refused" in buf.getvalue() and "no better than chance" in buf.getvalue()


def test_evaluator_rejects_unknown_settings_with_the_setting_named():
    with pytest.raises(ValueError, match="evaluator.classifiers"):
        GenerativeEvaluator(classifiers=("svm",))
    with pytest.raises(ValueError, match="evaluator.fid.extractor"):
        GenerativeEvaluator(fid={"extractor": "clip"})
    with pytest.raises(ValueError, match="evaluator.fid: unknown"):
        GenerativeEvaluator(fid={"nfid": 3})


def test_small_cnn_shapes_match_the_paper_at_28_and_32_px_and_fit_tiny_images():
    assert SmallCNN(1, 28, 10).penultimate[0].in_features == 1152
    assert SmallCNN(3, 32, 2).penultimate[0].in_features == 2048
    g = torch.Generator().manual_seed(0)
    y = torch.randint(2, (200,), generator=g)
    x = 0.3 * torch.rand(200, 1, 8, 8, generator=g)
    x[y == 1, :, :4] += 0.6  # class 1: bright top half
    x[y == 0, :, 4:] += 0.6  # class 0: bright bottom half
    model = fit_cnn(x, y, 2, epochs=1, min_steps=200, batch_size=32, seed=0)
    assert accuracy(model, x, y) > 0.8


@pytest.mark.parametrize("weight_decay", [0.0, 1e-2])
def test_classifier_adam_is_torch_optim_adam_bit_for_bit(weight_decay):
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(64, 1, 8, 8, generator=g), torch.randint(10, (64,), generator=g)
    models = []
    for make_opt in (lambda p: torch.optim.Adam(p, lr=3e-3, weight_decay=weight_decay),
                     lambda p: Adam(p, lr=3e-3, weight_decay=weight_decay)):
        torch.manual_seed(0)
        model = SmallCNN(1, 8, 10)
        opt = make_opt(model.parameters())
        for step in range(12):
            idx = torch.arange(step * 5, step * 5 + 16) % 64
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        models.append(model.state_dict())
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])
    assert not torch.equal(models[1]["head.1.weight"], SmallCNN(1, 8, 10).state_dict()["head.1.weight"])


def test_inception_extractor_takes_grayscale_images_in_0_1(monkeypatch):
    """Plumbing only (no real weights offline): random Inception weights, grayscale [0, 1] input ->
    (n, 2048) float64 features."""
    import torch_fidelity.feature_extractor_inceptionv3 as tfi

    import dpgen.eval.fid as fid

    monkeypatch.setattr(fid, "inception_source", lambda path=None: fid.InceptionSource("download"))
    monkeypatch.setattr(tfi, "load_state_dict_from_url", lambda *a, **k: {})
    monkeypatch.setattr(tfi.FeatureExtractorInceptionV3, "load_state_dict", lambda self, sd, *a, **k: None)
    ext = InceptionFeatures()
    feats = ext(torch.rand(2, 1, 28, 28))
    assert feats.shape == (2, 2048) and feats.dtype == torch.float64 and torch.isfinite(feats).all()
