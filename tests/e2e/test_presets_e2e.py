"""Every experiment preset, end to end: build the method, train a few steps, evaluate, write results.json.

Parametrised from ``configs/experiment/*.yaml``: a new preset is covered without editing this file.
Each preset runs in-process (``dpgen.pipeline.run`` on the composed config, as ``python train.py
experiment=<name>`` does) on data in its real on-disk layout: the fake CelebA / CIFAR-10 / SVHN /
Office-31 / VisDA / USPS files of ``tests/helpers/fakedata.py`` and the real MNIST-family files of
``$DPGEN_DATA_ROOT``.  The shrinking is generic, never per preset:

* ``SHRINK``: a few steps, small batches, particles and evaluator sizes, the domain FID extractor
  (offline) — each applied only where the composed config has that key, and only to make it smaller;
* ``CAP``: the loaded splits are cut to at most this many records (the real loader still reads the
  real files; the cut happens after it, as a wrapper around the preset's own dataset node).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf, open_dict

from dpgen.data.base import PrivateSplit, TensorSplit
from dpgen.presets import preset_info, presets
from tests.helpers import fakedata, shared_data_root
from tests.helpers.configs import compose_cfg

PRESETS = presets()
# presets whose smoke run takes much longer than the others (none today: every preset runs in the fast suite)
SLOW: set[str] = set()
PARAMS = [pytest.param(p, marks=pytest.mark.slow) if p in SLOW else p for p in PRESETS]
MNIST_FAMILY = {"mnist", "fashion_mnist", "mnist_usps", "usps_mnist"}  # datasets read from the real files

SHRINK = {
    "trainer.max_steps": 2, "trainer.log_every": 1, "trainer.progress": False, "trainer.threads": 1,
    "model.batch_size": 16, "model.ae_steps": 2, "model.ae_batch_size": 16, "model.n_particles": 64,
    "model.num_percentiles": 64, "model.start_align": 0, "model.generator.hidden": 16,
    "model.warm_start.steps": 2, "model.warm_start.batch_size": 16,
    "evaluator.n_synthetic": 100, "evaluator.grid_per_class": 2, "evaluator.logreg_max_iter": 50,
    "evaluator.mlp_max_iter": 20, "evaluator.cnn.epochs": 1, "evaluator.cnn.min_steps": 2,
    "evaluator.torch_clf.max_epochs": 2, "evaluator.fid.n_fid": 40, "evaluator.fid.domain.epochs": 1,
    "evaluator.fid.domain.min_steps": 5, "evaluator.sliced_directions": 20,
    # fewer features than the capped reference set has images, so the FID stays measurable (not switched off)
    "evaluator.fid.domain.num_features": 8,
}
SET = {"model.autoencoder_cache": None, "evaluator.fid.extractor": "domain"}  # no cache in the checkout; offline FID
CAP = {"n_private": 256, "n_test": 100}


def _cut(split: TensorSplit | None, n: int) -> TensorSplit | None:
    return split if split is None or len(split) <= n else TensorSplit(split.x[:n], split.y[:n])


_LOADED: dict[str, object] = {}  # the capped splits of each dataset setting, read once per test process


def loaded_once(data, n_private: int, n_test: int):
    """:func:`capped` of the dataset node ``data``, instantiated once per distinct node: presets that share a
    dataset setting share its (read-only) splits instead of reading the full files again."""
    from hydra.utils import instantiate

    key = OmegaConf.to_yaml(data, resolve=True) + f"{n_private} {n_test}"
    if key not in _LOADED:
        _LOADED[key] = capped(instantiate(data), n_private, n_test)
    return _LOADED[key]


def capped(data, n_private: int, n_test: int):
    """``data`` (any :class:`DataSplits`) with at most ``n_private`` private / public and ``n_test`` test records."""
    if len(data.private) > n_private:
        data = dataclasses.replace(data, private=PrivateSplit(*data.private._gather(torch.arange(n_private))))
    cut = {"test": _cut(data.test, n_test), "public": _cut(data.public, n_private)}
    if getattr(data, "source_test", None) is not None:
        cut["source_test"] = _cut(data.source_test, n_test)
    return dataclasses.replace(data, **cut)


def shrunk(cfg):
    """``cfg`` with :data:`SHRINK` (where the key exists and the value is larger), :data:`SET` (where the key
    exists) and the dataset wrapped in :func:`capped` (read once per dataset setting: :func:`loaded_once`)."""
    for key, small in SHRINK.items():
        value = OmegaConf.select(cfg, key, default=None)
        if isinstance(value, bool) or (isinstance(value, (int, float)) and value > small) or (
                key == "trainer.max_steps" and value is None):
            OmegaConf.update(cfg, key, small)
    for key, value in SET.items():
        if OmegaConf.select(cfg, key, default="absent") != "absent":
            OmegaConf.update(cfg, key, value)
    with open_dict(cfg):
        cfg.dataset = {"_target_": f"{__name__}.loaded_once", "_recursive_": False, "data": cfg.dataset, **CAP}
    return cfg


@pytest.fixture(scope="module")
def preset_data_root(tmp_path_factory) -> Path:
    """Every fake layout, plus links to the real MNIST-family folders when ``$DPGEN_DATA_ROOT`` has them."""
    root = fakedata.make(tmp_path_factory.mktemp("data"))
    real = shared_data_root()
    if real is not None:
        fakedata.link_real(root, real)
    return root


@pytest.mark.parametrize("preset", PARAMS)
def test_preset_runs_end_to_end(preset, preset_data_root, tmp_path):
    data_root = preset_data_root
    from dpgen.pipeline import run

    if preset_info(preset).dataset in MNIST_FAMILY and not (data_root / "MNIST").exists():
        pytest.skip("needs the real MNIST-family files: set DPGEN_DATA_ROOT")
    out = tmp_path / "run"
    cfg = shrunk(compose_cfg([f"experiment={preset}", "logger=local"], out_dir=out, data_root=data_root))
    results = run(cfg)
    saved = json.loads((out / "results.json").read_text())
    assert saved["experiment"] == results["experiment"] == preset
    measured = {k: v for k, v in saved["metrics"].items() if k != "eval_time_s" and isinstance(v, (int, float))}
    assert measured, f"{preset}: the evaluation measured nothing: {saved['metrics']}"
    eps = float(saved["privacy"]["epsilon"])
    assert eps > 0 and (math.isinf(eps) or eps < 1e3)


def _pairs(names) -> set[tuple[str, str]]:
    return {(i.method, i.dataset) for i in map(preset_info, names)}


def test_fast_suite_runs_every_method_on_every_dataset_it_is_used_with():
    """Each (method, dataset) pair of any preset has a preset outside SLOW, so ``make test`` builds every
    method on every dataset loader it is used with."""
    missing = _pairs(PRESETS) - _pairs(p for p in PRESETS if p not in SLOW)
    assert not missing, f"only slow presets cover these (method, dataset) pairs: {sorted(missing)}"
    assert not SLOW - set(PRESETS), f"SLOW names presets that do not exist: {sorted(SLOW - set(PRESETS))}"
