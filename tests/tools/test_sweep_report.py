"""dpgen/report.py on a fake Hydra multirun folder laid out as train.py -m writes it."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import yaml

from dpgen import report as sweep_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# (subfolder, job number, overrides, target ε, ε RDP, ε PLD, acc_logreg): job numbers deliberately
# not in ε order, two jobs share ε=10 and differ only by seed, one is non-private, one is nested one
# level deeper.
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
            "metrics": {"acc_logreg": acc, "acc_mlp": acc - 0.05, "eval_time_s": 12.5, "fid": 100 * (1 - acc),
                        "fid_n_generated": 2000, "fid_n_reference": 225, "fid_extractor": "domain",
                        "fid_extractor_cache": "/cache/fid_domain/digits-x.pt"},
            "privacy": {
                "target_epsilon": target,
                "delta": 1e-05,
                "epsilon": eps_pld if target else "inf",  # the calibrating accountant's
                "calibrating_accountant": "pld",
                "epsilon_rdp": eps_rdp,
                "epsilon_pld": eps_pld,
            },
            "train": {"train_steps": 100, "guarantee": "rigorous" if target else "none (non-private)"},
        }  # no timings: they depend on the private batch sizes (private_timings.json)
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
    """The first markdown table (results) as dicts."""
    lines = []
    for line in markdown.splitlines():
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            break
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def test_results_table_has_one_row_per_configuration_seeds_aggregated(report):
    stdout, markdown = report
    rows = _table_rows(markdown)
    assert len(rows) == 3  # 4 jobs: the two ε=10 jobs differ only by seed
    assert _table_rows(stdout) == rows  # the same table is printed to stdout
    eps10 = next(r for r in rows if r["overrides"] == "accountant.epsilon=10")
    assert eps10["seeds"] == "0, 1"
    assert eps10["acc_logreg"] == "0.65 ± 0.071"  # mean and sample std of 0.6 and 0.7
    assert eps10["ε (PLD, calibrating)"].startswith("8.5 ±") and eps10["ε (RDP, another accountant)"].startswith("9.98 ±")
    assert "nested/3_accountant.epsilon=10,seed=1" in markdown  # provenance table lists every job


def test_results_table_leads_with_overrides_then_epsilon_then_utility_then_runtime(report):
    header = list(_table_rows(report[1])[0])
    assert header[0] == "overrides" and "runtime (s)" not in header  # no published timings
    assert header.index("ε (RDP, another accountant)") < header.index("ε (PLD, calibrating)") < header.index("acc_logreg")
    assert {"acc_logreg", "acc_mlp", "fid"} <= set(header)
    for provenance in ("fid_n_generated", "fid_n_reference", "fid_extractor", "fid_extractor_cache", "eval_time_s"):
        assert provenance not in header


def test_rows_sorted_by_target_epsilon_with_non_private_last(report):
    rows = _table_rows(report[1])
    assert [r["target ε"] for r in rows] == ["1", "10", "—"]
    assert rows[0]["overrides"] == "accountant.epsilon=1" and rows[-1]["overrides"] == "model.private=false"


def test_non_private_job_shows_infinity_and_missing_values(report):
    non_private = _table_rows(report[1])[-1]
    assert non_private["ε (RDP, another accountant)"] == "∞"
    assert non_private["ε (PLD, calibrating)"] == "—"
    assert non_private["guarantee"] == "non-private"
    assert non_private["acc_logreg"] == "0.9"


def test_results_written_before_the_calibrating_epsilon_still_read(tmp_path):
    job = tmp_path / "0_accountant.epsilon=10"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["accountant.epsilon=10"]))
    (job / "results.json").write_text(json.dumps({"experiment": "e", "metrics": {"acc_logreg": 0.5},
                                                  "privacy": {"target_epsilon": 10.0, "epsilon_rdp": 9.9},
                                                  "runtime_s": 7.0}))
    row = sweep_report.collect(tmp_path)[0]
    assert row["epsilon"] == 9.9 and row["calibrating"] == "rdp" and row["runtime_s"] == 7.0
    configs = sweep_report.aggregate([row])
    header = list(_table_rows(sweep_report.to_markdown(configs, ["acc_logreg"], ["rdp", "pld"]))[0])
    assert "ε (RDP, calibrating)" in header and header[-1] == "runtime (s)"


def test_provenance_is_in_a_second_table_not_in_the_results(report):
    markdown = report[1]
    results, provenance = markdown.split("## Provenance")
    assert "fid_extractor_cache" not in results and "/cache/fid_domain/digits-x.pt" in provenance
    assert "fid_n_generated" in provenance


def test_plot_axes_are_metric_families_only(multirun):
    configs = sweep_report.aggregate(sweep_report.collect(multirun))
    metrics = sweep_report.metric_names(sweep_report.collect(multirun))
    fig = sweep_report.plot(configs, metrics, "t")
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["accuracy", "FID"]
    for ax in fig.axes:
        assert ax.get_xscale() == "log" and ax.get_xlabel().startswith("ε spent (PLD, calibrating")
        xs = sorted({round(float(x), 2) for bars in ax.containers for x in bars.lines[0].get_xdata()})
        assert xs == [0.85, 8.5]  # the PLD ε spent, not RDP's (0.98, 9.98): no point right of its target
        labels = [h.get_label() for h in ax.get_legend_handles_labels()[0]]
        plotted = " ".join(labels)
        assert "fid_n" not in plotted and "time" not in plotted and "cache" not in plotted
        assert any("non-private" in lb for lb in labels) and any(lb.startswith("target ε") for lb in labels)
    acc = fig.axes[0]
    names = {re.split(r"[ ,]", lb)[0] for lb in acc.get_legend_handles_labels()[1] if not lb.startswith("target")}
    assert names == {"acc_logreg", "acc_mlp"}
    # the two seeds at ε = 10 are one point with an error bar, the target ε lines at 1 and 10
    line = next(c for c in acc.containers if c.get_label().startswith("acc_logreg (mean")).lines[0]
    assert len(line.get_xdata()) == 2 and line.get_ydata()[1] == pytest.approx(0.65)
    assert sorted(ln.get_xdata()[0] for ln in acc.get_lines() if ln.get_linestyle() == ":" and
                  len(ln.get_xdata())) == [1.0, 10.0]


def test_domain_adaptation_gets_a_target_accuracy_panel():
    configs = [{"experiment": "da", "overrides": [f"accountant.epsilon={e}"], "n": 1, "seeds": ["0"], "jobs": ["j"],
                "target_epsilon": e, "epsilon": e, "guarantee": "rigorous",
                "stats": {"eps_rdp": (e * 0.99, 0.0, 1), "acc_target": (0.5 + e / 100, 0.0, 1),
                          "acc_source": (0.9, 0.0, 1)}} for e in (1.0, 10.0)]
    fig = sweep_report.plot(configs, ["acc_target", "acc_source"], "da")
    assert [ax.get_title() for ax in fig.axes] == ["target accuracy (DA)"]


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
