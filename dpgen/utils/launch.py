"""Starting one run on several processes: ``dpgen train --nproc N`` (torchrun) and the one run folder.

:func:`launch` runs ``torchrun --standalone --nproc-per-node N -m dpgen train ...`` and turns a lost
process into one ``error:`` line; :func:`run_dir_overrides` gives a run a folder of its own (two
runs started in the same second never share one) and every rank of one run ONE folder.  The process group
itself and the collectives are :mod:`dpgen.utils.dist`'s.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

from . import dist
from .cluster import slurm_tasks_problem  # noqa: F401  (torch-free: the app checks it before importing torch)

LAUNCHER_ENV = "DPGEN_LAUNCHER"  # set by `dpgen train --nproc`: it reports a lost process itself
PEER_LOST = 3  # exit status of a rank whose collective failed because another rank died or hung


def resume_advice(argv: list[str]) -> str:
    """What to do after a run of several processes ended early: resume when its folder (``hydra.run.dir`` of
    ``argv``) holds a checkpoint, run again when it does not, and say both when the folder is not known here."""
    given = [a.split("=", 1)[1] for a in argv if a.startswith("hydra.run.dir=")]
    if not given:
        return dist.RESUME_ADVICE
    if (Path(given[-1]) / "checkpoints" / "last.pt").is_file():
        return ("its folder keeps the last checkpoint: resume it with the same command plus trainer.resume=true (on "
                "any number of processes)")
    return "it ended before its first checkpoint, so there is nothing to resume: run the same command again"


def run_dir_overrides(argv: list[str], hydra_config: Path, claim: Callable[[], Path] | None = None) -> list[str]:
    """Extra Hydra overrides that give this run a run folder of its own, and every rank of one run ONE folder.

    Hydra names the folder from the clock when each process starts (``${now:...}`` in ``hydra.run.dir``, or
    ``hydra.sweep.dir`` for a multirun, whose jobs then run one after the other on all the processes), so two
    runs started in the same second would share it and the ranks of one run could disagree by a second.
    Rank 0 (or the only process) claims its folder (``claim``: :func:`dpgen.runs.claim_new_folder` of the
    folder the preflight resolved, with a ``_2`` suffix ... when another run took that name) and every rank
    uses it; an explicit folder is left as given.  Ranks > 0 write nothing there and print none of Hydra's own
    lines: they leave Hydra's ``.hydra/`` record and its launch lines to rank 0, and a sweep's ``multirun.yaml``
    (which Hydra writes on every process) goes to a scratch folder of theirs, removed at exit, while their jobs run
    in rank 0's job folders."""
    several = dist.requested()
    if several:
        dist.init_from_env()
    key = "sweep" if any(a == "-m" or a.startswith("--multirun") for a in argv) else "run"
    given = [a.split("=", 1)[1] for a in argv if a.startswith(f"hydra.{key}.dir=")]
    if given:
        folder = given[-1]
    elif claim is not None:  # every rank resolved the folder in its preflight (the same command line): rank 0 claims it
        folder = str(claim()) if dist.is_main() else None
        folder = dist.broadcast_object(folder) if several else folder
    elif several:  # no folder resolved before Hydra: rank 0's clock on every rank
        now = datetime.fromtimestamp(dist.broadcast_object(time.time()))
        folder = re.sub(r"[$][{]now:([^}]*)[}]", lambda m: now.strftime(m.group(1)), _hydra_setting(hydra_config, key, "dir"))
    else:
        return []
    out = [] if given else [f"hydra.{key}.dir={folder}"]
    if not several or dist.is_main():
        return out
    if key == "sweep":  # Hydra writes multirun.yaml into hydra.sweep.dir on every process: here, into a scratch folder
        scratch = tempfile.mkdtemp(prefix="dpgen-rank-")
        atexit.register(shutil.rmtree, scratch, ignore_errors=True)
        subdir = [a.split("=", 1)[1] for a in argv if a.startswith("hydra.sweep.subdir=")]
        jobs = Path(folder).absolute() / (subdir[-1] if subdir else _hydra_setting(hydra_config, "sweep", "subdir"))
        out = [f"hydra.sweep.dir={scratch}", f"hydra.sweep.subdir={jobs}"]
    # and no .hydra/ record, and Hydra's own lines ("Launching 2 jobs locally", each job's overrides) once: rank 0's
    return [*out, "hydra.output_subdir=null", "hydra/hydra_logging=disabled"]


def _hydra_setting(hydra_config: Path, key: str, name: str) -> str:
    """``hydra.<key>.<name>`` as ``configs/hydra/default.yaml`` writes it (interpolations unresolved)."""
    return str(OmegaConf.to_container(OmegaConf.load(hydra_config), resolve=False)[key][name])


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
            what = (f"a process of this {nproc}-process run stopped answering (no reply within {dist.TIMEOUT_ENV}="
                    f"{dist.timeout_s():g} s) or lost its connection")
        elif first.exitcode < 0:
            what = f"process {first.local_rank} of {nproc} was killed by {signal.Signals(-first.exitcode).name}"
        else:
            what = f"process {first.local_rank} of {nproc} exited with status {first.exitcode}"
        print(f"error: {what}, so the run ended; {resume_advice(argv)}", file=sys.stderr)
        return 1
    return 0
