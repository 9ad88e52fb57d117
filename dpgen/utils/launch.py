"""Starting one run on several processes: ``dpgen train --nproc N`` (torchrun) and the one run folder.

:func:`launch` runs ``torchrun --standalone --nproc-per-node N -m dpgen train ...`` and turns a lost
process into one ``error:`` line; :func:`run_dir_overrides` makes every rank of one run write into ONE
run folder.  The process group itself and the collectives are :mod:`dpgen.utils.dist`'s.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from datetime import datetime
from pathlib import Path

from omegaconf import OmegaConf

from . import dist

LAUNCHER_ENV = "DPGEN_LAUNCHER"  # set by `dpgen train --nproc`: it reports a lost process itself
PEER_LOST = 3  # exit status of a rank whose collective failed because another rank died or hung


def run_dir_overrides(argv: list[str], hydra_config: Path) -> list[str]:
    """Extra Hydra overrides that make every rank of one run write into ONE run folder.

    Hydra names the folder from the clock when each process starts (``${now:...}`` in
    ``hydra.run.dir``, or ``hydra.sweep.dir`` for a multirun, whose jobs then run one after the other on
    all the processes), so the ranks could disagree by a second: rank 0's start time is used on every
    rank.  Ranks > 0 also leave Hydra's ``.hydra/`` record to rank 0.  Nothing for one process or an
    explicit folder."""
    if not dist.requested():
        return []
    dist.init_from_env()
    extra = [] if dist.is_main() else ["hydra.output_subdir=null"]
    key = "sweep" if any(a == "-m" or a.startswith("--multirun") for a in argv) else "run"
    if any(a.startswith(f"hydra.{key}.dir=") for a in argv):
        return extra
    t0 = dist.broadcast_object(time.time())  # rank 0's clock on every rank
    pattern = str(OmegaConf.to_container(OmegaConf.load(hydra_config), resolve=False)[key]["dir"])
    now = datetime.fromtimestamp(t0)
    return [f"hydra.{key}.dir={re.sub(r'[$][{]now:([^}]*)[}]', lambda m: now.strftime(m.group(1)), pattern)}", *extra]


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
        print(f"error: {what}, so the run ended; its folder keeps the last checkpoint: resume it with the same "
              "command plus hydra.run.dir=<run folder> trainer.resume=true (on any number of processes)",
              file=sys.stderr)
        return 1
    return 0
