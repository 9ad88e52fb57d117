"""Checks of a ``train.py`` command line made BEFORE Hydra starts the run (so a fault leaves no folder).

Hydra composes the config and creates the run folder before dpgen's code runs; faults in either
step end in Hydra's multi-line report (exit 1) or a raw traceback.  :func:`preflight` composes the
same config first (Hydra's compose API, the first value of each sweep) and returns ONE line naming
the fault and the fix, or None when the run may start:

* an unknown preset or group option (``experiment=celeba_dpwsd``) -> the closest option names;
* an unknown setting (``trainer.max_step=3``) -> the closest keys beside it;
* a ``+key`` that only misspells an existing setting (``+accountant.epsilonn=3``: Hydra would add a
  new key that nothing reads) -> the setting it resembles;
* a run folder (``hydra.run.dir`` / ``hydra.sweep.dir``) that cannot be created or written (probed by rank 0
  only: under torchrun the other ranks write nothing; the folder resolved here is the one the run claims,
  :data:`CHECKED`);
* a device this machine lacks (``trainer.device=cuda`` / ``evaluator.device=cuda`` without a GPU; with
  ``dpgen train --nproc N`` on GPUs, fewer than N of them).

Hydra's own flags (``--help``, ``--cfg``, ``--info`` ...) skip the checks: Hydra answers them.
"""

from __future__ import annotations

import os
from pathlib import Path

from .config import compose, single_process_only
from .errors import did_you_mean, one_line
from .paths import CONFIGS

_RUN_FLAGS = {"-m", "--multirun", "-r", "--run"}  # anything else starting with "-" is Hydra's to answer
CREATED: list[Path] = []  # the run folder and the parents it lacked when checked (removed again if left empty)
CHECKED: list[Path] = []  # the run (or sweep) folder the last command line names, resolved (its clock included)
PER_SAMPLE_PATHS = ("auto", "vmap", "unfold", "ghost")  # privacy.per_sample.RULE_CHOICES (tests/privacy/test_per_sample.py)
PLUS_NOTE = "(Hydra's '+key=value' adds a NEW setting that nothing reads; use it only for that.)"


def preflight(argv: list[str], config_dir: Path = CONFIGS, nproc: int = 1) -> str | None:
    """The one-line fault of the command line ``argv`` (overrides and flags of ``train.py``), or None.
    ``nproc``: the processes ``dpgen train --nproc`` is about to start (what cannot run on several is refused
    before they start)."""
    CHECKED.clear()
    flags = [a for a in argv if a.startswith("-")]
    if any(f not in _RUN_FLAGS for f in flags):
        return None
    multirun = any(f in ("-m", "--multirun") for f in flags)
    from hydra.errors import OverrideParseException

    try:
        overrides = first_values([a for a in argv if not a.startswith("-")])
    except OverrideParseException as err:
        return f"cannot read the command line: {one_line(err)} (write each setting as key=value)"
    cfg, problem = _compose(overrides, config_dir)
    if problem is not None:
        return problem
    return (misspelt_additions(overrides, cfg) or bad_per_sample(cfg) or unavailable_devices(cfg, nproc)
            or invalid_value(cfg) or unwritable_run_dir(cfg, multirun) or single_process_only(cfg, nproc))


def bad_per_sample(cfg) -> str | None:
    """``model.per_sample`` / ``model.alignment.per_sample`` (DP-SGD, DP-DANN) outside the per-sample paths
    (:data:`PER_SAMPLE_PATHS`, ``privacy.per_sample.RULE_CHOICES``: written here so the check loads no torch)."""
    model = cfg.get("model") or {}
    for key, node in (("model.per_sample", model), ("model.alignment.per_sample", model.get("alignment") or {})):
        value = node.get("per_sample") if hasattr(node, "get") else None
        if value is not None and value not in PER_SAMPLE_PATHS:
            return (f"{key}={value!r} is not a per-sample path: choose one of {', '.join(PER_SAMPLE_PATHS)} "
                    "(auto: the layer rules where every trainable layer has one, else vmap)")
    return None


def first_values(overrides: list[str]) -> list[str]:
    """``overrides`` with every sweep (``a=1,2``, ``range(..)``) replaced by its first value: the
    config a multirun's first job composes (enough to find a misspelt key or option)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    out = []
    for o in parsed:
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()), None)
            if first is None:
                continue
            out.append(f"{o.input_line.split('=', 1)[0]}={first}")
        else:
            out.append(o.input_line)
    return out


def _compose(overrides: list[str], config_dir: Path):
    """(config with its ``hydra`` node, None) or (None, the one-line composition fault).

    A misspelt key is found on the composition of the group choices alone (``experiment=...``, ``model=...``):
    a typo is refused after ONE composition; a good command line is then composed whole."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import (
        ConfigCompositionException,
        MissingConfigException,
    )

    try:
        choices, keys = _split(overrides, config_dir)
        if keys:
            hints = _hints(keys, compose(choices, config_dir=config_dir), _groups(config_dir))
            if hints:
                return None, _line(hints)
        return compose(overrides, config_dir=config_dir, hydra_node=True), None
    except MissingConfigException as err:
        return None, missing_option(err, overrides)
    except ConfigCompositionException as err:
        return None, one_line(err)
    finally:
        GlobalHydra.instance().clear()


def missing_option(err, overrides: list[str]) -> str:
    """``experiment=celeba_dpwsd``: the group, the closest option names and where to list them all."""
    missing = str(getattr(err, "missing_cfg_file", "") or "")
    group, _, name = missing.rpartition("/")
    options = list(getattr(err, "options", None) or [])
    if not group or not options:
        return one_line(err)
    close = did_you_mean(name, options, n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(f'{group}={c}' for c in close)}?" if close else \
        f"choose one of: {', '.join(options)}"
    listing = " (all presets: `dpgen presets`)" if group == "experiment" else ""
    return f"{group}={name}: no such {group} option (no configs/{group}/{name}.yaml); {hint}{listing}"


def _flat_keys(node, prefix: str = "") -> list[str]:
    """Every dotted key of a config (values unresolved)."""
    from omegaconf import DictConfig

    keys = []
    for key in node.keys() if isinstance(node, DictConfig) else []:
        dotted = f"{prefix}{key}"
        keys.append(dotted)
        child = node._get_node(key)
        if isinstance(child, DictConfig):
            keys += _flat_keys(child, dotted + ".")
    return keys


def _close_keys(key: str, known: list[str]) -> tuple[list[str], list[str]]:
    """(close matches of ``key`` among the keys beside it — or anywhere when it has no parent —, its siblings)."""
    parent, _, leaf = key.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == parent and k != key] \
        if parent in known else []
    if siblings:
        return [f"{parent}.{c}" for c in did_you_mean(leaf, siblings, n=2)], siblings
    return did_you_mean(key, [k for k in known if k != key], n=2), []


def _groups(config_dir: Path) -> set[str]:
    """The config groups (``experiment``, ``dataset``, ...): the folders of ``config_dir``."""
    return {p.name for p in config_dir.iterdir() if p.is_dir() and not p.name.startswith("_")}


def _split(overrides: list[str], config_dir: Path) -> tuple[list[str], dict[str, str]]:
    """(the group choices, e.g. ``dataset=mnist``, first value of a sweep; the plain keys ``a.b=1`` with their
    values); ``+``/``~`` overrides, ``hydra.*`` keys and flags are left out."""
    groups = _groups(config_dir)
    choices, keys = [], {}
    for arg in overrides:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        if key.startswith(("+", "~", "hydra")):
            continue
        if key in groups or "/" in key:
            choices.append(f"{key}={value.split(',')[0]}")
        else:
            keys[key] = value
    return choices, keys


def _hints(keys: dict[str, str], cfg, groups: set[str] = frozenset()) -> list[str]:
    """A did-you-mean phrase for each of ``keys`` (key -> value) that ``cfg`` does not have; a top-level key
    closest to a config group (``experimnt=x``) is pointed at the group (``experiment=x``)."""
    known = _flat_keys(cfg)
    hints = []
    for key, value in keys.items():
        if key in known:
            continue
        close, siblings = _close_keys(key, known)
        group = did_you_mean(key, [*groups, *close], n=1) if "." not in key else []
        if group and group[0] in groups:
            hints.append(f"'{key}' is not a setting; did you mean {group[0]}={value}?")
        elif close:
            hints.append(f"'{key}' is not a setting; did you mean {' or '.join(repr(c) for c in close)}?")
        elif siblings:
            hints.append(f"'{key}' is not a setting; {key.rpartition('.')[0]} has: {', '.join(siblings)}")
        else:
            hints.append(f"'{key}' is not a setting")
    return hints


def _line(hints: list[str]) -> str:
    return "; ".join(hints) + " (a typo? the settings of a group: `python train.py --cfg job`)"


def unknown_key_hints(overrides: list[str], config_dir: Path = CONFIGS) -> list[str]:
    """For each ``key=value`` override whose key is not in the composed config: a did-you-mean phrase.

    Group choices (``dataset=mnist``) compose the config the keys are looked up in; ``+``/``~``
    overrides and ``hydra.*`` keys are left alone.
    """
    from hydra.core.global_hydra import GlobalHydra

    choices, keys = _split(overrides, config_dir)
    if not keys:
        return []
    try:
        cfg = compose(choices, config_dir=config_dir)
    except Exception:  # noqa: BLE001 - the group choices themselves are wrong: reported on their own
        return []
    finally:
        GlobalHydra.instance().clear()
    return _hints(keys, cfg, _groups(config_dir))


def misspelt_additions(overrides: list[str], cfg) -> str | None:
    """A ``+key=value`` whose key is a near-miss of an existing setting beside it (``+accountant.epsilonn``)."""
    known = _flat_keys(cfg)
    for arg in overrides:
        if not arg.startswith("+") or arg.startswith("++") or "=" not in arg:
            continue
        key, value = arg[1:].split("=", 1)
        if "/" in key or "." not in key:  # +group=option and new top-level keys are Hydra's business
            continue
        close, _ = _close_keys(key, known)
        if close:
            return (f"'+{key}' adds a new setting that nothing reads; did you mean {close[0]}={value}? "
                    f"{PLUS_NOTE}")
    return None


def unavailable_devices(cfg, nproc: int = 1) -> str | None:
    """A device setting this machine cannot honour: ``trainer.device`` / ``evaluator.device`` naming a GPU it
    lacks, or ``nproc`` processes on GPUs (``trainer.device`` cuda, or auto with a GPU) with fewer GPUs than
    processes.  What is certain without torch (no GPU driver at all) is said without it; torch is imported only
    where a GPU may be there and a device is named or several processes are asked for."""
    from omegaconf import OmegaConf

    from .utils.settings import certainly_no_cuda_gpu, device_problem_before_torch

    values = {s: str(OmegaConf.select(cfg, s, default="auto", throw_on_resolution_failure=False) or "auto")
              for s in ("trainer.device", "evaluator.device")}
    named = {s: v for s, v in values.items() if v not in ("auto", "cpu")}
    for setting, value in named.items():
        if (problem := device_problem_before_torch(value, setting)) is not None:
            return problem
    if named:  # a GPU that may be there: torch says whether it is
        from .utils import unavailable_device

        for setting, value in named.items():
            if (problem := unavailable_device(value, setting)) is not None:
                return problem
    device = values["trainer.device"]
    if nproc > 1 and device != "cpu":
        gpus = 0 if certainly_no_cuda_gpu() else _gpu_count()
        if 0 < gpus < nproc or (gpus == 0 and device != "auto"):
            return (f"dpgen train --nproc {nproc} with trainer.device={device} needs a GPU per process and this machine "
                    f"has {gpus}: use --nproc {gpus}, or trainer.device=cpu (the processes share the CPU, on gloo)")
    return None


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def invalid_value(cfg) -> str | None:
    """The one-line fault of a setting's value (:func:`dpgen.config.validate`: ε, δ, a required dataset setting,
    the sampling scheme, threads, precision, W&B mode ...) in the composed ``cfg``, found before torch loads.
    The config is validated as the run will see it: Hydra's runtime values (the working folder, the run folder)
    are filled in as the app fills them.  A config only the app can resolve is left to the run (None)."""
    import copy

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    from .config import validate
    from .errors import ConfigError

    full = copy.deepcopy(cfg)
    with open_dict(full):
        full.hydra.runtime.cwd = os.getcwd()
        out = OmegaConf.select(full, "hydra.run.dir", default=".", throw_on_resolution_failure=False)
        full.hydra.runtime.output_dir = str(Path(str(out)).absolute())
    run_cfg = copy.deepcopy(full)
    with open_dict(run_cfg):
        del run_cfg["hydra"]
    previous = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(full)
    try:
        validate(run_cfg)
    except ConfigError as err:
        return one_line(str(err))
    except Exception:  # noqa: BLE001 - what only the app resolves (a sweep's job number ...): the run reports it
        return None
    finally:
        HydraConfig.instance().cfg = previous
    return None


def unwritable_run_dir(cfg, multirun: bool) -> str | None:
    """The run folder (``hydra.run.dir``; ``hydra.sweep.dir`` in a multirun) must be creatable and writable."""
    from omegaconf import OmegaConf

    setting = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    CHECKED.clear()
    try:
        folder = Path(str(OmegaConf.select(cfg, setting, throw_on_resolution_failure=True)))
    except Exception:  # noqa: BLE001 - an interpolation only Hydra's app can resolve: Hydra will report it
        return None
    CHECKED.append(folder)
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 checks (and makes) the one folder; the others write nothing
        return None
    return writable_folder_problem(folder, setting)


def writable_folder_problem(folder: Path, setting: str) -> str | None:
    """Why ``folder`` cannot be created or written (naming ``setting`` and the fix), or None."""
    fix = f"fix: choose a writable folder with {setting}=<folder>, or fix the permissions"
    path = folder if folder.is_absolute() else Path.cwd() / folder
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot create the run folder {folder}: {existing} is a file, not a folder; {fix}"
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "the run folder" if existing == path else f"the run folder {folder}: its parent"
        return f"cannot write {what} {existing} (permission denied or read-only); {fix}"
    return _probe(path, existing, folder, fix)


def _probe(path: Path, existing: Path, folder: Path, fix: str) -> str | None:
    """Create the folder and a file in it, as the run will, then remove what the probe made: the OS has the
    last word (``os.access`` cannot see every read-only mount, ACL or special file system)."""
    import tempfile

    made: list[Path] = []
    CREATED[:] = [p for p in (path, *path.parents) if not p.exists()]  # the folders the run will make: train.py
    try:
        for p in reversed([path, *path.parents]):
            if p == existing or p in existing.parents or p.exists():
                continue
            p.mkdir()
            made.append(p)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".dpgen-probe-"):
            pass
    except OSError as e:
        where = e.filename or path
        return f"cannot create the run folder {folder}: {e.strerror or type(e).__name__} ({where}); {fix}"
    finally:
        for p in reversed(made):
            try:
                p.rmdir()
            except OSError:
                pass
    return None
