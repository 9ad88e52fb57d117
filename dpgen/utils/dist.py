"""One run on several processes: the process group that ``torchrun`` (``torch.distributed.run``) describes.

``torchrun --nproc-per-node N train.py ...`` (or ``dpgen train --nproc N ...``) starts N copies of the
run with ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``MASTER_ADDR`` / ``MASTER_PORT`` set; submitit's
``TorchDistributedEnvironment`` sets the same variables on a cluster.  :func:`init_from_env` joins
that group (gloo for CPU tensors, NCCL for CUDA ones when a GPU is present) and pins each process to
the GPU of its ``LOCAL_RANK``.  Without those variables (or with ``WORLD_SIZE=1``) nothing happens and
the run is the single-process run.

A rank that dies ends the run: torchrun stops the other ranks at once; a rank that hangs makes the
others' next collective fail after ``DPGEN_DIST_TIMEOUT`` seconds (default 600), which ends them too.
The run folder keeps its last checkpoint, from which the run resumes on any number of processes.
How the release, the sampler and the ledger stay one run: ``dpgen.privacy.distributed``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

TIMEOUT_ENV = "DPGEN_DIST_TIMEOUT"
LAUNCHER_ENV = "DPGEN_LAUNCHER"  # set by `dpgen train --nproc`: it reports a lost process itself
PEER_LOST = 3  # exit status of a rank whose collective failed because another rank died or hung


def requested() -> bool:
    """True when a launcher (torchrun, submitit) started this process as one of several."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_world_size() -> int:
    """How many processes of this run share this node."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV, "600"))


def init_from_env() -> bool:
    """Join the launcher's process group (once); True when this process is one of several."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size() > 1
    if not requested():
        return False
    backend = "gloo"
    if gpu_per_process():  # NCCL wants one GPU per process: with fewer GPUs than processes, gloo alone
        torch.cuda.set_device(local_rank())
        backend = "cpu:gloo,cuda:nccl"
    dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s()))
    return True


def gpu_per_process() -> bool:
    """True when every process of this node can have a GPU of its own (``LOCAL_WORLD_SIZE`` <= GPUs)."""
    return torch.cuda.is_available() and local_world_size() <= torch.cuda.device_count()


def device_of_rank(device: torch.device) -> torch.device:
    """``cuda`` -> this process's GPU (``LOCAL_RANK``) when several processes share a node."""
    if device.type == "cuda" and device.index is None and dist.is_available() and dist.is_initialized():
        return torch.device("cuda", torch.cuda.current_device())
    return device


def too_few_gpus(device: torch.device) -> str | None:
    """Why ``device`` cannot run on this node's processes (fewer GPUs than processes: NCCL wants one
    each; ``trainer.device=cpu`` then runs, on gloo), or None."""
    if device.type != "cuda" or not (dist.is_available() and dist.is_initialized()) or gpu_per_process():
        return None
    n, k = local_world_size(), torch.cuda.device_count()
    return (f"trainer.device=cuda on {n} processes per node needs a GPU for each, and {k} "
            f"{'is' if k == 1 else 'are'} visible: use --nproc {k} (torchrun --nproc-per-node), or trainer.device=cpu")


def shutdown() -> None:
    """Leave the process group (the end of a run)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


# ---------------------------------------------------------------------------- one run folder for all ranks
def run_dir_overrides(argv: list[str], hydra_config: Path) -> list[str]:
    """Extra Hydra overrides that make every rank of one run write into ONE run folder.

    Hydra names the folder from the clock when each process starts (``${now:...}`` in
    ``hydra.run.dir``, or ``hydra.sweep.dir`` for a multirun, whose jobs then run one after the other on
    all the processes), so the ranks could disagree by a second: rank 0's start time is used on every
    rank.  Ranks > 0 also leave Hydra's ``.hydra/`` record to rank 0.  Nothing for one process or an
    explicit folder."""
    if not requested():
        return []
    init_from_env()
    extra = [] if dist.get_rank() == 0 else ["hydra.output_subdir=null"]
    key = "sweep" if any(a == "-m" or a.startswith("--multirun") for a in argv) else "run"
    if any(a.startswith(f"hydra.{key}.dir=") for a in argv):
        return extra
    box = [time.time()]
    dist.broadcast_object_list(box, src=0)  # rank 0's clock on every rank
    t0 = box[0]
    pattern = str(OmegaConf.to_container(OmegaConf.load(hydra_config), resolve=False)[key]["dir"])
    now = datetime.fromtimestamp(t0)
    return [f"hydra.{key}.dir={re.sub(r'[$][{]now:([^}]*)[}]', lambda m: now.strftime(m.group(1)), pattern)}", *extra]


# ---------------------------------------------------------------------------- faults
def peer_failure(err: BaseException) -> str | None:
    """The one-line message when a collective failed because another process of the run died or hung
    (its connection closed, or no answer within ``DPGEN_DIST_TIMEOUT``); None for anything else."""
    if not (dist.is_available() and dist.is_initialized()) or not isinstance(err, RuntimeError):
        return None
    text = str(err)
    if not isinstance(err, dist.DistError) and not any(s in text for s in ("gloo", "Gloo", "NCCL", "Timed out",
                                                                            "Connection closed", "Connection reset")):
        return None
    reason = "did not answer within DPGEN_DIST_TIMEOUT" if "imed out" in text or "imeout" in text else "stopped"
    return (f"another process of this {dist.get_world_size()}-process run {reason}, so the run ended; its folder keeps "
            "the last checkpoint: resume it with the same command plus hydra.run.dir=<run folder> trainer.resume=true "
            "(on any number of processes)")


# ---------------------------------------------------------------------------- the launcher
def launch(argv: list[str], nproc: int) -> int:
    """``dpgen train --nproc N ...``: ``torchrun --standalone --nproc-per-node N -m dpgen train ...`` (torch.distributed.run).

    A rank's own ``error:`` line is the run's; a rank that died without one (killed, out of memory)
    gives one line here instead of torchrun's report."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser
    from torch.distributed.run import run as torchrun

    os.environ.setdefault("OMP_NUM_THREADS", "1")  # torchrun would set it with a warning
    os.environ[LAUNCHER_ENV] = "1"
    logging.getLogger("torch.distributed").setLevel(logging.CRITICAL)  # torchrun's report: replaced below
    args = get_args_parser().parse_args(["--standalone", f"--nproc-per-node={nproc}", "-m", "dpgen", "train", *argv])
    try:
        torchrun(args)
    except (KeyboardInterrupt, SignalException) as stop:  # Ctrl-C / SIGTERM: the ranks stop and write what they have
        name = getattr(stop, "sigval", signal.SIGINT)
        print(f"stopped by {signal.Signals(name).name}: the checkpoint is intact and results.json holds the results "
              "so far (marked incomplete); run the same command again to continue", file=sys.stderr)
        return 128 + int(name)
    except ChildFailedError as err:
        failures = list(err.failures.values())
        if any(f.exitcode == 2 for f in failures):  # a rank printed the run's error line
            return 2
        # the first failure; at the same second a process that died before one that lost the others or was
        # stopped by torchrun (status 128 + SIGTERM) because of it
        stopped = (PEER_LOST, 128 + signal.SIGTERM, 128 + signal.SIGINT)
        first = min(failures, key=lambda f: (f.timestamp, f.exitcode >= 0, f.exitcode in stopped))
        if first.exitcode == PEER_LOST:
            what = (f"a process of this {nproc}-process run stopped answering (no reply within {TIMEOUT_ENV}="
                    f"{timeout_s():g} s) or lost its connection")
        elif first.exitcode < 0:
            what = f"process {first.local_rank} of {nproc} was killed by {signal.Signals(-first.exitcode).name}"
        else:
            what = f"process {first.local_rank} of {nproc} exited with status {first.exitcode}"
        print(f"error: {what}, so the run ended; its folder keeps the last checkpoint: resume it with the same "
              "command plus hydra.run.dir=<run folder> trainer.resume=true (on any number of processes)",
              file=sys.stderr)
        return 1
    return 0
