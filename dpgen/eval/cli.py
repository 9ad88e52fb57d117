"""``dpgen evaluate <run dir> [evaluator.key=value ...]``: evaluate a finished run again from its release.

    dpgen evaluate outputs/digits_moments/2026-11-25_16-00-00
    dpgen evaluate multirun/mnist_dpswd/<sweep>/0_accountant.epsilon=1 evaluator.fid.enabled=false

The method is rebuilt from the run folder's composed config (``.hydra/config.yaml``, with the data root the run
recorded in ``.dpgen/locations.json``) and its weights-only
release (``release.pt``); the dataset is loaded to rebuild its PUBLIC splits (test, and public when the
preset has one) and its private split is dropped before the method is built: the method and the
evaluator never read a private record, so re-evaluation is post-processing of the release and costs no
privacy.  ``results.json`` gets the new ``metrics`` (and ``evaluated``: when, with which overrides); its
``privacy`` section is left as it is and the privacy ledger is not touched.

Overrides may change ``evaluator.*`` (e.g. a smaller FID, another extractor), the evaluator itself
(``evaluator=<option of configs/evaluator/>``: a run trained with ``evaluator=none`` has nothing to evaluate
until one is chosen), ``paths.data_root`` and ``trainer.device``; nothing that would change the trained model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

ALLOWED_OVERRIDES = ("evaluator.", "evaluator=", "paths.data_root=", "trainer.device=")


class EvaluateError(ValueError):
    """The run folder cannot be re-evaluated; the message says why and what to do."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, help="a run folder (holds .hydra/config.yaml, the release file, results.json)")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                        help="evaluator=<option> / evaluator.* / paths.data_root / trainer.device overrides for this "
                             "evaluation")


def run(args: argparse.Namespace) -> int:
    from hydra.errors import InstantiationException

    from ..errors import UserError, one_line

    try:
        results = evaluate(args.run_dir, list(args.overrides))
    except Exception as e:  # noqa: BLE001 - a user's fault is one line; anything else keeps its traceback
        cause = e.__cause__ if isinstance(e, InstantiationException) and e.__cause__ is not None else e
        if not isinstance(cause, (EvaluateError, UserError)):
            raise
        print(f"error: {one_line(str(cause))}", file=sys.stderr)
        return 2
    from ..logging.summary import print_summary

    print_summary(results)
    return 0


def load_run_config(run_dir: Path, overrides: list[str]):
    """The run's composed config with its Hydra-runtime paths filled in and ``overrides`` applied: the
    output folder is ``run_dir``; the data root is the one the run recorded (``.dpgen/locations.json``)
    unless ``paths.data_root=`` is given (folders written before it was recorded: ``$DPGEN_DATA_ROOT``, else
    ``./data``); relative dataset paths start from the folder the run was started in."""
    from omegaconf import OmegaConf

    from ..runs import read_locations

    path = run_dir / ".hydra" / "config.yaml"
    if not path.is_file():
        raise EvaluateError(f"{run_dir} is not a run folder: {path} not found; pass the folder a `python train.py` "
                            "run wrote (outputs/<experiment>/<time>/ or one job folder of a multirun)")
    bad = [o for o in overrides if not o.startswith(ALLOWED_OVERRIDES) or "=" not in o]
    if bad:
        raise EvaluateError(f"cannot override {', '.join(bad)} when re-evaluating: only evaluator=<option>, evaluator.*, "
                            "paths.data_root and trainer.device may change (anything else would not be the trained model)")
    cfg = OmegaConf.load(path)
    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("evaluator=")]
    if chosen:
        cfg.evaluator = evaluator_option(chosen[-1])
        overrides = [o for o in overrides if not o.startswith("evaluator=")]
    elif str((cfg.get("evaluator") or {}).get("_target_", "")).endswith("NoEvaluator"):
        raise EvaluateError(f"{run_dir} was trained with evaluator=none: there is nothing to evaluate again until you "
                            f"choose an evaluator, e.g. `dpgen evaluate {run_dir} evaluator=generative` (options: "
                            "configs/evaluator/)")
    where = read_locations(run_dir)
    cfg.paths.output_dir = str(run_dir)
    cfg.paths.data_root = where.get("data_root") or os.environ.get("DPGEN_DATA_ROOT", str(Path.cwd() / "data"))
    started_in = Path(where.get("cwd") or Path.cwd())
    for key in ("path", "test_path"):  # own data: relative to the folder the run was started in
        value = cfg.dataset.get(key)
        if isinstance(value, str) and value and not Path(value).is_absolute():
            cfg.dataset[key] = str(started_in / value)
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(overrides))


def evaluator_option(name: str):
    """The ``evaluator`` node of the config group option ``name`` (``configs/evaluator/<name>.yaml`` composed by
    the one composer, its defaults included); an unknown option is an EvaluateError listing them."""
    from hydra.errors import MissingConfigException

    from ..config import compose
    from ..paths import CONFIGS

    try:
        return compose([f"evaluator={name}"]).evaluator
    except MissingConfigException:
        options = sorted(p.stem for p in (CONFIGS / "evaluator").glob("*.yaml"))
        raise EvaluateError(f"evaluator={name}: no such evaluator; choose one of {', '.join(options)}") from None


def public_view(data):
    """``data`` with its private split replaced by a stand-in of the same (public) size and record shape whose
    records are zeros: what a method's ``setup`` may touch while it is rebuilt from a release."""
    from ..data.base import PrivateSplit

    n, shape = len(data.private), data.private.feature_shape
    stand_in = PrivateSplit(torch.zeros(1, *shape).expand(n, *shape), torch.zeros(n, dtype=torch.long))
    return dataclasses.replace(data, private=stand_in, validation=None)  # held-out sensitive images: private too


def load_method(cfg, data, run_dir: Path, device: torch.device):
    """The trained method of ``run_dir`` from its release artefact; reads no private record.

    Methods with ``restore`` (the latent flows) rebuild themselves; any other method is set up on the
    public view of the data with a fresh in-memory ledger (calibration only, nothing is released or
    recorded), then its released weights are loaded over the fresh state (optimiser states etc. stay fresh:
    sampling and prediction do not use them)."""
    from hydra.utils import instantiate

    from ..methods.base import TrainContext, check_signature
    from ..privacy.conventions import paper_convention
    from ..utils import load_checkpoint

    convention = paper_convention(cfg.get("privacy"))
    method = instantiate(cfg.model, _convert_="all", **({"convention": convention} if convention else {}))
    artefact = run_dir / method.release_name
    if not artefact.is_file():
        raise EvaluateError(f"{artefact} not found: the run did not finish training (resume it in place with "
                            f"hydra.run.dir={run_dir} trainer.resume=true)")
    if hasattr(method, "restore"):
        method.restore(data, artefact, device)
        return method
    release = load_checkpoint(artefact)
    signature = release.pop("signature", {})
    ctx = TrainContext(device=device, logger=_NullLogger(), run_dir=run_dir, seed=int(cfg.get("seed", 0)),
                       progress=False)
    method.setup(data, instantiate(cfg.accountant, _convert_="all"), ctx)
    method.load_state_dict({**method.state_dict(), **release})
    try:
        check_signature(signature, {k: v for k, v in method.signature().items() if k in signature})
    except ValueError as e:
        raise EvaluateError(f"the rebuilt method does not match {artefact}: {e}") from None
    return method


def privacy_of_run(cfg, run_dir: Path, method) -> dict:
    """The privacy section of results.json from the run's final checkpoint: its ledger's summary, as the
    pipeline writes it (reads the ledger only, no private record)."""
    from hydra.utils import instantiate

    from ..runs import CHECKPOINT, read_checkpoint

    path = run_dir / CHECKPOINT
    if not path.is_file():
        raise EvaluateError(f"{run_dir} has no results.json and no {CHECKPOINT}: the privacy this run spent cannot be "
                            f"read, so its metrics would be published without it; resume the run in place "
                            f"(hydra.run.dir={run_dir}) to finish it")
    ledger = instantiate(cfg.accountant, _convert_="all")
    ledger.load_state_dict(read_checkpoint(path)["ledger"])
    privacy = ledger.summary()
    paper = (cfg.get("privacy") or {}).get("convention", "honest") == "paper"
    privacy["convention"] = "paper" if paper else "honest"
    if paper:
        privacy.update(method.convention_report() or {})
    return privacy


class _NullLogger:
    """A method's setup may log public images (e.g. autoencoder reconstructions); re-evaluation drops them."""

    def log_images(self, *args, **kwargs) -> None:
        pass

    def log_metrics(self, *args, **kwargs) -> None:
        pass


def check_writable(run_dir: Path) -> None:
    """``dpgen evaluate`` rewrites the run folder's results.json and sample grids: EvaluateError (before any work)
    when the folder cannot be written, with the fix (a writable copy)."""
    import tempfile

    fix = (f"`dpgen evaluate` rewrites results.json and the sample grids there; make it writable, or evaluate a "
           f"writable copy (cp -r {run_dir} <copy> && dpgen evaluate <copy>)")
    if not os.access(run_dir, os.W_OK | os.X_OK):
        raise EvaluateError(f"cannot write the run folder {run_dir} (permission denied or read-only): {fix}")
    try:
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".dpgen-probe-"):
            pass
    except OSError as e:
        raise EvaluateError(f"cannot write the run folder {run_dir} ({e.strerror or type(e).__name__}): {fix}") from None


def devices_here(cfg, overrides: list[str]) -> None:
    """A device the run recorded (``trainer.device`` / ``evaluator.device``) that this machine lacks becomes
    the CPU, with a line saying so (the release is the same model on any device); one given on this command
    line must exist (EvaluateError naming it)."""
    from ..utils import unavailable_device

    for setting in ("trainer.device", "evaluator.device"):
        group, key = setting.split(".")
        node = cfg.get(group)
        if node is None or key not in node:
            continue
        problem = unavailable_device(str(node[key]), setting)
        if problem is None:
            continue
        if any(o.startswith(f"{setting}=") for o in overrides):
            raise EvaluateError(problem)
        print(f"note: the run recorded {setting}={node[key]}, which this machine lacks: evaluating on the CPU "
              f"(another device: {setting}=<device>)", file=sys.stderr)
        node[key] = "cpu"


def evaluate(run_dir: str | Path, overrides: list[str] | None = None) -> dict:
    """Evaluate ``run_dir``'s release again and rewrite ``results.json``'s metrics; returns the results."""
    from hydra.utils import instantiate

    from ..logging import RunLogger
    from ..logging.summary import group_results
    from ..logging.timings import add_private_timings
    from ..utils import json_safe, pick_device, seed_everything
    from .evaluator import evaluate_run

    run_dir = Path(run_dir).resolve()
    overrides = list(overrides or [])
    cfg = load_run_config(run_dir, overrides)
    check_writable(run_dir)
    results_path = run_dir / "results.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    seed = int(cfg.get("seed", 0))
    seed_everything(seed)
    devices_here(cfg, overrides)
    device = pick_device(cfg.trainer.get("device", "auto"))
    evaluator = instantiate(cfg.evaluator, _convert_="all")
    if getattr(evaluator, "reads_private_data", False):
        raise EvaluateError(f"{type(evaluator).__name__} reads sensitive data (a selection on the held-out validation "
                            "images, an FID against the training images) and `dpgen evaluate` reads public data only; "
                            "run the evaluation with the training run (python train.py ... with this evaluator)")
    evaluator.check()
    data = instantiate(cfg.dataset)
    if getattr(data, "transductive_eval", False):
        raise EvaluateError("this run's test split is its private target data (dataset.test_fraction=0, transductive "
                            "protocol); `dpgen evaluate` reads public data only")
    data = public_view(data)
    evaluator.check(data)
    method = load_method(cfg, data, run_dir, device)
    metrics = evaluate_run(evaluator, method, data, RunLogger(run_dir), seed, run_dir)
    timings = {f"evaluate.{k}": metrics.pop(k) for k in [k for k in metrics if k.endswith("_time_s")]}
    add_private_timings(run_dir, timings)  # wall-clock times stay private (dpgen.logging.timings)
    results.update({"metrics": metrics, "evaluated": {
        "by": "dpgen evaluate", "overrides": overrides, "device": str(device),
        "created_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}})
    results.setdefault("experiment", cfg.get("experiment_name", "run"))
    results.setdefault("dataset", data.name)
    if "privacy" not in results:  # a run stopped before its results.json: the ledger in its checkpoint says
        results["privacy"] = privacy_of_run(cfg, run_dir, method)
    results["summary"] = group_results(results)
    tmp = results_path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(json_safe(results), indent=2, sort_keys=True))
    os.replace(tmp, results_path)
    return results
