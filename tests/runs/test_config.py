"""Config composition and validation: bad values fail before any data is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import MissingConfigException

from dpgen.config import validate
from dpgen.errors import ConfigError
from dpgen.pipeline import run
from tests.helpers.configs import CONFIGS, compose_cfg

PRESETS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))


def test_required_presets_exist():
    for name in ["digits_dpswd", "mnist_dpswd", "mnist_dpswd_clt", "fmnist_dpswd", "fmnist_dpswd_clt", "mnist_swd",
                 "celeba_dpswd", "toy_dpswd", "digits_moments", "mnist_moments", "mnist_moments_public"]:
        assert name in PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_every_experiment_preset_composes_and_validates(preset):
    cfg = compose_cfg([f"experiment={preset}"], out_dir=Path("unused-output"))
    validate(cfg)
    assert cfg.experiment_name == preset
    assert cfg.model._target_ and cfg.dataset._target_


def test_default_experiment_is_digits_moments():
    cfg = compose_cfg([], out_dir=Path("unused-output"))
    assert cfg.experiment_name == "digits_moments" and cfg.dataset._target_.endswith("digits")
    assert cfg.model._target_.endswith("DPClassGaussian") and cfg.accountant.epsilon == 10.0


def test_unknown_experiment_fails_naming_it():
    with pytest.raises(MissingConfigException, match="nosuch_method"):
        compose_cfg(["experiment=nosuch_method"])


@pytest.fixture
def data_must_not_load(monkeypatch):
    import dpgen.data.datasets as ds

    def boom(*a, **k):
        raise AssertionError("data was loaded before validation")

    monkeypatch.setattr(ds, "digits", boom)


@pytest.mark.parametrize(
    "override,match",
    [("accountant.epsilon=-1", "accountant.epsilon"),
     ("accountant.epsilon=0", "accountant.epsilon"),
     ("accountant.delta=2", "accountant.delta"),
     ("accountant.sampling=shuffle", "accountant.sampling"),
     ("accountant.epsilon=abc", "epsilon"),
     ("trainer.log_every=often", "log_every"),
     ("accountant.delta=???", "accountant.delta"),
     ("accountant.epsilon=null", "model.private=false"),
     ("logger.wandb.mode=sometimes", "logger.wandb.mode")],
)
def test_bad_config_values_raise_before_any_data_is_loaded(override, match, tmp_path, data_must_not_load):
    cfg = compose_cfg([override], out_dir=tmp_path)
    with pytest.raises(ConfigError, match=match):
        run(cfg)


def test_submitit_slurm_launcher_composes():
    cfg = compose_cfg(["hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu"], return_hydra_config=True)
    assert "submitit" in cfg.hydra.launcher._target_.lower()
    assert cfg.hydra.launcher.partition == "gpu"


def test_joblib_launcher_composes():
    cfg = compose_cfg(["hydra/launcher=joblib"], return_hydra_config=True)
    assert "joblib" in cfg.hydra.launcher._target_.lower()


def test_data_dependent_reports_is_a_typed_opt_in_for_poisson_only(tmp_path, data_must_not_load):
    cfg = compose_cfg(["accountant.data_dependent_reports=maybe"], out_dir=tmp_path)
    with pytest.raises(ConfigError, match="data_dependent_reports"):
        run(cfg)
    cfg = compose_cfg(["accountant.data_dependent_reports=true", "accountant.sampling=without_replacement"],
                      out_dir=tmp_path)
    with pytest.raises(ConfigError, match="accountant.data_dependent_reports"):
        run(cfg)
    assert compose_cfg([], out_dir=tmp_path).accountant.data_dependent_reports is False


# -- presets patch only what differs -----------------------------------------
def _presets_module():
    from dpgen import presets

    return presets


@pytest.mark.slow  # a lint of the preset files: ~95 Hydra compositions (20 s); `make test-all` runs it
def test_no_preset_restates_a_value_its_defaults_already_give():
    """Every leaf key of configs/experiment/*.yaml (and of the shared configs/da_dataset/*.yaml) must change
    the composition: compared with the config composed from the file's defaults without its own keys."""
    found = _presets_module().restatements()
    assert not found, "remove these keys (they restate the composed default):\n" + "\n".join(
        f"{f}:{line}: {key}" for f, line, key in found)


@pytest.mark.slow  # a copy of every config file and the lint above
def test_the_restatement_check_flags_a_restated_default(tmp_path):
    import shutil

    tool = _presets_module()
    configs = tmp_path / "configs"
    shutil.copytree(CONFIGS, configs)
    p = configs / "experiment" / "mnist_dpswd.yaml"
    p.write_text(p.read_text() + "accountant:\n  sampling: poisson\nmodel:\n  lr: 0.5\n")
    p = configs / "experiment" / "visda_dpswd.yaml"
    p.write_text(p.read_text() + "optimized_metric: acc_target\n")  # already set by da_dataset/visda.yaml
    shared = configs / "da_dataset" / "visda.yaml"  # the four DA models' default betas
    shared.write_text(shared.read_text().replace("model:\n", "model:\n  betas: [0.5, 0.999]\n", 1))
    found = {(f.rsplit("/", 1)[-1], key) for f, _, key in tool.restatements(configs)}
    assert found == {("mnist_dpswd.yaml", "accountant.sampling"), ("visda_dpswd.yaml", "optimized_metric"),
                     ("visda.yaml", "model.betas")}, found  # model.lr = 0.5 is a real change
