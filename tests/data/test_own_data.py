"""Your own data: dataset=image_folder / dataset=arrays (dpgen/data/own.py) on generated PNG folders and arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from PIL import Image

from dpgen.data.own import arrays, image_folder
from dpgen.errors import ConfigError
from tests.helpers.configs import CONFIGS, compose_cfg
from tests.helpers.fakedata import png_folder
from tests.helpers.runs import train_here

DECLARED = {"image_size": 8, "channels": 1, "classes": 3}


def test_image_folder_reads_declared_classes_in_unit_range(tmp_path):
    png_folder(tmp_path / "train")
    png_folder(tmp_path / "test", n_per_class=2, seed=1)
    ds = image_folder(str(tmp_path / "train"), test_path=str(tmp_path / "test"), **DECLARED)
    assert ds.name == "image_folder" and ds.image_shape == (1, 8, 8) and ds.num_classes == 3
    assert len(ds.private) == 12 and len(ds.test) == 6 and ds.public is None
    assert float(ds.test.x.min()) >= 0.0 and float(ds.test.x.max()) <= 1.0
    raw = np.asarray(Image.open(tmp_path / "test" / "2" / "000.png"), dtype=np.float32) / 255.0
    assert torch.allclose(ds.test.x[4, 0], torch.from_numpy(raw))  # class folders in declared order, files sorted
    assert ds.test.y.tolist() == [0, 0, 1, 1, 2, 2]


def test_image_folder_class_names_rgb_public_split_and_held_out_test(tmp_path):
    png_folder(tmp_path, n_per_class=5, mode="RGB", classes=("cat", "dog"))
    ds = image_folder(str(tmp_path), image_size=[8, 8], channels=3, classes=["dog", "cat"], test_fraction=0.2,
                      public_fraction=0.25)
    assert ds.image_shape == (3, 8, 8) and ds.num_classes == 2
    assert len(ds.test) == 2 and len(ds.public) == 2 and len(ds.private) == 6  # 10 -> 2 test, then 8 -> 2 + 6
    again = image_folder(str(tmp_path), image_size=8, channels=3, classes=["dog", "cat"], test_fraction=0.2, seed=5)
    assert torch.equal(again.test.x, ds.test.x)  # the public test hold-out does not move with the run's seed


def test_resize_maps_other_sizes_to_the_declared_size(tmp_path):
    png_folder(tmp_path, size=12)
    with pytest.raises(ConfigError, match=r"000\.png: is 12x12 but the declared dataset.image_size is 8x8"):
        image_folder(str(tmp_path), test_fraction=0.25, **DECLARED)
    ds = image_folder(str(tmp_path), test_fraction=0.25, resize=True, **DECLARED)
    assert ds.image_shape == (1, 8, 8) and float(ds.test.x.max()) <= 1.0


@pytest.mark.parametrize("fault, match", [
    ("range", r"1/000\.png: has pixel values outside the declared dataset.pixel_range=\[0, 100\]"),
    ("extra_class", r"class folder\(s\) \['3'\] that are not declared"),
    ("missing_class", r"no folder for the declared class\(es\) \['2'\]"),
    ("rgb", r"2/001\.png: image mode RGB \(3 channel\(s\)\) but dataset.channels=1"),
    ("alpha", r"0/000\.png: has an alpha channel"),
    ("broken", r"1/003\.png: cannot be read as an image"),
    ("no_test", r"no test data: set dataset.test_path"),
    ("no_test_folder", r"dataset.test_path: .*nowhere does not exist; check the path"),
])
def test_image_folder_faults_name_the_file_and_the_fix(tmp_path, fault, match):
    png_folder(tmp_path)
    kw = {**DECLARED, "test_fraction": 0.25}
    if fault == "range":
        kw["pixel_range"] = [0, 100]
        Image.fromarray(np.full((8, 8), 200, np.uint8)).save(tmp_path / "1" / "000.png")
        Image.fromarray(np.full((8, 8), 50, np.uint8)).save(tmp_path / "0" / "000.png")
        for p in tmp_path.glob("*/*.png"):
            if p.name != "000.png" and p.parent.name in "01":  # class 2 keeps its images: no class is empty
                p.unlink()
    elif fault == "extra_class":
        png_folder(tmp_path, classes=("3",))
    elif fault == "missing_class":
        for p in (tmp_path / "2").iterdir():
            p.unlink()
        (tmp_path / "2").rmdir()
    elif fault == "rgb":
        Image.fromarray(np.zeros((8, 8, 3), np.uint8), "RGB").save(tmp_path / "2" / "001.png")
    elif fault == "alpha":
        Image.fromarray(np.zeros((8, 8, 4), np.uint8), "RGBA").save(tmp_path / "0" / "000.png")
    elif fault == "broken":
        (tmp_path / "1" / "003.png").write_bytes(b"not a png")
    elif fault == "no_test":
        kw.pop("test_fraction")
    elif fault == "no_test_folder":
        kw = {**DECLARED, "test_path": str(tmp_path / "nowhere")}
    with pytest.raises(ConfigError, match=match):
        image_folder(str(tmp_path), **kw)


def test_arrays_accept_npz_and_npy_folder_in_three_layouts(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (10, 8, 8)).astype(np.uint8)
    y = np.arange(10) % 3
    np.savez(tmp_path / "train.npz", x=x, y=y)
    (tmp_path / "test").mkdir()
    np.save(tmp_path / "test" / "x.npy", x[:4, :, :, None].astype(np.float32))  # (n, H, W, C)
    np.save(tmp_path / "test" / "y.npy", y[:4])
    ds = arrays(str(tmp_path / "train.npz"), test_path=str(tmp_path / "test"), pixel_range=[0, 255], **DECLARED)
    assert ds.name == "arrays" and ds.image_shape == (1, 8, 8) and len(ds.private) == 10
    assert torch.allclose(ds.test.x[:, 0], torch.from_numpy(x[:4] / 255.0).float())
    assert ds.test.y.tolist() == [0, 1, 2, 0]
    np.savez(tmp_path / "nchw.npz", x=x[:, None] / 255.0, y=y)
    ds = arrays(str(tmp_path / "nchw.npz"), pixel_range=[0, 1], test_fraction=0.3, **DECLARED)
    assert len(ds.test) == 3 and len(ds.private) == 7


@pytest.mark.parametrize("fault, match", [
    ("range", r"train\.npz: record 6 has values outside the declared dataset.pixel_range=\[0, 1\]; fix"),
    ("nan", r"train\.npz: record 2 holds a NaN or an infinite value; fix or remove the record"),
    ("label", r"train\.npz: labels must be in 0\.\.2 \(dataset.classes declares 3\); record 4 is not"),
    ("shape", r"train\.npz: records have shape \(1, 9, 9\), but the declared"),
    ("keys", r"train\.npz holds arrays \['images', 'y'\], not x and y"),
    ("missing", r"dataset.path: .*missing\.npz does not exist"),
])
def test_arrays_faults_name_the_file_and_the_record(tmp_path, fault, match):
    x, y = np.random.default_rng(0).random((8, 1, 8, 8)), np.arange(8) % 3
    arrs = {"x": x, "y": y}
    if fault == "range":
        x[6, 0, 3, 3] = 1.5
    elif fault == "nan":
        x[2, 0, 0, 0] = np.nan
    elif fault == "label":
        y[4] = 3
    elif fault == "shape":
        arrs["x"] = np.zeros((8, 1, 9, 9))
    elif fault == "keys":
        arrs = {"images": x, "y": y}
    np.savez(tmp_path / "train.npz", **arrs)
    with pytest.raises(ConfigError, match=match):
        arrays(str(tmp_path / ("missing.npz" if fault == "missing" else "train.npz")), pixel_range=[0, 1],
               test_fraction=0.25, **DECLARED)


@pytest.mark.parametrize("bad, match", [
    ({"image_size": 0}, "dataset.image_size must be"), ({"channels": 2}, "dataset.channels must be 1"),
    ({"classes": 1}, "dataset.classes must be"), ({"pixel_range": [1, 0]}, "low < high"),
    ({"test_path": "t", "test_fraction": 0.2}, "either dataset.test_path or dataset.test_fraction"),
])
def test_declared_facts_are_checked_before_any_file_is_read(bad, match):
    kw = {**DECLARED, "pixel_range": [0, 255], "test_fraction": 0.2, **bad}
    with pytest.raises(ConfigError, match=match):
        arrays("/nonexistent.npz", **kw)


def generator_presets() -> list[str]:
    """Every preset whose model is a generator (not a classifier, not domain adaptation)."""
    from omegaconf import OmegaConf

    generators = {"dp_class_gaussian", "dpsinkhorn", "dpswd_generator", "dpswflow", "dpswflow_r", "dpswgen"}
    out = []
    for p in sorted((CONFIGS / "experiment").glob("*.yaml")):
        defaults = OmegaConf.load(p).get("defaults", [])
        if any(str(d).replace(" ", "") in {f"{{'override/model':'{g}'}}" for g in generators} for d in defaults):
            out.append(p.stem)
    return out


@pytest.mark.slow  # long: `make test-all` runs it
def test_every_generator_preset_composes_with_own_data_and_keeps_its_dataset_settings():
    presets = generator_presets()
    assert len(presets) >= 25 and "digits_moments" in presets and "mnist_dpswd" in presets
    for preset in presets:
        GlobalHydra.instance().clear()
        pinned = compose_cfg([f"experiment={preset}"]).dataset
        GlobalHydra.instance().clear()
        cfg = compose_cfg([f"experiment={preset}", "dataset=image_folder", "dataset.path=p"])
        assert cfg.dataset._target_ == "dpgen.data.own.image_folder", preset
        assert cfg.dataset.public_fraction == pinned.public_fraction, preset  # what the preset pins still applies


def _run(overrides: list[str], tmp_path: Path) -> dict:
    from dpgen.pipeline import run

    GlobalHydra.instance().clear()
    cfg = compose_cfg(overrides + ["logger=local", "evaluator=none", "trainer.progress=false"], out_dir=tmp_path / "run")
    return run(cfg)


def test_default_and_a_dpswd_preset_train_on_a_png_folder(tmp_path):
    png_folder(tmp_path / "digits", n_per_class=6)
    own = ["dataset=image_folder", f"dataset.path={tmp_path / 'digits'}", "dataset.test_fraction=0.25",
           "dataset.image_size=8", "dataset.channels=1", "dataset.classes=3"]
    res = _run(own, tmp_path / "default")
    assert res["dataset"] == "image_folder" and res["privacy"]["epsilon"] <= 10.0
    assert "n_private" not in res  # add/remove: the private record count is not published
    res = _run(["experiment=mnist_dpswd", *own, "trainer.max_steps=2", "model.batch_size=6",
                "accountant.delta=1e-2"], tmp_path / "dpswd")
    assert res["dataset"] == "image_folder" and res["privacy"]["private_steps"] == 2


def test_the_readme_own_data_command_evaluates_at_the_folders_public_size(tmp_path):
    """The MNIST preset's evaluation on a small folder: sized to the public test split (not 60,000 synthetic
    samples), the FID switched off before training with a line naming the domain extractor, no private count."""
    from dpgen.pipeline import run

    png_folder(tmp_path / "d", n_per_class=40)
    own = ["experiment=mnist_dpswd", "dataset=image_folder", f"dataset.path={tmp_path / 'd'}",
           "dataset.test_fraction=0.25", "dataset.image_size=8", "dataset.channels=1", "dataset.classes=3",
           "trainer.max_steps=1", "model.batch_size=6", "accountant.delta=1e-3", "logger=local",
           "trainer.progress=false", "evaluator.classifiers=[logreg]", "evaluator.grid_per_class=1",
           "evaluator.class_grids=false"]
    GlobalHydra.instance().clear()
    m = run(compose_cfg(own, out_dir=tmp_path / "run"))["metrics"]
    assert m["n_synthetic"] == 300  # 30 test images held out at 0.25 -> 90, below the floor of 100 per class
    assert m["eval_sized_to"] == "the test split's 30 images held out as dataset.test_fraction=0.25"
    assert "evaluator.fid.extractor=domain" in m["fid_skipped"] and "fid" not in m
    assert "acc_logreg" in m


def test_a_size_the_preset_cannot_make_names_both(tmp_path):
    png_folder(tmp_path / "d", size=6)
    own = ["dataset=image_folder", f"dataset.path={tmp_path / 'd'}", "dataset.test_fraction=0.25",
           "dataset.image_size=6", "dataset.channels=1", "dataset.classes=3"]
    with pytest.raises(ConfigError, match=r"model.generator \(ConvCondGen\) needs image sides divisible by 4, but the "
                                          r"dataset's images are 1x6x6"):
        _run(["experiment=mnist_dpswd", *own, "trainer.max_steps=1"], tmp_path / "r")


def test_train_py_prints_one_error_line_naming_the_bad_file(tmp_path):
    png_folder(tmp_path / "d")
    Image.fromarray(np.zeros((9, 9), np.uint8)).save(tmp_path / "d" / "1" / "002.png")
    r = train_here(["dataset=image_folder", f"dataset.path={tmp_path / 'd'}", "dataset.test_fraction=0.25",
                    "dataset.image_size=8", "dataset.channels=1", "dataset.classes=3", "logger=local",
                    f"hydra.run.dir={tmp_path / 'run'}"])
    assert r.returncode == 2, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "002.png: is 9x9 but the declared dataset.image_size is 8x8" in last
    assert "Traceback" not in r.stderr


SMALL = {"batch_size": 8, "ae_batch_size": 8, "ae_steps": 2, "autoencoder_cache": "null", "n_particles": 100}


def _size_for(preset: str) -> tuple[int, int, int]:
    """(side, channels, classes) of a fake folder the preset's generator can make (docs/guides/own-data.md)."""
    if preset.startswith("celeba32"):
        return 32, 3, 2
    if preset.startswith("celeba"):
        return 64, 3, 2
    if preset.startswith(("digits", "toy")):
        return 8, 1, 3
    return 28, 1, 3


# composed generators that get keys of the model group's default generator (fails on any dataset)
_BROKEN = {"celeba_dpswd": "DCGANDecoder gets model.generator.hidden", "celeba32_dpsinkhorn":
           "BigGANCondGenerator gets model.generator.embed_dim"}


@pytest.mark.slow
@pytest.mark.parametrize("preset", [pytest.param(p, marks=pytest.mark.xfail(raises=TypeError, strict=True,
                                                                             reason=_BROKEN[p]))
                                    if p in _BROKEN else p for p in generator_presets()])
def test_every_generator_preset_trains_one_step_on_a_png_folder(tmp_path, preset):
    side, channels, k = _size_for(preset)
    png_folder(tmp_path / "d", n_per_class=60, size=side, mode="L" if channels == 1 else "RGB",
                 classes=tuple(str(c) for c in range(k)))
    own = [f"experiment={preset}", "dataset=image_folder", f"dataset.path={tmp_path / 'd'}",
           "dataset.test_fraction=0.25", f"dataset.image_size={side}", f"dataset.channels={channels}",
           f"dataset.classes={k}", "trainer.max_steps=1", "accountant.delta=1e-3"]
    GlobalHydra.instance().clear()
    model = compose_cfg(own).model
    own += [f"model.{key}={value}" for key, value in SMALL.items() if key in model]  # a few records, one step
    assert _run(own, tmp_path)["dataset"] == "image_folder"
