"""dpgen entry point: ``python train.py experiment=<dataset>_<method> [overrides]``."""

from __future__ import annotations

import difflib
import math
import shutil
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

CONFIGS = Path(__file__).resolve().parent / "configs"


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    from dpgen.pipeline import run

    try:
        results = run(cfg)
    except Exception as err:
        message = user_error(err)
        if message is None:  # a bug keeps its traceback
            raise
        if _is_multirun():  # a sweep reports through Hydra: the user's error itself, not Hydra's wrapper of it
            raise _unwrap(err) from None
        _remove_untouched_run_dir()
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    metric = cfg.get("optimized_metric")
    if metric is None:
        return None
    value = results["metrics"].get(metric)
    return float(value) if value is not None and math.isfinite(float(value)) else None


def user_error(err: BaseException) -> str | None:
    """The message of a user's mistake (a bad setting, missing data), printed without a traceback;
    None for anything else.  Hydra wraps errors raised while instantiating a target: unwrap them."""
    from dpgen.config import ConfigError
    from dpgen.data.base import DatasetNotFoundError

    cause = _unwrap(err)
    return str(cause) if isinstance(cause, (ConfigError, DatasetNotFoundError)) else None


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
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    from dpgen.runs import STATE_DIR, in_use

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    if not run_dir.is_dir() or in_use(run_dir):  # another run's folder (a refused second start): never touched
        return
    for entry in run_dir.iterdir():
        if entry.name in (".hydra", STATE_DIR) and entry.is_dir():
            continue
        if entry.suffix == ".log" and entry.is_file() and entry.stat().st_size == 0:
            continue
        return
    shutil.rmtree(run_dir, ignore_errors=True)


# ---------------------------------------------------------------------------- did you mean
def _flat_keys(node, prefix: str = "") -> list[str]:
    """Every dotted key of a config (values unresolved)."""
    from omegaconf import DictConfig as _Dict

    keys = []
    for key in node.keys() if isinstance(node, _Dict) else []:
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        child = node._get_node(key)
        if isinstance(child, _Dict):
            keys += _flat_keys(child, dotted + ".")
    return keys


def unknown_key_hints(overrides: list[str]) -> list[str]:
    """For each ``key=value`` override whose key is not in the composed config: a did-you-mean line.

    Group choices (``dataset=mnist``), ``+``/``~`` overrides and ``hydra.*`` keys are left to Hydra.
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    groups = {p.name for p in CONFIGS.iterdir() if p.is_dir()}
    choices, keys = [], []
    for arg in overrides:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key.startswith(("+", "~", "hydra")):
            continue
        if key in groups or "/" in key:
            choices.append(f"{key}={value.split(',')[0]}")
        else:
            keys.append(key)
    if not keys:
        return []
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
            cfg = compose("train", overrides=choices)
    except Exception:  # noqa: BLE001 - the group choices themselves are wrong: Hydra has said so
        return []
    known = _flat_keys(cfg)
    hints = []
    for key in keys:
        if key in known:
            continue
        parent, _, leaf = key.rpartition(".")
        siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent] if parent in known else []
        if siblings:  # compare the last part with the keys beside it
            close = [f"{parent}.{c}" for c in difflib.get_close_matches(leaf, siblings, n=2, cutoff=0.6)]
        else:
            close = difflib.get_close_matches(key, known, n=2, cutoff=0.6)
        if close:
            hints.append(f"dpgen: '{key}' is not a setting; did you mean {' or '.join(repr(c) for c in close)}?")
        elif siblings:
            hints.append(f"dpgen: '{key}' is not a setting; {parent} has: {', '.join(siblings)}")
        else:
            hints.append(f"dpgen: '{key}' is not a setting")
    if hints:
        hints.append("(Hydra's '+key=value' adds a NEW setting that nothing reads; use it only for that.)")
    return hints


def _print_hints() -> None:
    for line in unknown_key_hints(sys.argv[1:]):
        print(line, file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except SystemExit as exit_:
        if exit_.code == 1:  # Hydra's composition errors: add what the user probably meant
            _print_hints()
        raise
    except Exception as err:  # HYDRA_FULL_ERROR=1: Hydra re-raises instead of exiting
        from hydra.errors import ConfigCompositionException

        if isinstance(err, ConfigCompositionException):
            _print_hints()
        raise
