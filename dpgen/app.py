"""The Hydra application of one training run: ``python train.py ...``, ``dpgen train ...`` and
``python -m dpgen train ...`` all run :func:`run_app` (preflight checks, then :func:`main`).

One run on N processes: ``torchrun --nproc-per-node N train.py ...`` or ``dpgen train --nproc N ...``
(docs/guides/distributed.md); rank 0 prints the errors and writes the one run folder.

The configs come from ``dpgen.paths.HYDRA_CONFIGS``: the checkout's ``configs/`` folder, or the copy an
installed wheel ships as the package ``dpgen.configs`` (Hydra's ``pkg://`` search path).
"""

from __future__ import annotations

import math
import os
import shutil
import sys

import hydra
from omegaconf import DictConfig

from .paths import CONFIGS, HYDRA_CONFIGS


@hydra.main(config_path=HYDRA_CONFIGS, config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from .pipeline import run
    from .utils.cluster import export_submitit_environment

    export_submitit_environment()  # a submitit job of several tasks: one distributed run, as under torchrun
    from .interrupt import RunInterrupted

    try:
        results = run(cfg)
    except RunInterrupted as stop:  # results so far are in results.json, labelled incomplete; the checkpoint is whole
        from .pipeline import say_stopped

        say_stopped(stop)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stop.exit_code)  # the folder is released and every file closed: skip the interpreter's slow teardown
    except Exception as err:
        from .utils import dist
        from .utils.launch import LAUNCHER_ENV, PEER_LOST

        peer = dist.peer_failure(_unwrap(err))
        message = user_error(err) or peer
        if message is None:  # a bug keeps its traceback
            raise
        if peer is not None and os.environ.get(LAUNCHER_ENV):  # `dpgen train --nproc` reports it, once
            raise SystemExit(PEER_LOST) from None
        if _is_multirun():  # a sweep reports through Hydra: the user's error itself, not Hydra's wrapper of it
            raise _unwrap(err) from None
        if dist.is_main():  # several processes: one error line, one folder (rank 0's)
            _remove_untouched_run_dir()
            print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    metric = cfg.get("optimized_metric")
    if metric is None:
        return None
    value = results["metrics"].get(metric)
    return float(value) if value is not None and math.isfinite(float(value)) else None


def user_error(err: BaseException) -> str | None:
    """The one-line message of a user's mistake (a :class:`dpgen.errors.UserError`: a bad setting,
    missing or damaged data, W&B not logged in), printed without a traceback; None for anything else.
    Hydra wraps errors raised while instantiating a target: unwrap them."""
    from .config import privacy_setting_error
    from .errors import UserError, one_line
    from .privacy.errors import PrivacySettingError

    cause = _unwrap(err)
    if isinstance(cause, PrivacySettingError):  # the privacy core's words: the config layer names the key
        cause = privacy_setting_error(cause)
    return one_line(str(cause)) if isinstance(cause, UserError) else None


def _unwrap(err: BaseException) -> BaseException:
    """The error a Hydra ``InstantiationException`` wraps (whose repr prints line breaks as backslash-n)."""
    from hydra.errors import InstantiationException

    return err.__cause__ if isinstance(err, InstantiationException) and err.__cause__ is not None else err


def _is_multirun() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _remove_untouched_run_dir() -> None:
    """A run that failed before doing anything leaves no folder: delete the run folder if it holds only
    what Hydra wrote on start (``.hydra/``, an empty log).  A folder with anything else (a resumed
    run's checkpoints) is never touched."""
    from .preflight import CREATED
    from .runs import STATE_DIR, hydra_output_dir, in_use

    run_dir = hydra_output_dir()
    if run_dir is None or not run_dir.is_dir() or in_use(run_dir):  # another run's folder (a refused second start): never touched
        return
    for entry in run_dir.iterdir():
        if entry.name in (".hydra", STATE_DIR) and entry.is_dir():
            continue
        if entry.suffix == ".log" and entry.is_file() and entry.stat().st_size == 0:
            continue
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in CREATED:  # e.g. outputs/<experiment>/: made for this run, now empty
        if parent != run_dir.resolve() and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()


def run_app(argv: list[str]) -> int:
    """Check the command line (a bad preset / key / run folder: one ``error:`` line, before Hydra makes a
    folder), then run :func:`main` on it; returns the exit code."""
    from .config import without_preset
    from .preflight import preflight
    from .utils.cluster import slurm_tasks_problem

    argv = without_preset(argv)  # experiment=null: the raw groups, as Hydra spells it
    problem = slurm_tasks_problem()
    if problem is not None:
        if os.environ.get("SLURM_PROCID", "0") == "0" and os.environ.get("RANK", "0") == "0":  # every task finds it, the first says it
            print(f"error: {problem}", file=sys.stderr)
        return 2
    problem = preflight(argv)
    if problem is not None:
        if os.environ.get("RANK", "0") == "0":  # torchrun: every rank finds it, rank 0 says it (no torch imported yet)
            print(f"error: {problem}", file=sys.stderr)
        return 2
    # imported only once the command line is known good: it imports torch (seconds), a refusal does not wait for it
    from .preflight import CHECKED
    from .runs import claim_new_folder
    from .utils.launch import run_dir_overrides

    # a folder of this run's own, never that of a run started in the same second; torchrun: rank 0's for all ranks
    claim = (lambda: claim_new_folder(CHECKED[0])) if CHECKED else None
    argv = [*argv, *run_dir_overrides(argv, CONFIGS / "hydra" / "default.yaml", claim)]
    saved = sys.argv
    sys.argv = [saved[0], *argv]
    try:
        main()
    except SystemExit as exit_:
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv = saved
    return 0
