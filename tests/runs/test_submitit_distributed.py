"""Several tasks of one submitit job are one distributed run (the path of ``hydra/launcher=submitit_slurm``
with ``hydra.launcher.nodes`` x ``tasks_per_node``, run here through ``submitit_local``).

* the hook: inside a submitit job of 2+ tasks, ``export_submitit_environment`` sets the variables
  ``torchrun`` would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK) from submitit's job
  description; with one task, outside submitit, or under torchrun it changes nothing;
* end to end (slow): a 2-task ``submitit_local`` job writes ONE run folder whose epsilon is the
  one-process run's.
"""

from __future__ import annotations

import json
import os
import socket

import pytest

from dpgen.utils.cluster import export_submitit_environment

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def _local_task(monkeypatch, ntasks: int, rank: int) -> None:
    for var in TORCHRUN_VARS:  # set, then deleted: monkeypatch then removes what the export writes (no leak)
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    for var, value in {"SUBMITIT_EXECUTOR": "local", "SUBMITIT_LOCAL_JOB_ID": "4242", "SUBMITIT_LOCAL_NTASKS": ntasks,
                       "SUBMITIT_LOCAL_JOB_NUM_NODES": 1, "SUBMITIT_LOCAL_NODEID": 0, "SUBMITIT_LOCAL_GLOBALID": rank,
                       "SUBMITIT_LOCAL_LOCALID": rank}.items():
        monkeypatch.setenv(var, str(value))


def test_a_task_of_a_two_task_submitit_job_gets_the_torchrun_variables(monkeypatch):
    _local_task(monkeypatch, ntasks=2, rank=1)
    assert export_submitit_environment() is True
    env = {v: os.environ[v] for v in TORCHRUN_VARS}
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "2" and env["LOCAL_RANK"] == "1" and env["LOCAL_WORLD_SIZE"] == "2"
    assert env["MASTER_ADDR"] == socket.gethostname() and 20000 <= int(env["MASTER_PORT"]) <= 60000
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1", "the GPU is picked by LOCAL_RANK, as under torchrun"
    _local_task(monkeypatch, ntasks=2, rank=0)
    assert export_submitit_environment() and os.environ["RANK"] == "0"
    assert os.environ["MASTER_PORT"] == env["MASTER_PORT"], "every task of the job meets on the same port"
    _local_task(monkeypatch, ntasks=2, rank=1)
    monkeypatch.setenv("MASTER_PORT", "29555")  # the user's choice of port stands
    assert export_submitit_environment() and os.environ["MASTER_PORT"] == "29555" and os.environ["RANK"] == "1"


def test_the_exported_variables_do_not_outlive_the_test():
    before = {v: os.environ.get(v) for v in TORCHRUN_VARS}
    with pytest.MonkeyPatch.context() as mp:
        _local_task(mp, ntasks=2, rank=1)
        assert export_submitit_environment() and os.environ["RANK"] == "1"
    assert {v: os.environ.get(v) for v in TORCHRUN_VARS} == before  # else a later train.py would inherit RANK


def test_one_task_no_submitit_or_torchrun_already_there_change_nothing(monkeypatch):
    _local_task(monkeypatch, ntasks=1, rank=0)
    assert export_submitit_environment() is False and "RANK" not in os.environ
    _local_task(monkeypatch, ntasks=2, rank=1)
    monkeypatch.setenv("RANK", "5")  # torchrun started this process: its variables stand
    assert export_submitit_environment() is False and os.environ["RANK"] == "5" and "WORLD_SIZE" not in os.environ
    _local_task(monkeypatch, ntasks=2, rank=1)
    monkeypatch.delenv("SUBMITIT_EXECUTOR")
    assert export_submitit_environment() is False and "RANK" not in os.environ


SHORT = ["experiment=digits_dpsgd", "logger=local", "evaluator=none", "trainer.progress=false", "trainer.max_steps=6"]


@pytest.mark.slow
def test_a_two_task_submitit_job_is_one_run_folder_with_the_one_process_epsilon(tmp_path):
    pytest.importorskip("dpgen.utils.dist", reason="the distributed run (torch.distributed) is not in this checkout")
    from tests.helpers.runs import train

    sweep = tmp_path / "sweep"
    with socket.socket() as s:  # a free port: the one derived from the job id may be another program's
        s.bind(("", 0))
        port = s.getsockname()[1]
    r = train(["-m", "hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2", "hydra.launcher.timeout_min=5",
               *SHORT, f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=job"], env_extra={"MASTER_PORT": str(port)})
    assert r.returncode == 0, r.stderr[-3000:]
    logs = sorted(p.name for p in (sweep / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2 and logs[0].endswith("_0_log.out") and logs[1].endswith("_1_log.out"), logs  # two tasks ran
    assert [p.relative_to(sweep).as_posix() for p in sweep.rglob("results.json")] == ["job/results.json"]
    two = json.loads((sweep / "job" / "results.json").read_text())

    r = train([*SHORT, f"hydra.run.dir={tmp_path / 'one'}"])
    assert r.returncode == 0, r.stderr[-3000:]
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    assert two["privacy"]["private_steps"] == one["privacy"]["private_steps"] == 6
    assert two["privacy"]["epsilon"] == pytest.approx(one["privacy"]["epsilon"], rel=1e-9)
    for name, mech in one["train"]["mechanisms"].items():
        assert two["train"]["mechanisms"][name]["noise_std"] == pytest.approx(mech["noise_std"], rel=1e-9)
