"""``run(cfg)``: the composition of one run, nothing else (docs/ARCHITECTURE.md).

1. validate; CPU threads (``trainer.threads``, before any torch work); seed; pick device
2. method, evaluator, ledger = instantiate(cfg.model / cfg.evaluator / cfg.accountant): every setting
   is checked before any data is read (a typo in evaluator.* fails in seconds)
3. data    = instantiate(cfg.dataset)     -> public / private / test splits
4. methods.loop.train(method, data, ledger, ctx)  (resume, budget, checkpoints)
   (the run folder is locked for the whole run and its resume decided first: dpgen/runs.py)
5. metrics = evaluator(method, data, logger)
6. results.json (+ W&B summary); return the results

Several processes (``torchrun --nproc-per-node N train.py ...``, ``dpgen train --nproc N``): every
process joins the launcher's group (``utils.dist``); rank 0 claims the run folder (lock, resume
decision) and tells the others, which train on their part of every batch with a silent logger and stop
after training; rank 0 evaluates and writes results.json: one run folder whatever the number of processes.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from .config import check_delta_of_config, privacy_setting_error, single_process_only, validate
from .errors import ConfigError
from .eval.evaluator import evaluate_run
from .export.release import release_info
from .interrupt import RunInterrupted, stop_on_signals, stopped_line
from .logging import SilentLogger
from .logging.summary import print_summary
from .methods import loop
from .methods.base import TrainContext
from .methods.parallel import slower_note
from .paths import code_version
from .privacy.card import add_evaluation_reads, n_is_public
from .privacy.conventions import paper_convention
from .privacy.errors import PrivacySettingError
from .privacy.noise import build_policy
from .runs import RunFolder, claim_run_folder
from .utils import check_precision, dist, pick_device, seed_everything, unavailable_device
from .utils.compiling import check_compile, check_graph, resolve_graph
from .utils.launch import LAUNCHER_ENV
from .utils.threads import apply_threads


class OtherRank(SystemExit):
    """Rank 0 refused the run (its ``error:`` line says why): the other ranks end quietly with status 2."""

    def __init__(self) -> None:
        super().__init__(2)


def run(cfg: DictConfig) -> dict:
    validate(cfg)
    dist.init_from_env()  # torchrun / submitit: one of several processes (a no-op otherwise)
    if (why := single_process_only(cfg, dist.world_size())) is not None:
        raise ConfigError(why)
    if not dist.is_main():  # rank 0 owns the folder; the others learn its decision
        decision = dist.broadcast_object(None)
        if decision is None:
            raise OtherRank()
        return _run(cfg, RunFolder(Path(decision[0]), None if decision[1] is None else Path(decision[1]), lock=None))
    try:
        folder = claim_run_folder(cfg, log=Console(stderr=True).log)  # one owner; resume or refuse (runs.py)
    except BaseException:
        dist.broadcast_object(None)
        raise
    with folder:
        dist.broadcast_object((str(folder.path), None if folder.resume_from is None else str(folder.resume_from)))
        return _run(cfg, folder)


class _SoFar:
    """What an interrupted run has done: the phase, the ledger, the evaluator (its metrics so far), the logger."""

    def __init__(self) -> None:
        self.phase, self.ledger, self.evaluator, self.logger, self.train = "setup", None, None, None, {}
        self.base: dict = {}

    def write(self, stop: RunInterrupted) -> None:
        """results.json (labelled incomplete) with the privacy spent so far; nothing before a ledger exists."""
        if self.ledger is None or self.logger is None or self.phase == "done":  # done: the full results are written
            return
        metrics = dict(getattr(self.evaluator, "last_metrics", None) or {}) if self.phase == "evaluation" else {}
        results = {**self.base, "metrics": metrics, "privacy": self.ledger.summary(), "train": self.train,
                   "incomplete": {"stopped_by": stop.name, "during": self.phase,
                                  "note": "stopped before the end: the checkpoint is intact; run the same command "
                                          "again (trainer.resume=auto) to continue the run in this folder"}}
        self.logger.local_only()
        self.logger.log_summary(results)


def say_stopped(stop: RunInterrupted, at_once: bool = False) -> None:
    """The ``stopped by …`` line on the console, once: by rank 0, and not under ``dpgen train --nproc`` (the
    launcher says it for all the processes)."""
    if dist.is_main() and not os.environ.get(LAUNCHER_ENV):
        print(stopped_line(stop, at_once), file=sys.stderr, flush=True)


def _run(cfg: DictConfig, folder: RunFolder) -> dict:
    so_far = _SoFar()
    try:
        with stop_on_signals(so_far.write, say=say_stopped):
            return _run_steps(cfg, folder, so_far)
    except RunInterrupted as stop:
        so_far.write(stop)
        raise
    except PrivacySettingError as e:  # the privacy core names its setting; the config layer names the key
        raise privacy_setting_error(e) from None


@dataclass
class _Parts:
    """What one run is made of, built from the config before training."""
    name: str
    seed: int
    device: torch.device
    threads: int
    convention: object  # privacy.convention=paper: the paper's noise, else None
    method: object
    evaluator: object
    ledger: object
    data: object
    logger: object
    # the code that runs: the checkout's commit when the run starts (rank 0; None elsewhere or outside a checkout),
    # recorded in results.json and the release (read at the end it would name whatever the checkout holds then)
    version: str | None = None


def _environment(cfg: DictConfig, run_dir: Path) -> tuple[int, int, torch.device]:
    """CPU threads (before any torch work), seed, device (several processes: LOCAL_RANK's GPU)."""
    threads = apply_threads(cfg.trainer.get("threads", 1))
    seed = int(cfg.get("seed", 0))
    seed_everything(seed)
    if (why := unavailable_device(cfg.trainer.device, "trainer.device")) is not None:
        raise ConfigError(why)
    device = pick_device(cfg.trainer.device)
    if (why := dist.too_few_gpus(device)) is not None:
        raise ConfigError(why)
    device = dist.device_of_rank(device)
    if dist.is_main():
        console = Console(stderr=True)
        if dist.world_size() > 1:
            console.log(f"one run on {dist.world_size()} processes (rank 0 writes)")
        console.log(f"[bold]{cfg.get('experiment_name', 'run')}[/] on {device} "
                    f"({threads} CPU thread{'s' if threads > 1 else ''}); run folder {run_dir}")
    return threads, seed, device


def _build(cfg: DictConfig, run_dir: Path) -> _Parts:
    """Settings first (a bad model / evaluator / accountant setting fails before the data is loaded), then
    the data (checked against the evaluator and δ < 1/N) and the logger."""
    threads, seed, device = _environment(cfg, run_dir)
    convention = paper_convention(cfg.get("privacy"))  # privacy.convention=paper (dpgen/privacy/conventions.py)
    method = instantiate(cfg.model, _convert_="all", **({"convention": convention} if convention else {}))
    method.take_noise(build_policy(method.noise_settings()))  # the run's noise, decided once (privacy/noise.py)
    if dist.is_main() and (note := slower_note(method, device)) is not None:  # several CPU processes that do not pay
        Console(stderr=True).log(note)
    evaluator = instantiate(cfg.evaluator, _convert_="all")
    ledger = instantiate(cfg.accountant, _convert_="all")
    max_steps = cfg.trainer.get("max_steps")
    if max_steps is not None and int(max_steps) < method.min_steps:  # before any file: no model would exist
        raise ConfigError(f"trainer.max_steps={max_steps} stops {method.name} before its first release, and its model is "
                          f"that release: there would be nothing to save or evaluate; set trainer.max_steps>="
                          f"{method.min_steps} or leave it unset (null: the planned schedule)")
    evaluator.check()  # evaluability from the settings alone (an FID extractor is available), before the data loads
    data = instantiate(cfg.dataset)
    evaluator.check(data)  # the public splits are large enough for every requested metric, before training
    check_delta_of_config(cfg, len(data.private))  # δ < 1/N: refused before training, N kept out of the message
    logger = (instantiate(cfg.logger, _partial_=True, _convert_="all")(run_config=OmegaConf.to_container(cfg, resolve=True))
              if dist.is_main() else SilentLogger())
    return _Parts(cfg.get("experiment_name", "run"), seed, device, threads, convention, method, evaluator, ledger,
                  data, logger, code_version() if dist.is_main() else None)


def _context(cfg: DictConfig, parts: _Parts, folder: RunFolder) -> TrainContext:
    """The loop's view of the run: device, logger, run folder, cadences, resume, precision, release extras."""
    if cfg.trainer.get("deterministic", False):
        warnings.warn("trainer.deterministic=true: sampling and noise are seeded from `seed`, which is logged; "
                      "anyone who knows it can recompute the noise. Use for debugging only.", stacklevel=3)
    ctx = TrainContext(device=parts.device, logger=parts.logger, run_dir=folder.path, seed=parts.seed,
                        log_every=int(cfg.trainer.log_every), checkpoint_every=int(cfg.trainer.checkpoint_every),
                        resume_from=folder.resume_from, max_steps=cfg.trainer.max_steps,
                        fresh_noise=bool(cfg.trainer.get("fresh_noise", False)),
                        progress=bool(cfg.trainer.progress) and dist.is_main(),
                        deterministic=bool(cfg.trainer.get("deterministic", False)),
                        precision=check_precision(cfg.trainer.get("precision", 32)),
                        compile=check_compile(cfg.trainer.get("compile", "off")))
    try:
        ctx.graph = resolve_graph(cfg.trainer.get("graph", "auto"), torch.device(parts.device), ctx.compile,
                                  dist.world_size())
        ctx.graph_required = ctx.graph and check_graph(cfg.trainer.get("graph", "auto")) == "on"
    except ValueError as e:
        raise ConfigError(str(e)) from None
    ctx.release_extra = lambda led: release_info(OmegaConf.to_container(cfg, resolve=True), parts.data, parts.method,
                                                 led, parts.version, folder.path, processes=ctx.processes)
    return ctx


def _results(parts: _Parts, ctx: TrainContext, metrics: dict, train_metrics: dict, t0: float) -> dict:
    """results.json: what was released (privacy, with the paper convention's true ε), measured and run."""
    privacy = parts.ledger.summary()
    privacy["convention"] = "paper" if parts.convention else "honest"
    report = parts.method.convention_report() if parts.convention else None
    if parts.convention and not report:
        raise RuntimeError(f"{type(parts.method).__name__} ran with privacy.convention=paper but reports no true epsilon")
    privacy.update(report or {})
    return {
        "experiment": parts.name,
        "dataset": parts.data.name,
        **({"n_private": len(parts.data.private)} if n_is_public(privacy["neighbouring_relation"]) else {}),  # add/remove: N is private
        "metrics": metrics,
        "privacy": privacy,
        "train": train_metrics,
        "device": str(parts.device),
        "threads": parts.threads,
        "precision": ctx.precision,
        "runtime_s": time.time() - t0,
        "overrides": _overrides(),
        "git_commit": parts.version,  # provenance for the evidence store (dpgen/reproduce/evidence.py)
        "created_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),  # the start: the end would time the private run
    }


def _run_steps(cfg: DictConfig, folder: RunFolder, so_far: _SoFar) -> dict:
    """The phases of one run: ``_build`` (environment, settings, data, logger) -> ``_context`` ->
    ``loop.train`` -> ``evaluate_run`` (rank 0) -> ``_results`` (results.json) -> the printed summary."""
    t0 = time.time()
    parts = _build(cfg, folder.path)
    so_far.ledger, so_far.evaluator, so_far.logger, so_far.phase = parts.ledger, parts.evaluator, parts.logger, "training"
    so_far.base = {"experiment": parts.name, "dataset": parts.data.name, "overrides": _overrides(),
                   "git_commit": parts.version,
                   "created_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0))}
    try:
        ctx = _context(cfg, parts, folder)
        train_metrics = loop.train(parts.method, parts.data, parts.ledger, ctx)
        so_far.train, so_far.phase = train_metrics, "evaluation"
        rank = dist.rank()
        dist.shutdown()  # training is the only collective work: rank 0 evaluates alone (torchmetrics would sync)
        if rank != 0:  # rank 0 evaluates and writes the results
            so_far.phase = "done"
            return {"metrics": {}, "train": train_metrics, "rank": rank}
        metrics = evaluate_run(parts.evaluator, parts.method, parts.data, parts.logger, parts.seed, folder.path)
        if parts.data.private.outside_reads:  # e.g. DPImageBench's FID against the training images: the card names it
            add_evaluation_reads(folder.path, parts.data.private.outside_reads)
        parts.logger.open_after_training()  # W&B, if the evaluator did not open it while it evaluated
        so_far.phase = "summary"
        results = _results(parts, ctx, metrics, train_metrics, t0)  # a failed evaluation is kept (eval_error)
        parts.logger.log_summary(results)
        so_far.phase = "done"
    except RunInterrupted:
        parts.logger.local_only()  # no W&B upload now: the run that completes this folder sends the whole history
        raise
    finally:
        parts.logger.finish()
    print_summary(results)  # privacy | utility | provenance (dpgen/logging/summary.py)
    return results


def _overrides() -> list[str]:
    """The command-line overrides of this job (empty when run outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
