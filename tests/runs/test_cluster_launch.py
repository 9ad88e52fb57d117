"""Under SLURM, the tasks of a step form ONE run or none: a launch that would make several independent runs on
the same private data (each spending the whole budget) is refused in one ``error:`` line showing the command that
makes them one run.  The scheduler's and torchrun's variables are set as they would be in each case."""

from __future__ import annotations

import pytest

from dpgen.utils.cluster import slurm_tasks_problem

LAUNCH_VARS = ("WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "SUBMITIT_EXECUTOR", "SLURM_NTASKS",
               "SLURM_STEP_NUM_TASKS", "SLURM_PROCID")


@pytest.fixture
def env(monkeypatch):
    for key in LAUNCH_VARS:
        monkeypatch.delenv(key, raising=False)

    def set_(**values):
        for key in LAUNCH_VARS:
            monkeypatch.delenv(key, raising=False)
        for key, value in values.items():
            monkeypatch.setenv(key, str(value))
    return set_


def test_srun_torchrun_standalone_is_refused_with_the_rendezvous_command(env):
    # srun -n 2 torchrun --standalone --nproc-per-node 1: each task is a torchrun agent of its own rendezvous
    env(SLURM_NTASKS=2, SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=1, WORLD_SIZE=1, RANK=0, LOCAL_WORLD_SIZE=1,
        GROUP_WORLD_SIZE=1)
    line = slurm_tasks_problem()
    assert line is not None and "\n" not in line
    assert "separate process groups" in line and "--rdzv-backend c10d" in line and "--nnodes 2" in line
    # --nproc-per-node 2: a world of 2 per task still is one run per task
    env(SLURM_NTASKS=2, SLURM_STEP_NUM_TASKS=2, WORLD_SIZE=2, RANK=1, LOCAL_WORLD_SIZE=2, GROUP_WORLD_SIZE=1)
    assert "separate process groups" in slurm_tasks_problem()


def test_a_launcher_whose_world_is_smaller_than_the_tasks_is_refused(env):
    env(SLURM_NTASKS=4, SLURM_STEP_NUM_TASKS=4, WORLD_SIZE=2, RANK=0)
    assert "separate process groups" in slurm_tasks_problem()


@pytest.mark.parametrize("values", [
    # srun -n 2 torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d ...: one rendezvous of both tasks
    {"SLURM_NTASKS": 2, "SLURM_STEP_NUM_TASKS": 2, "WORLD_SIZE": 4, "RANK": 3, "LOCAL_WORLD_SIZE": 2,
     "GROUP_WORLD_SIZE": 2},
    # a submitit job of 2 tasks (its tasks are the group)
    {"SLURM_NTASKS": 2, "SLURM_STEP_NUM_TASKS": 2, "SUBMITIT_EXECUTOR": "slurm"},
    # the batch script of sbatch --ntasks 2 (one task), running dpgen train --nproc 2
    {"SLURM_NTASKS": 2, "SLURM_STEP_NUM_TASKS": 1, "WORLD_SIZE": 2, "RANK": 1},
    # srun -n 2 with the launcher's variables set per task (RANK = SLURM_PROCID, WORLD_SIZE = SLURM_NTASKS)
    {"SLURM_NTASKS": 2, "SLURM_STEP_NUM_TASKS": 2, "WORLD_SIZE": 2, "RANK": 1},
    {},  # no SLURM
])
def test_one_run_over_the_step_s_tasks_is_let_through(env, values):
    env(**values)
    assert slurm_tasks_problem() is None


def test_the_refusal_is_said_once_and_leaves_no_folder(env, tmp_path, monkeypatch, capsys):
    from dpgen.app import run_app

    monkeypatch.chdir(tmp_path)
    for rank in (0, 1):  # the two processes of task 0's standalone torchrun: rank 0 of them says it
        env(SLURM_NTASKS=2, SLURM_STEP_NUM_TASKS=2, SLURM_PROCID=0, WORLD_SIZE=2, RANK=rank, LOCAL_WORLD_SIZE=2,
            GROUP_WORLD_SIZE=1)
        assert run_app(["experiment=digits_dpsgd", f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()
