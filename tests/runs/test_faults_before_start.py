"""Faults found before anything is written, each one ``error:`` line naming the setting, exit 2, no folder made:
a device the machine lacks (``trainer.device=cuda`` / ``evaluator.device=cuda`` without a GPU, ``--nproc`` with
fewer GPUs than processes) and a step limit that leaves no model to release."""

from __future__ import annotations

import pytest
import torch

from dpgen.cli import main as dpgen_main
from tests.helpers.runs import train_here

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.parametrize("setting", ["trainer.device", "evaluator.device"])
def test_a_gpu_setting_without_a_gpu_is_one_line_and_no_folder(no_gpu, tmp_path, setting):
    folder = tmp_path / "outputs" / "run"
    res = train_here(["experiment=digits_moments", f"{setting}=cuda", f"hydra.run.dir={folder}"], cwd=tmp_path)
    err = res.stderr.strip()
    assert res.returncode == 2 and "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"error: {setting}=cuda but this machine has no CUDA GPU") and f"{setting}=cpu" in err
    assert not (tmp_path / "outputs").exists()


def test_nproc_on_gpus_checks_the_devices_before_starting_the_processes(no_gpu, tmp_path, monkeypatch, capsys):
    import dpgen.utils.launch as launcher

    started = []
    monkeypatch.setattr(launcher, "launch", lambda *a, **k: started.append(a) or 0)
    code = dpgen_main(["train", "--nproc", "2", "experiment=digits_moments", "trainer.device=cuda",
                       f"hydra.run.dir={tmp_path / 'outputs' / 'run'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not started and err.startswith("error: trainer.device=cuda but this machine has no CUDA GPU")
    assert not (tmp_path / "outputs").exists()


def test_nproc_with_fewer_gpus_than_processes_names_both(monkeypatch, tmp_path):
    import dpgen.utils.settings as settings
    from dpgen.preflight import unavailable_devices
    from tests.helpers.configs import compose_cfg

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(settings, "certainly_no_cuda_gpu", lambda: False)  # a machine with a GPU driver: torch says
    cfg = compose_cfg(["experiment=digits_moments", "trainer.device=cuda"], out_dir=tmp_path)
    problem = unavailable_devices(cfg, nproc=2)
    assert problem.startswith("dpgen train --nproc 2 with trainer.device=cuda needs a GPU per process")
    assert "--nproc 1" in problem and unavailable_devices(cfg, nproc=1) is None


def test_max_steps_zero_for_a_one_release_method_is_one_line_and_no_folder(tmp_path):
    """The DP class-Gaussian's model is its one release: stopping before it leaves nothing to save (it used to
    write an ε = 0 card, then crash on the missing model)."""
    folder = tmp_path / "outputs" / "run"
    res = train_here(["experiment=digits_moments", "trainer.max_steps=0", "logger=local", f"hydra.run.dir={folder}"],
                     cwd=tmp_path)
    err = res.stderr.strip().splitlines()[-1]
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert err.startswith("error: trainer.max_steps=0 stops DP class-Gaussian before its first release")
    assert not (tmp_path / "outputs").exists()


def test_a_device_is_refused_before_torch_only_when_that_is_certain(monkeypatch):
    """Without torch a GPU is refused only where none can be there (no driver, every GPU hidden); elsewhere torch
    has the last word (None here)."""
    import dpgen.utils.settings as settings

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert settings.certainly_no_cuda_gpu()
    assert settings.device_problem_before_torch("cuda:1", "trainer.device").startswith(
        "trainer.device=cuda:1 but this machine has no CUDA GPU")
    monkeypatch.setattr(settings, "certainly_no_cuda_gpu", lambda: False)
    assert settings.device_problem_before_torch("cuda", "trainer.device") is None  # torch says
    assert settings.device_problem_before_torch("cpu:0", "trainer.device") is None
    assert settings.device_problem_before_torch("auto", "evaluator.device") is None
    assert "dpgen runs on cpu, cuda or mps" in settings.device_problem_before_torch("gpu", "evaluator.device")
