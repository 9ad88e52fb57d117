"""Own data that cannot be trained on as declared: one error naming the file or setting and the fix,
before any private step, without a private count."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hydra.core.global_hydra import GlobalHydra
from PIL import Image

from dpgen.data.own import arrays, image_folder
from dpgen.errors import ConfigError
from tests.helpers.configs import compose_cfg

DECLARED = {"image_size": 8, "channels": 1, "classes": 3}


def write_folder(root: Path, n_per_class: int = 3, classes=("0", "1", "2")) -> Path:
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(n_per_class):
            Image.fromarray(rng.integers(0, 256, (8, 8)).astype(np.uint8)).save(root / name / f"{i:03d}.png")
    return root


def test_an_empty_declared_class_folder_is_refused(tmp_path):
    write_folder(tmp_path, classes=("0", "1"))
    (tmp_path / "2").mkdir()
    with pytest.raises(ConfigError, match=r"dataset.path: the class folder .*2 holds no images; a declared class "
                                          r"without images cannot be trained"):
        image_folder(str(tmp_path), test_fraction=0.25, **DECLARED)


def test_a_declared_class_with_no_record_in_arrays_is_refused(tmp_path):
    np.savez(tmp_path / "x.npz", x=np.zeros((9, 8, 8), np.uint8), y=np.arange(9) % 2)
    with pytest.raises(ConfigError, match=r"x\.npz: no record has the declared class\(es\) \['2'\]"):
        arrays(str(tmp_path / "x.npz"), pixel_range=[0, 255], test_fraction=0.25, **DECLARED)


def test_a_file_that_is_not_an_image_is_refused_and_hidden_files_are_skipped(tmp_path):
    write_folder(tmp_path)
    (tmp_path / "1" / ".DS_Store").write_bytes(b"\0")  # the file browser's: skipped
    assert len(image_folder(str(tmp_path), test_fraction=0.25, **DECLARED).private) == 7
    (tmp_path / "1" / "notes.txt").write_text("label me")
    with pytest.raises(ConfigError, match=r"dataset.path: .*1/notes\.txt is not an image file \(dpgen reads \.png"):
        image_folder(str(tmp_path), test_fraction=0.25, **DECLARED)


def test_a_nan_pixel_is_named_as_such(tmp_path):
    write_folder(tmp_path)
    a = np.full((8, 8), 0.5, np.float32)
    a[2, 2] = np.nan
    Image.fromarray(a, "F").save(tmp_path / "0" / "009.tif")
    with pytest.raises(ConfigError, match=r"0/009\.tif: holds a NaN or an infinite pixel value"):
        image_folder(str(tmp_path), test_fraction=0.25, **DECLARED)


def test_a_batch_size_the_private_split_cannot_fill_is_one_error_without_the_count(tmp_path):
    from dpgen.pipeline import run

    write_folder(tmp_path / "d")  # 9 images: 7 private after the test hold-out
    GlobalHydra.instance().clear()
    cfg = compose_cfg(["experiment=mnist_dpswd", "dataset=image_folder", f"dataset.path={tmp_path / 'd'}",
                       "dataset.test_fraction=0.25", "dataset.image_size=8", "dataset.channels=1", "dataset.classes=3",
                       "accountant.delta=1e-2", "logger=local", "evaluator=none", "trainer.progress=false"],
                      out_dir=tmp_path / "run")
    with pytest.raises(ConfigError) as err:
        run(cfg)
    message = str(err.value)
    assert message.startswith("model.batch_size=100 is larger than the private training split") and "\n" not in message
    assert not re.search(r"\b(7|8|9)\b", message)  # N (and N + 1, the total) are not printed
    assert not (tmp_path / "run" / "checkpoints").exists()  # refused before any private step
