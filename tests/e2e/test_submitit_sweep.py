"""The cluster path runs: a 2-job ε sweep through submitit's local executor (the code path of the SLURM
launcher: pickled jobs, a submitit folder per job, results gathered back) and `dpgen report` reads both."""

from __future__ import annotations

import json

import pytest

from dpgen.cli import main as dpgen_main
from tests.helpers.runs import beats_chance, train

# one release of per-class moments on the 8x8 digits, a small logistic-regression check, no FID
TINY = ["experiment=digits_moments", "logger=local", "trainer.progress=false", "evaluator.n_synthetic=100",
        "evaluator.classifiers=[logreg]", "evaluator.logreg_max_iter=50", "evaluator.fid.enabled=false",
        "evaluator.class_grids=false", "evaluator.grid_per_class=1"]


@pytest.mark.slow  # long: `make test-all` runs it
def test_two_job_epsilon_sweep_through_submitit_and_the_sweep_report(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    r = train(["-m", "accountant.epsilon=2,8", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5",
               *TINY, f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${hydra.job.num}"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Submitit 'local' sweep output dir" in r.stdout + r.stderr
    # submitit ran each job as its own pickled task and stored its result
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2
    results = [json.loads((sweep / str(j) / "results.json").read_text()) for j in (0, 1)]
    assert sorted(res["privacy"]["target_epsilon"] for res in results) == [2.0, 8.0]
    assert all(beats_chance(res["metrics"]["acc_logreg"]) for res in results), [res["metrics"] for res in results]

    capsys.readouterr()
    assert dpgen_main(["report", str(sweep)]) == 0
    printed = capsys.readouterr()
    out = printed.out
    rows = [line for line in out.splitlines() if line.startswith("| accountant.epsilon=")]
    assert [row.split("|")[1].strip() for row in rows] == ["accountant.epsilon=2", "accountant.epsilon=8"]
    assert "(2 jobs, 2 configurations)" in printed.out + printed.err and (sweep / "sweep_report.md").is_file() and (sweep / "privacy_utility.png").is_file()
