"""Run logger: metrics.csv appends, W&B images are real pixels, W&B charts keyed by ε, resume."""

from __future__ import annotations

import csv
import json
import sys
import threading
import types

import numpy as np
import pytest
import torch

from dpgen.errors import ConfigError
from dpgen.logging import RunLogger
from dpgen.logging.run_logger import LocalSink, image_grid, save_png, to_uint8_image


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------- metrics.csv
def test_metrics_csv_appends_one_line_per_call_without_rewriting(tmp_path, monkeypatch):
    sink = LocalSink(tmp_path)
    sink.log_metrics({"loss": 1.0, "epsilon": 0.1}, step=1)
    rewrites = []
    monkeypatch.setattr(sink, "_widen", lambda new: rewrites.append(new))
    for step in range(2, 50):
        sink.log_metrics({"loss": 1.0 / step, "epsilon": 0.1 * step}, step=step)
    assert rewrites == []  # same columns: appended, never rewritten
    rows = _rows(tmp_path / "metrics.csv")
    assert len(rows) == 49 and rows[-1]["step"] == "49" and float(rows[-1]["epsilon"]) == pytest.approx(4.9)


def test_metrics_csv_new_column_later_widens_the_header_and_keeps_old_rows(tmp_path):
    sink = LocalSink(tmp_path)
    sink.log_metrics({"loss": 1.0}, step=1)
    sink.log_metrics({"loss": 0.5, "acc": 0.3}, step=2)
    sink.log_metrics({"loss": 0.25}, step=3)
    rows = _rows(tmp_path / "metrics.csv")
    assert list(rows[0]) == ["step", "loss", "acc"]
    assert [r["acc"] for r in rows] == ["", "0.3", ""] and [r["loss"] for r in rows] == ["1.0", "0.5", "0.25"]


def test_metrics_csv_resume_appends_to_the_same_file_and_a_fresh_run_starts_over(tmp_path):
    LocalSink(tmp_path).log_metrics({"loss": 1.0, "acc": 0.1}, step=1)
    resumed = LocalSink(tmp_path, append=True)
    resumed.log_metrics({"loss": 0.5}, step=2)
    resumed.log_metrics({"loss": 0.4, "new": 7}, step=3)
    rows = _rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in rows] == ["1", "2", "3"] and rows[0]["acc"] == "0.1" and rows[2]["new"] == "7"
    LocalSink(tmp_path, append=False).log_metrics({"loss": 9.0}, step=1)
    assert [r["loss"] for r in _rows(tmp_path / "metrics.csv")] == ["9.0"]


# ---------------------------------------------------------------------------- images
@pytest.mark.parametrize("shape,nrow", [((20, 1, 8, 8), 10), ((7, 3, 5, 4), 3), ((1, 1, 6, 6), 10), ((4, 1, 3, 3), 8)])
def test_image_grid_and_png_are_torchvisions_pixel_for_pixel(tmp_path, shape, nrow):
    """The run's PNGs are written without importing torchvision: the same grid and bytes as its save_image."""
    from PIL import Image
    from torchvision.utils import make_grid, save_image

    images = torch.rand(shape, generator=torch.Generator().manual_seed(len(shape) + nrow))
    assert torch.equal(image_grid(images, nrow=nrow), make_grid(images, nrow=nrow, padding=2, pad_value=1.0))
    save_png(images, tmp_path / "ours.png", nrow=nrow)
    save_image(images, tmp_path / "theirs.png", nrow=nrow, padding=2, pad_value=1.0)
    assert np.array_equal(np.array(Image.open(tmp_path / "ours.png")), np.array(Image.open(tmp_path / "theirs.png")))


def test_to_uint8_image_scales_unit_floats_to_bytes():
    grid = torch.linspace(0, 1, 3 * 4 * 5).view(3, 4, 5)
    arr = to_uint8_image(grid)
    assert arr.dtype == np.uint8 and arr.shape == (4, 5, 3)
    assert arr.min() == 0 and arr.max() == 255 and len(np.unique(arr)) > 50
    gray = to_uint8_image(torch.full((1, 2, 2), 0.5))
    assert gray.shape == (2, 2) and int(gray[0, 0]) == 128


def test_wandb_offline_image_files_are_not_blank(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from PIL import Image

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    images = torch.linspace(0, 1, 20 * 8 * 8).view(20, 1, 8, 8)
    logger.log_images("samples", images, nrow=10)
    logger.finish()
    files = list((tmp_path / "wandb").glob("offline-run-*/files/media/images/**/*.png"))
    assert files, "no image written by the offline W&B run"
    arr = np.array(Image.open(files[0]))
    assert arr.dtype == np.uint8 and arr.max() == 255 and len(np.unique(arr)) > 100  # not 0/1 pixels


def test_the_console_names_the_offline_wandb_folder_and_the_command_that_uploads_it(tmp_path, monkeypatch, capsys):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    logger.log_metrics({"loss": 1.0}, step=1)
    logger.finish()
    (folder,) = (tmp_path / "wandb").glob("offline-run-*")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("W&B")]
    assert lines == [f"W&B (offline): the run is in {folder}; upload it with `wandb sync {folder}`"]


def test_the_console_names_an_online_wandb_run_by_its_url():
    from types import SimpleNamespace

    from dpgen.logging.run_logger import wandb_location

    run = SimpleNamespace(url="https://wandb.ai/me/dpgen/runs/abc123", settings=SimpleNamespace(sync_dir="/x"))
    assert wandb_location(run) == "W&B: the run is at https://wandb.ai/me/dpgen/runs/abc123"


# ---------------------------------------------------------------------------- W&B calls (fake module)
class _FakeRun:
    def __init__(self, kwargs):
        self.kwargs, self.id = kwargs, kwargs.get("id") or "fakeid01"
        self.thread = threading.current_thread()
        self.defined, self.logged, self.summary, self.finished = {}, [], {}, False

    def define_metric(self, name, step_metric=None, summary=None):
        self.defined[name] = step_metric

    def log(self, row, step=None):
        self.logged.append((row, step))

    def finish(self):
        self.finished = True


@pytest.fixture
def fake_wandb(monkeypatch):
    runs: list[_FakeRun] = []
    mod = types.ModuleType("wandb")

    def init(**kwargs):
        runs.append(_FakeRun(kwargs))
        return runs[-1]

    class Image:
        def __init__(self, data, caption=None):
            self.data, self.caption = data, caption

    mod.init, mod.Image, mod.Settings = init, Image, lambda **kw: kw
    monkeypatch.setitem(sys.modules, "wandb", mod)
    return runs


def test_wandb_charts_are_keyed_by_epsilon_and_summary_is_grouped(tmp_path, fake_wandb):
    logger = RunLogger(tmp_path, run_config={"experiment_name": "e", "trainer": {"resume": False}},
                       wandb={"mode": "offline"})
    logger.log_metrics({"loss": 1.0, "epsilon": 0.5}, step=10)
    logger.log_images("samples_class3", torch.rand(4, 1, 8, 8), nrow=2)
    results = {"experiment": "e", "metrics": {"acc_logreg": 0.7, "fid": 50.0, "fid_n_generated": 2000,
                                              "fid_extractor": "domain"},
               "privacy": {"epsilon": 0.8, "calibrating_accountant": "pld", "epsilon_rdp": 0.9, "epsilon_pld": 0.8,
                           "target_epsilon": 1.0, "delta": 1e-5},
               "train": {"guarantee": "rigorous", "noise_std": 2.0, "train_time_s": 3.0}, "runtime_s": 12.0}
    logger.log_summary(results)
    logger.finish()
    run = fake_wandb[0]
    assert run.kwargs["group"] == "e" and run.finished
    assert run.defined["loss"] == "epsilon" and run.defined["eval/acc_logreg"] == "epsilon"  # the calibrating ε
    keys = {k for row, _ in run.logged for k in row}
    assert {"loss", "epsilon", "samples/class3", "eval/acc_logreg", "eval/fid"} <= keys
    assert next(row["epsilon"] for row, _ in run.logged if "eval/acc_logreg" in row) == 0.8  # PLD, not RDP
    assert "eval/fid_n_generated" not in keys  # provenance is never charted
    image = next(row["samples/class3"] for row, _ in run.logged if "samples/class3" in row)
    assert image.data.dtype == np.uint8 and image.data.size > 0 and image.data.max() > 1
    s = run.summary
    assert s["privacy/guarantee"] == "rigorous" and s["privacy/epsilon"] == 0.8 and s["privacy/epsilon_rdp"] == 0.9
    assert not any(k.endswith("_time_s") or "runtime" in k for k in s)  # timings depend on private batch sizes
    assert s["utility/acc_logreg"] == 0.7 and s["provenance/fid_n_generated"] == 2000
    assert "utility/fid_n_generated" not in s
    assert (tmp_path / "wandb_run_id").read_text().strip() == run.kwargs["id"] == run.id


def test_resume_continues_the_wandb_run_and_accumulates_runtime(tmp_path, fake_wandb):
    cfg = {"experiment_name": "e", "trainer": {"resume": False}}
    first = RunLogger(tmp_path, run_config=cfg, wandb={"mode": "offline"})
    first.log_metrics({"loss": 1.0, "epsilon": 0.5}, step=1)
    first.finish()  # interrupted before log_summary: its time still counts
    (tmp_path / "private_timings.json").write_text('{"segments_s": [30.0]}')
    second = RunLogger(tmp_path, run_config={**cfg, "trainer": {"resume": True}}, wandb={"mode": "offline"})
    results = {"experiment": "e", "metrics": {}, "privacy": {"epsilon": 1.0, "target_epsilon": 1.0,
                                                             "delta": 1e-5}, "runtime_s": 10.0}
    second.log_summary(results)
    second.finish()
    assert fake_wandb[1].kwargs["id"] == fake_wandb[0].id and fake_wandb[1].kwargs["resume"] == "allow"
    assert fake_wandb[0].kwargs["resume"] is None
    assert results["runtime_s"] == pytest.approx(40.0) and results["runtime_segments_s"] == [30.0, 10.0]
    assert "runtime_s" not in json.loads((tmp_path / "results.json").read_text())  # private: not published
    assert json.loads((tmp_path / "private_timings.json").read_text())["segments_s"] == [30.0, 10.0]
    third = RunLogger(tmp_path, run_config=cfg, wandb={"mode": "offline"})  # not a resume: a new run, new clock
    third.log_summary(r := {"experiment": "e", "metrics": {}, "privacy": {}, "runtime_s": 5.0})
    third.finish()
    assert fake_wandb[2].kwargs["id"] != fake_wandb[0].id and fake_wandb[2].kwargs["resume"] is None
    assert r["runtime_s"] == 5.0


def test_non_private_metrics_are_charted_by_step_not_by_infinite_epsilon(tmp_path, fake_wandb):
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    logger.log_metrics({"loss": 1.0, "epsilon": float("inf")}, step=1)
    logger.finish()
    assert "loss" not in fake_wandb[0].defined


def test_wandb_opens_in_the_background_after_training_and_never_during_it(tmp_path, fake_wandb):
    """No W&B run exists while training goes on; open_after_training() opens it on another thread and sends the
    training history; finish() waits for it, then sends the grids and the summary and closes the run."""
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    logger.log_metrics({"loss": 1.0, "epsilon": 0.5}, step=1)
    logger.log_metrics({"loss": 0.5, "epsilon": 0.9}, step=2)
    assert not fake_wandb  # nothing sent while the run trains
    logger.open_after_training()
    logger.sinks[-1]._opener.join()
    assert len(fake_wandb) == 1 and not fake_wandb[0].finished
    assert fake_wandb[0].thread is not threading.main_thread()
    assert [step for _, step in fake_wandb[0].logged] == [1, 2]  # the history, while the evaluation runs
    logger.log_images("samples", torch.rand(4, 1, 8, 8))
    logger.log_summary({"experiment": "e", "metrics": {"acc_logreg": 0.7},
                        "privacy": {"epsilon": 0.9, "target_epsilon": 1.0, "delta": 1e-5}})
    logger.finish()
    assert len(fake_wandb) == 1 and fake_wandb[0].finished
    steps = [step for _, step in fake_wandb[0].logged]
    assert steps[:2] == [1, 2] and steps.count(1) == 1 and steps.count(2) == 1  # each row once
    assert any("samples" in row for row, _ in fake_wandb[0].logged)
    assert any("eval/acc_logreg" in row for row, _ in fake_wandb[0].logged)


def test_a_run_whose_training_never_ends_opens_wandb_only_at_finish(tmp_path, fake_wandb):
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    logger.log_metrics({"loss": 1.0, "epsilon": 0.5}, step=1)
    assert not fake_wandb
    logger.finish()
    assert len(fake_wandb) == 1 and fake_wandb[0].finished and [s for _, s in fake_wandb[0].logged] == [1]
    assert fake_wandb[0].thread is threading.main_thread()


def test_a_login_fault_found_in_the_background_is_raised_by_finish(tmp_path, fake_wandb, monkeypatch):
    class UsageError(Exception):
        pass

    def refuse(**kwargs):
        raise UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(sys.modules["wandb"], "init", refuse)
    monkeypatch.setattr(sys.modules["wandb"], "errors", types.SimpleNamespace(UsageError=UsageError), raising=False)
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    logger.log_metrics({"loss": 1.0, "epsilon": 0.5}, step=1)
    logger.open_after_training()
    with pytest.raises(ConfigError, match="not logged in"):
        logger.finish()
