"""``experiment=null`` (what train.yaml's comment offers) composes the raw groups without a preset, named
``no_preset``: Hydra itself refuses ``group=null`` on the command line with a ValueError about a NoneType."""

from __future__ import annotations

from dpgen.config import NO_PRESET, compose, without_preset
from dpgen.preflight import preflight


def test_experiment_null_composes_the_raw_groups_under_their_own_name():
    cfg = compose(["experiment=null"])
    preset = compose([])
    assert cfg.experiment_name == NO_PRESET and preset.experiment_name == "digits_moments"
    assert cfg.accountant.delta != preset.accountant.delta  # the preset's delta is not applied
    assert compose(["experiment=null", "experiment_name=mine"]).experiment_name == "mine"


def test_the_command_line_with_experiment_null_passes_the_check(tmp_path):
    assert preflight(["experiment=null", f"hydra.run.dir={tmp_path / 'run'}"]) is None


def test_only_a_null_experiment_is_rewritten():
    assert without_preset(["experiment=digits_dpsgd", "a=1"]) == ["experiment=digits_dpsgd", "a=1"]
    assert without_preset(["a=1", "experiment=null"]) == ["a=1", "~experiment", f"experiment_name={NO_PRESET}"]
