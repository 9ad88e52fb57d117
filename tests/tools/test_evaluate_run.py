"""``dpgen evaluate <run>``: re-evaluates a run from where the run found its data (not from the folder it is
called in), keeps (or, for a run stopped before its results, rebuilds) the privacy section, and a missing
dataset is one ``error:`` line naming what is missing."""

from __future__ import annotations

import json
import shutil

import pytest
from omegaconf import OmegaConf

from dpgen.cli import main as dpgen_main
from dpgen.pipeline import run
from tests.helpers import fakedata
from tests.helpers.configs import compose_cfg

EVAL = ["evaluator.fid.enabled=false", "evaluator.classifiers=[logreg]", "evaluator.n_synthetic=200",
        "evaluator.class_grids=false"]


@pytest.fixture
def usps_run(tmp_path, monkeypatch):
    """A default-method run on a (fake) USPS under its own data root, stopped before its results.json, with
    the ``.hydra/config.yaml`` record a ``python train.py`` run writes (paths as interpolations)."""
    root = fakedata.make(tmp_path / "usps_root", ("usps",))
    out = tmp_path / "run"
    common = ["dataset=usps", "logger=local", "trainer.progress=false"]
    results = run(compose_cfg([*common, "evaluator=none"], out_dir=out, data_root=root))
    cfg = compose_cfg(common, out_dir=out, data_root=root)  # the record: the preset's own evaluator
    cfg.paths = {"data_root": "${oc.env:DPGEN_DATA_ROOT,${hydra:runtime.cwd}/data}",
                 "output_dir": "${hydra:runtime.output_dir}"}
    (out / ".hydra").mkdir()
    OmegaConf.save(cfg, out / ".hydra" / "config.yaml")
    (out / "results.json").unlink()  # e.g. a run killed during its evaluation
    monkeypatch.delenv("DPGEN_DATA_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./data here: only the root the run recorded holds the data
    return out, root, results


def test_evaluate_reads_the_recorded_data_root_and_rebuilds_the_privacy_section(usps_run, capsys):
    out, _, trained = usps_run
    assert dpgen_main(["evaluate", str(out), *EVAL]) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["metrics"]["acc_logreg"] > 0.0 and results["dataset"] == "usps"
    assert results["privacy"]["epsilon"] == pytest.approx(trained["privacy"]["epsilon"])  # from the run's ledger
    assert results["summary"]["privacy"]["guarantee"] == "rigorous"


def test_evaluate_without_the_data_is_one_error_line_naming_it(usps_run, tmp_path, capsys):
    out, root, _ = usps_run
    shutil.rmtree(root)
    assert dpgen_main(["evaluate", str(out), *EVAL]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: dataset 'usps' not found under data root") and "\n" not in err
    assert str(root) in err and "paths.data_root" in err and "Traceback" not in err
    assert not (out / "results.json").exists()  # nothing half-written


def _record_device(out, device: str) -> None:
    path = out / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(path)
    cfg.trainer.device = device
    OmegaConf.save(cfg, path)


def test_a_run_recorded_on_a_gpu_this_machine_lacks_is_evaluated_on_the_cpu(usps_run, capsys, monkeypatch):
    import torch

    out, _, _ = usps_run
    _record_device(out, "cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dpgen_main(["evaluate", str(out), *EVAL]) == 0, capsys.readouterr().err
    assert "trainer.device=cuda, which this machine lacks: evaluating on the CPU" in capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["evaluated"]["device"] == "cpu" and results["metrics"]["acc_logreg"] > 0.0


@pytest.mark.parametrize("setting", ["trainer.device", "evaluator.device"])
def test_asking_evaluate_for_a_gpu_this_machine_lacks_is_one_line_naming_the_setting(usps_run, capsys, monkeypatch,
                                                                                      setting):
    import torch

    out, _, _ = usps_run
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert dpgen_main(["evaluate", str(out), *EVAL, f"{setting}=cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {setting}=cuda but this machine has no CUDA GPU") and "\n" not in err
    assert f"{setting}=cpu" in err and not (out / "results.json").exists()


def test_a_read_only_run_folder_is_one_line_with_a_fix_that_is_not_the_same_command(usps_run, capsys, monkeypatch):
    import os

    out, _, _ = usps_run
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(out) else real_access(p, mode))
    assert dpgen_main(["evaluate", str(out), *EVAL]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot write the run folder {out}") and "\n" not in err
    assert "writable copy (cp -r" in err and "Traceback" not in err and not (out / "results.json").exists()


def test_a_run_trained_without_an_evaluator_says_so_and_evaluates_the_one_chosen(usps_run, capsys):
    out, _, _ = usps_run
    path = out / ".hydra" / "config.yaml"
    cfg = OmegaConf.load(path)
    cfg.evaluator = {"_target_": "dpgen.eval.NoEvaluator"}  # what evaluator=none records
    OmegaConf.save(cfg, path)
    assert dpgen_main(["evaluate", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {out} was trained with evaluator=none: there is nothing to evaluate again")
    assert "evaluator=generative" in err and "\n" not in err and not (out / "results.json").exists()
    assert dpgen_main(["evaluate", str(out), "evaluator=generative", *EVAL]) == 0, capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["metrics"]["acc_logreg"] > 0.0
    assert dpgen_main(["evaluate", str(out), "evaluator=generativ"]) == 2
    assert "no such evaluator; choose one of" in capsys.readouterr().err
