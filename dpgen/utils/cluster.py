"""A job of several tasks started by a scheduler through submitit: the ``torch.distributed`` environment.

``torchrun`` starts every process of a distributed run with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``, ``LOCAL_RANK`` (and ``LOCAL_WORLD_SIZE``) set, and the run starts its process group from
them.  A job of Hydra's submitit launcher (``hydra/launcher=submitit_slurm`` with ``hydra.launcher.nodes``
x ``hydra.launcher.tasks_per_node`` tasks, or ``submitit_local`` with ``tasks_per_node``) runs the same
task function once per task and sets none of them.  :func:`export_submitit_environment` sets exactly those
variables from submitit's own description of the job (``submitit.helpers.TorchDistributedEnvironment``:
rank = the task's global rank, world size = the job's number of tasks, address = the job's first node,
port = ``MASTER_PORT`` if set, else one derived from the job id), so both launchers start the process group
the same way.  Set ``MASTER_PORT`` in the job's environment to choose the port (e.g. when the derived one
is taken).
"""

from __future__ import annotations

import os


def export_submitit_environment() -> bool:
    """In a submitit job of two or more tasks that ``torchrun`` did not start (no ``RANK`` yet): export the
    ``torch.distributed`` variables of this task (module docstring) and return True; anywhere else do
    nothing and return False.  ``CUDA_VISIBLE_DEVICES`` is left alone: as under ``torchrun``, the task
    picks its GPU by ``LOCAL_RANK``."""
    if not os.environ.get("SUBMITIT_EXECUTOR") or "RANK" in os.environ:
        return False
    from submitit import JobEnvironment
    from submitit.helpers import TorchDistributedEnvironment

    if JobEnvironment().num_tasks < 2:
        return False
    # overwrite: a MASTER_PORT the user set is the port (TorchDistributedEnvironment reads it); RANK is not set
    TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    return True


def slurm_tasks_problem() -> str | None:
    """One line when this process belongs to a SLURM step of two or more tasks (``srun -n N``) whose tasks do not
    form ONE process group: each group would be an independent run on the same private data, each spending the
    whole budget.  None otherwise.

    Refused: a task that no distributed launcher started (no ``WORLD_SIZE``: ``srun python train.py``); a
    torchrun agent whose rendezvous holds fewer agents than the step has tasks (``GROUP_WORLD_SIZE``:
    ``srun torchrun --standalone ...`` gives every task a rendezvous of its own); any launcher whose world is
    smaller than the step's tasks.  Formed as one run: ``srun torchrun --nnodes N ...`` with a shared
    rendezvous (every task an agent of the same group), and a submitit job (its tasks are the group).  The
    batch script of ``sbatch --ntasks N`` runs once: its step has one task."""
    env = os.environ
    tasks = env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1"))
    if not tasks.isdigit() or int(tasks) < 2 or env.get("SUBMITIT_EXECUTOR"):
        return None
    n = int(tasks)
    if "WORLD_SIZE" not in env:
        return (f"this is one of {n} SLURM tasks (srun with SLURM_NTASKS={n}) without a distributed launcher: "
                f"they would be {n} independent runs, each spending the privacy budget on the same data; start one "
                f"task that launches the processes (srun --ntasks 1 dpgen train --nproc <processes> ..., one node), "
                f"or {_one_rendezvous(n)}, or hydra/launcher=submitit_slurm (docs/guides/distributed.md)")
    world, agents = _int(env.get("WORLD_SIZE")), _int(env.get("GROUP_WORLD_SIZE"))
    if agents is not None and agents < n or world is not None and world < n:
        groups = f"{agents} task{'s' if agents != 1 else ''}" if agents is not None else f"{world} process"
        return (f"the {n} SLURM tasks of this step (SLURM_NTASKS={n}) started separate process groups of {groups} "
                f"each (torchrun --standalone, or a launcher per task): they would be independent runs, each spending "
                f"the privacy budget on the same data; make them one run with a shared rendezvous: "
                f"{_one_rendezvous(n)} (docs/guides/distributed.md)")
    return None


def _one_rendezvous(tasks: int) -> str:
    """The command that makes ``tasks`` SLURM tasks (one per node) one torchrun rendezvous."""
    return (f"srun --ntasks {tasks} --ntasks-per-node 1 torchrun --nnodes {tasks} --nproc-per-node <processes per node> "
            f"--rdzv-backend c10d --rdzv-id $SLURM_JOB_ID --rdzv-endpoint <first node>:29500 train.py ...")


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None
