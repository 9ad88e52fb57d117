"""scripts/sweep_report.py on a fake Hydra multirun folder laid out as train.py -m writes it."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path

import pytest
import yaml

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sweep_report.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _load_module():
    spec = importlib.util.spec_from_file_location("sweep_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sweep_report = _load_module()


# (subfolder, job number, overrides, target ε, ε RDP, ε PLD, acc_logreg): job numbers deliberately
# not in ε order, two jobs share ε=10 (seeds), one is non-private, one is nested one level deeper.
JOBS = [
    ("", 0, ["accountant.epsilon=10", "seed=0"], 10.0, 9.99, 8.49, 0.6),
    ("", 1, ["model.private=false"], None, "inf", None, 0.9),
    ("", 2, ["accountant.epsilon=1", "seed=0"], 1.0, 0.98, 0.85, 0.3),
    ("nested", 3, ["accountant.epsilon=10", "seed=1"], 10.0, 9.97, 8.51, 0.7),
]


@pytest.fixture(scope="module")
def multirun(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("multirun") / "digits_dpswd" / "2026-11-22_22-06-03"
    for sub, num, overrides, target, eps_rdp, eps_pld, acc in JOBS:
        job = root / sub / f"{num}_{','.join(overrides)}"  # Hydra's <job_num>_<override_dirname>
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": 0}))
        results = {
            "experiment": "digits_dpswd",
            "dataset": "digits",
            "metrics": {"acc_logreg": acc, "acc_mlp": acc - 0.05, "eval_time_s": 12.5},
            "privacy": {
                "target_epsilon": target,
                "delta": 1e-05,
                "epsilon_rdp": eps_rdp,
                "epsilon_pld": eps_pld,
            },
            "train": {"train_steps": 100, "train_time_s": 3.0},
            "runtime_s": 42.123456,
        }
        (job / "results.json").write_text(json.dumps(results, indent=2))
    # an unfinished job (no results.json yet) must be ignored
    (root / "4_accountant.epsilon=5" / ".hydra").mkdir(parents=True)
    return root


@pytest.fixture(scope="module")
def report(multirun) -> tuple[str, str]:
    """Run the script once with defaults; (stdout, sweep_report.md contents)."""
    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        assert sweep_report.main([str(multirun)]) == 0
    return stdout.getvalue(), (multirun / "sweep_report.md").read_text()


def _table_rows(markdown: str) -> list[dict[str, str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def test_markdown_has_one_row_per_finished_job(report):
    stdout, markdown = report
    rows = _table_rows(markdown)
    assert len(rows) == len(JOBS)
    assert _table_rows(stdout) == rows  # the same table is printed to stdout
    assert "nested/3_accountant.epsilon=10,seed=1" in {r["job"] for r in rows}


def test_rows_sorted_by_target_epsilon_with_non_private_last(report):
    rows = _table_rows(report[1])
    assert [r["target ε"] for r in rows] == ["1", "10", "10", "—"]
    # equal ε: by job number
    assert rows[1]["job"].startswith("0_") and rows[2]["job"].startswith("nested/3_")
    assert rows[-1]["job"] == "1_model.private=false"
    assert rows[0]["overrides"] == "accountant.epsilon=1, seed=0"


def test_non_private_job_shows_infinity_and_missing_values(report):
    non_private = _table_rows(report[1])[-1]
    assert non_private["ε (RDP)"] == "∞"
    assert non_private["ε (PLD)"] == "—"
    assert non_private["acc_logreg"] == "0.9"
    assert non_private["runtime (s)"] == "42.12"


def test_time_metrics_hidden_by_default(report):
    header = _table_rows(report[1])[0].keys()
    assert {"acc_logreg", "acc_mlp"} <= header
    assert "eval_time_s" not in header


def test_plot_and_table_written_to_out_dir_png_is_valid(multirun, tmp_path, capsys):
    out_dir = tmp_path / "report"
    assert sweep_report.main([str(multirun), "--out", str(out_dir), "--metric", "acc_mlp"]) == 0
    header = _table_rows(capsys.readouterr().out)[0].keys()
    assert "acc_mlp" in header and "acc_logreg" not in header  # --metric selects columns
    data = (out_dir / "privacy_utility.png").read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 5_000
    assert (out_dir / "sweep_report.md").is_file()


def test_empty_folder_exits_2_saying_no_finished_jobs(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        sweep_report.main([str(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "no finished jobs" in err and str(tmp_path) in err


def test_missing_folder_exits_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "does_not_exist"
    with pytest.raises(SystemExit) as exc:
        sweep_report.main([str(missing)])
    assert exc.value.code == 2
    assert str(missing) in capsys.readouterr().err
