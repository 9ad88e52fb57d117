"""dpgen/reproduce/utility_curves.py: cached points are read, not re-run; the adapter's metric and ceiling."""

from __future__ import annotations

import json
from pathlib import Path

from dpgen.reproduce import utility_curves as uc


def _fake_run(folder: Path, metrics: dict, noise_std: float | None, eps_rdp, eps_pld) -> None:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({
        "metrics": metrics, "privacy": {"epsilon_rdp": eps_rdp, "epsilon_pld": eps_pld}, "runtime_s": 12.0,
        "train": {} if noise_std is None else {"noise_std": noise_std, "clip_norm": 0.5}}))


def test_point_commands_private_and_ceilings():
    assert uc.point_command("dpswd", "digits", 10.0) == ["experiment=digits_dpswd", "model.epochs=50",
                                                         "accountant.epsilon=10"]
    assert uc.point_command("moments", "mnist", None) == ["experiment=mnist_moments", "model.private=false",
                                                          "accountant.epsilon=null"]
    # the adapter has no sigma = 0 mode: its ceiling is the non-private SWD preset
    assert uc.point_command("dpswd_da", "digits", None) == ["experiment=digits_shift_swd"]
    assert uc.point_command("dpswd_da", "digits", 1.0)[0] == "experiment=digits_shift_dpswd"


def test_cached_points_are_read_not_run(tmp_path):
    """A results.json in the point's folder is used as is (python=a command that would fail if run)."""
    _fake_run(tmp_path / "digits" / "dpswd_da" / "eps10", {"acc_target": 0.48, "acc_source": 0.9}, 3.4, 12.8, 10.0)
    _fake_run(tmp_path / "digits" / "dpswd_da" / "nonprivate", {"acc_target": 0.52}, None, "inf", "inf")
    _fake_run(tmp_path / "digits" / "dpsinkhorn" / "eps10", {"acc_logreg": 0.33, "acc_mlp": 0.26}, 0.643, 13.5, 9.99)
    rows = [uc.run_point(tmp_path, "digits", "dpswd_da", 10.0, 100, "/nonexistent/python"),
            uc.run_point(tmp_path, "digits", "dpswd_da", None, 100, "/nonexistent/python"),
            uc.run_point(tmp_path, "digits", "dpsinkhorn", 10.0, 100, "/nonexistent/python")]
    da, ceil, sk = rows
    assert da["acc"] == 0.48 and da["acc_logreg"] is None and da["noise_normalised"] == 3.4  # diameter 1
    assert ceil["acc"] == 0.52 and ceil["noise_normalised"] == 0.0 and "digits_shift_swd" in ceil["label"]
    assert sk["acc"] == 0.33 and abs(sk["noise_normalised"] - 0.643) < 1e-12  # 2C = 1
    table = uc.table(rows)
    assert "| 0.480 | — |" in table and "∞ (non-private ceiling)" in table
    # a design without a preset for the dataset is skipped, not run
    assert uc.run_point(tmp_path, "mnist", "dpswd_da", 10.0, 100, "/nonexistent/python") is None


def test_report_only_writes_doc_block_and_figure(tmp_path):
    _fake_run(tmp_path / "out" / "digits" / "dpswd_da" / "eps1", {"acc_target": 0.4}, 16.0, 1.4, 1.0)
    _fake_run(tmp_path / "out" / "digits" / "dpswd_da" / "eps10", {"acc_target": 0.5}, 3.4, 12.8, 10.0)
    doc = tmp_path / "utility.md"
    doc.write_text("# U\n\nbefore\n<!-- curves:begin -->\nOLD\n<!-- curves:end -->\nafter\n")
    fig = tmp_path / "fig.png"
    assert uc.main(["--out", str(tmp_path / "out"), "--only", "dpswd_da", "--report-only",
                    "--figure", str(fig), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert "OLD" not in text and text.startswith("# U\n\nbefore\n") and text.endswith("after\n")
    assert text.count("DP-SWD adapter") == 2 and fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
