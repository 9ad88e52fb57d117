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


def test_presets_lists_every_preset_and_filters(capsys):
    assert cli.main(["presets"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == presets()
    rows = list_presets(method="dpsinkhorn", dataset="fashion")
    assert rows and all(r.method == "dpsinkhorn" and r.dataset == "fashion_mnist" for r in rows)
    guarantees = {r.name: r.guarantee for r in list_presets()}
    assert guarantees["mnist_dpswd_paper"] == "paper convention"
    assert guarantees["mnist_swd"] == "non-private" and guarantees["mnist_dpswd"] == "honest"
    assert guarantees["digits_moments"] == "honest"


def test_presets_filter_matching_nothing_fails(capsys):
    assert cli.main(["presets", "--dataset", "no-such-dataset"]) == 1


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


def test_train_is_the_hydra_app_of_train_py():
    """``dpgen train`` passes its arguments to train.py's Hydra application (here: print the composed job)."""
    out = subprocess.run([sys.executable, "-m", "dpgen.cli", "train", "--cfg", "job", "experiment=mnist_dpswd"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "experiment_name: mnist_dpswd" in out.stdout
