"""dpgen/reproduce/steps_curve.py: the utility-vs-steps table and curve of a run trained in resumed segments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpgen.reproduce import steps_curve as sc


def _point(run_dir: Path, steps: int, logreg: float, eps: float) -> None:
    (run_dir / f"results_step{steps}.json").write_text(json.dumps(
        {"metrics": {"acc_logreg": logreg, "fid": 40.0}, "privacy": {"epsilon_rdp": eps, "epsilon_pld": "inf"},
         "runtime_s": 12.0}))


def test_the_table_has_one_row_per_segment_in_step_order_and_only_reported_columns(tmp_path):
    _point(tmp_path, 6000, 0.5, 0.9)
    _point(tmp_path, 3000, 0.25, 0.8)
    (tmp_path / "results_stepX.json").write_text("{}")  # not a segment: ignored
    out = sc.table(sc.load_points(tmp_path)).splitlines()
    assert out[0] == "| steps | ε (RDP) | ε (PLD) | LogReg % | FID | wall (s) |"
    assert out[2] == "| 3,000 | 0.80 | inf | 25.0 | 40.00 | 12 |"
    assert out[3].startswith("| 6,000 | 0.90 |")
    sc.plot(sc.load_points(tmp_path), tmp_path / "curve.png")
    assert (tmp_path / "curve.png").stat().st_size > 1000


def test_segments_must_increase_and_the_script_owns_max_steps_and_resume(tmp_path):
    with pytest.raises(SystemExit, match="increasing"):
        sc.run_segments(tmp_path, [300, 200], ["experiment=toy_dpswd"])
    with pytest.raises(SystemExit, match="set by this script"):
        sc.run_segments(tmp_path, [100], ["experiment=toy_dpswd", "trainer.max_steps=5"])
    with pytest.raises(SystemExit, match="no results_step"):
        sc.load_points(tmp_path)


@pytest.mark.slow  # resume continuity runs in the fast suite in tests/runs/test_faults.py
def test_a_run_in_two_segments_continues_its_ledger(tmp_path, monkeypatch):  # toy data: no data root needed
    monkeypatch.setenv("WANDB_MODE", "offline")
    run = tmp_path / "run"
    sc.run_segments(run, [10, 20], ["experiment=toy_dpswd", "logger=local", "trainer.progress=false",
                                    "evaluator.n_synthetic=500"])
    (s1, r1), (s2, r2) = sc.load_points(run)
    assert (s1, s2) == (10, 20)
    assert r1["privacy"]["private_steps"] == 10 and r2["privacy"]["private_steps"] == 20
    assert 0 < float(r1["privacy"]["epsilon_rdp"]) < float(r2["privacy"]["epsilon_rdp"])
