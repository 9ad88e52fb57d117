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
    """One line when this process is one of several tasks of a SLURM step (``srun`` with 2+ tasks) that no
    distributed launcher started (no ``WORLD_SIZE``: not torchrun, not submitit): each task would be an
    independent run on the same private data, each spending the whole budget.  None otherwise (one task, or
    a launcher's process).  The batch script of ``sbatch --ntasks N`` runs once: its step has one task."""
    env = os.environ
    tasks = env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1"))
    if not tasks.isdigit() or int(tasks) < 2 or "WORLD_SIZE" in env or env.get("SUBMITIT_EXECUTOR"):
        return None
    return (f"this is one of {tasks} SLURM tasks (srun with SLURM_NTASKS={tasks}) without a distributed launcher: "
            f"they would be {tasks} independent runs, each spending the privacy budget on the same data; start one "
            f"task that launches the processes (srun --ntasks 1 dpgen train --nproc <processes> ..., one node), or "
            f"hydra/launcher=submitit_slurm for several nodes (docs/guides/distributed.md)")
