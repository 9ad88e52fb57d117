"""The ``dpgen`` console command: every subcommand is listed and dispatches to its package module."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dpgen import cli
from dpgen.presets import list_presets, presets


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for name in ("train", "sample", "report", "reproduce", "audit", "bench", "presets"):
        assert f"    {name}" in out


def test_unknown_subcommand_exits_2_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["trian"])
    assert exit_.value.code == 2
    assert "invalid choice: 'trian'" in capsys.readouterr().err


def test_every_subcommand_module_imports_and_has_an_entry_point():
    import importlib

    for name, (module, _) in cli.COMMANDS.items():
        if name in ("train", "sample"):  # train runs train.py; sample lives with the export package
            continue
        mod = importlib.import_module(module)
        assert hasattr(mod, "main") or (hasattr(mod, "add_arguments") and hasattr(mod, "run")), name


def test_presets_lists_every_preset_under_a_header_with_the_label_its_run_prints(capsys):
    from dpgen.privacy.guarantee import CLT, DATA_DEPENDENT, NON_PRIVATE, PAPER_CONVENTION, RIGOROUS

    assert cli.main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["preset", "dataset", "method", "guarantee", "description"]
    assert [line.split()[0] for line in lines[1:]] == presets()
    rows = list_presets(method="dpsinkhorn", dataset="fashion")
    assert rows and all(r.method == "dpsinkhorn" and r.dataset == "fashion_mnist" for r in rows)
    guarantees = {r.name: r.guarantee for r in list_presets()}
    expected = {"mnist_dpswd_paper": PAPER_CONVENTION, "mnist_swd": NON_PRIVATE, "mnist_dpswd": RIGOROUS,
                "digits_moments": RIGOROUS, "mnist_dpswd_clt": CLT, "mnist_dpsgd": DATA_DEPENDENT}
    assert {k: guarantees[k] for k in expected} == expected  # as the run's table labels its ε


@pytest.mark.parametrize("preset", ["mnist_dpsgd", "mnist_dpswd_clt", "mnist_dpswflow_r_paper", "digits_shift_swd",
                                    "digits_dpswd"])
def test_the_listed_label_is_the_composed_configs(preset):
    from dpgen.presets import config_guarantee, preset_info
    from tests.helpers.configs import compose_cfg

    assert preset_info(preset).guarantee == config_guarantee(compose_cfg([f"experiment={preset}"]))


def test_presets_filter_matching_nothing_is_one_error_with_did_you_mean(capsys):
    assert cli.main(["presets", "--dataset", "no-such-dataset"]) == 2
    assert cli.main(["presets", "--method", "dpswflw"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --method dpswflw matches no preset; did you mean 'dpswflow'")
    assert "methods: da_dann" in err[-1]


def test_reproduce_lists_its_drivers_and_passes_arguments_through(capsys):
    with pytest.raises(SystemExit):
        cli.main(["reproduce", "--help"])
    out = capsys.readouterr().out
    assert "render" in out and "wdp-table2" in out
    assert cli.main(["reproduce", "dpswflow-sigma"]) == 0
    assert "| " in capsys.readouterr().out  # the markdown table
    with pytest.raises(SystemExit, match="takes no arguments"):
        cli.main(["reproduce", "wdp-fig1", "extra"])


def test_console_script_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "dpgen.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "reproduce" in out.stdout


def test_train_is_the_hydra_app_of_train_py(capsys, monkeypatch):
    """``dpgen train`` passes its arguments to train.py's Hydra application (here: print the composed job).
    In this process (the module's own start: ``test_console_script_runs_as_a_module``)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    # Hydra's logging set-up (a logging dictConfig) would close this process's log handlers (pytest's)
    monkeypatch.setattr("hydra._internal.logging_config.configure_logging", lambda *a, **k: None)
    try:
        code = cli.main(["train", "--cfg", "job", "experiment=mnist_dpswd"])
    finally:  # what --cfg left in this process: Hydra's global state and its config (without a run's folder)
        GlobalHydra.instance().clear()
        HydraConfig.instance().cfg = None
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "experiment_name: mnist_dpswd" in out.out
