"""What the console says: one table title per sweep job, no empty outputs/<experiment>/ after a refused start,
and a second run into a finished run's folder says that it re-evaluates (nothing more is trained or spent)."""

from __future__ import annotations

import io

from rich.console import Console

from dpgen.logging.summary import print_summary
from dpgen.pipeline import run
from dpgen.runs import claim_run_folder
from tests.helpers.configs import compose_cfg
from tests.helpers.runs import train_here


def _title(overrides: list[str]) -> str:
    buf = io.StringIO()
    print_summary({"experiment": "digits_moments", "overrides": overrides, "privacy": {"epsilon": 1.0}},
                  Console(file=buf, width=200))
    return buf.getvalue().splitlines()[0].strip()


def test_each_sweep_job_table_has_its_own_title():
    one, ten = _title(["accountant.epsilon=1", "seed=0"]), _title(["accountant.epsilon=10", "seed=0"])
    assert one != ten and "accountant.epsilon=1, seed=0" in one
    assert _title([]) == "digits_moments — results"


def test_a_refused_start_leaves_no_empty_outputs_folder(tmp_path):
    r = train_here(["experiment=mnist_dpswd", "logger=local", f"paths.data_root={tmp_path / 'nodata'}"], cwd=tmp_path)
    assert r.returncode == 2 and "not found under data root" in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "outputs").exists()  # neither the run folder nor outputs/mnist_dpswd/


def test_rerunning_a_finished_run_says_it_re_evaluates(tmp_path):
    args = ["logger=local", "evaluator=none", "trainer.progress=false"]
    run(compose_cfg(args, out_dir=tmp_path))
    notes: list[str] = []
    with claim_run_folder(compose_cfg(args, out_dir=tmp_path), log=notes.append) as folder:
        assert folder.resume_from is not None
    assert any("holds a finished run: its training is complete, so this run re-evaluates its release" in n
               for n in notes), notes
