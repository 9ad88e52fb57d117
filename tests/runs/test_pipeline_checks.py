"""pipeline.run: settings validated before any data is read; resume messages (defect 10); the guarantee
qualifier beside epsilon in the printed table and results.json (defect 6)."""

from __future__ import annotations

import pytest

import dpgen.data.datasets as datasets
from dpgen.logging.summary import print_summary
from dpgen.pipeline import run
from tests.helpers.configs import compose_cfg

FAST = ["experiment=digits_dpswd", "logger=local", "evaluator=none", "trainer.progress=false",
        "trainer.deterministic=true", "model.epochs=1", "model.dp.num_projections=20"]


def test_a_bad_evaluator_setting_fails_before_the_dataset_is_loaded(tmp_path, monkeypatch):
    def no_data(*a, **k):
        raise AssertionError("the dataset was loaded before the evaluator settings were checked")

    monkeypatch.setattr(datasets, "digits", no_data)
    cfg = compose_cfg(["experiment=digits_dpswd", "logger=local", "+evaluator.n_synthtic=10"], out_dir=tmp_path)
    with pytest.raises(Exception, match="n_synthtic") as e:
        run(cfg)
    assert not isinstance(e.value, AssertionError)


def test_resume_says_resuming_and_not_starting_fresh(tmp_path, capsys):
    """Defect 10: a resume printed both "resuming from ..." and "no checkpoint ... starting fresh"."""
    fast = [a for a in FAST if a != "trainer.deterministic=true"]  # main printed both only without it
    run(compose_cfg([*fast, "trainer.max_steps=3"], out_dir=tmp_path))
    capsys.readouterr()
    res = run(compose_cfg([*fast, "trainer.max_steps=5", "trainer.resume=true"], out_dir=tmp_path))
    err = capsys.readouterr().err
    assert "resuming from" in err and "starting fresh" not in err
    assert res["privacy"]["private_steps"] == 5


def test_a_clt_run_carries_its_qualifier_in_results_and_in_the_printed_table(tmp_path, capsys, monkeypatch):
    """Defect 6: CLT-bound runs printed and stored epsilon with no qualifier."""
    monkeypatch.setenv("COLUMNS", "250")  # one table row per line
    with pytest.warns(UserWarning, match="clt"):
        res = run(compose_cfg([*FAST, "trainer.max_steps=2", "model.dp.bound=clt"], out_dir=tmp_path))
    assert res["privacy"]["guarantee"] == "not rigorous (CLT)"
    assert res["train"]["mechanisms"]["projection"]["guarantee"] == "not rigorous (CLT)"
    # the guarantee row of the printed table: the calibrating accountant's epsilon with the label beside it
    eps_row = next(line for line in capsys.readouterr().out.splitlines() if "calibrates and stops" in line)
    assert "not rigorous (CLT)" in eps_row
    rest = {k: v for k, v in res.items() if k != "summary"}  # regroup from the changed privacy block
    print_summary({**rest, "privacy": {**res["privacy"], "guarantee": "rigorous"}})
    assert "not rigorous (CLT)" not in capsys.readouterr().out
