"""The config of a run: ``compose`` (the one composer of ``train.yaml`` on ``paths.CONFIGS``), schemas and
validation (bad values fail before any data is loaded).

Importing this module is cheap (no torch, no privacy core): the command-line checks compose with it before
anything heavy is imported; the checks that need the privacy core import it when they run.

Typed schemas for the groups whose values users sweep (accountant, trainer) are merged over the
composed config, so a wrong type (``accountant.epsilon=abc``) fails with OmegaConf's message;
``validate`` then checks the values and names the setting and the fix.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, suggestion
from .paths import CONFIGS, IN_CHECKOUT

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from .privacy.errors import PrivacySettingError

CONFIG_NAME = "train"  # configs/train.yaml: what train.py, dpgen train and the Python API compose


def require_checkout(command: str) -> None:
    """Refuse ``command`` (one ``ConfigError`` line) where dpgen runs from an installed package: it reads or
    writes the checkout's ``docs/`` or ``configs/`` (the scoreboard, benchmarks, the presets guide)."""
    if not IN_CHECKOUT:
        raise ConfigError(f"`{command}` reads and writes the docs/ and configs/ of a source checkout, which an "
                          "installed package does not have: run it in a clone of the repository (pip install -e .)")


NO_PRESET = "no_preset"  # the experiment_name of a run composed from the raw groups (experiment=null)


def without_preset(overrides: list[str]) -> list[str]:
    """``experiment=null`` (no preset: the raw groups of train.yaml) as Hydra spells it, ``~experiment``, with the
    run named ``no_preset`` unless ``experiment_name`` is given (the embedded preset's name would be a wrong label).
    Hydra itself refuses ``group=null`` on the command line (a ValueError about a NoneType)."""
    if not any(o.strip() in ("experiment=null", "experiment=None", "experiment=~") for o in overrides):
        return overrides
    out = [o for o in overrides if o.strip() not in ("experiment=null", "experiment=None", "experiment=~")]
    named = any(o.lstrip("+~").startswith("experiment_name=") for o in out)
    return [*out, "~experiment", *([] if named else [f"experiment_name={NO_PRESET}"])]


def compose(overrides: list[str], *, config_dir: Path = CONFIGS, hydra_node: bool = False,
            data_root: str | Path | None = None, output_dir: str | Path | None = None) -> DictConfig:
    """THE composition of ``train.yaml`` with ``overrides`` (what ``python train.py <overrides>`` runs), outside a
    Hydra app.  ``config_dir``: another copy of the configs; ``hydra_node``: keep the ``hydra`` node;
    ``data_root`` / ``output_dir``: set ``paths.data_root`` / ``paths.output_dir``.  Hydra's own errors
    (an unknown key or option) are raised as they are: the callers turn them into one line."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    overrides = without_preset(overrides)
    extra = ([] if data_root is None else [f"paths.data_root={data_root}"]) + \
        ([] if output_dir is None else [f"paths.output_dir={output_dir}"])
    GlobalHydra.instance().clear()  # a Hydra app (or a previous composition) of this process may hold it
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        return hydra_compose(CONFIG_NAME, overrides=[*overrides, *extra], return_hydra_config=hydra_node)


@dataclass
class AccountantSchema:
    _target_: str = "dpgen.privacy.PrivacyLedger"
    epsilon: float | None = 10.0
    delta: float = 1e-5
    sampling: str = "poisson"
    data_dependent_reports: bool = False  # WA/BA/MA reports from un-noised private statistics: run labelled "not DP"
    calibrate_with: str = "auto"


@dataclass
class TrainerSchema:
    device: str = "auto"
    threads: Any = 1  # int >= 1 or "auto" (dpgen.utils.threads)
    precision: Any = 32  # 32 | bf16 (dpgen.utils.autocast: model forwards only, never the privacy maths)
    compile: Any = "off"  # off | on (dpgen.utils.compiling: the model, public loss and optimiser step; never the release)
    graph: Any = "auto"  # auto | on | off (dpgen.methods.capture: the whole step captured once and replayed)
    log_every: int = 50
    checkpoint_every: int = 500
    resume: Any = "auto"  # auto | true | false | <run folder or .pt> (dpgen/runs.py)
    fresh_noise: bool = False  # with trainer.resume=<run folder or .pt>: a branch with fresh secret noise (methods/loop.py)
    overwrite: bool = False
    max_steps: int | None = None
    progress: bool = True
    deterministic: bool = False


REQUIRED = ("dataset", "model", "accountant", "evaluator", "logger", "trainer", "paths")
# methods with model/warm_start=class_gaussian (dpgen/methods/warm_start.py): class name -> what users call it
WARM_STARTABLE = {"DPSWDGenerator": "the DP-SWD generator", "DPSinkhorn": "DP-Sinkhorn", "DPSWGen": "DPSWgen",
                  "DPSWFlowR": "DPSWflow-r"}


def validate(cfg: DictConfig) -> None:
    """Raise :class:`ConfigError` naming the first bad setting.  Touches no data."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, ValidationError

    from .privacy.accountants import SAMPLING_SCHEMES, calibrating_accountant
    from .privacy.errors import PrivacySettingError
    from .utils.settings import check_compile, check_graph, check_precision
    from .utils.threads import resolve_threads

    for group in REQUIRED:
        if group not in cfg or cfg[group] is None:
            raise ConfigError(f"config group '{group}' is missing; add '- {group}: <option>' to the defaults")
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise ConfigError(f"required setting(s) not given: {', '.join(missing)}; pass them as overrides, "
                          f"e.g. {missing[0]}=<value>")
    for name, schema in (("accountant", AccountantSchema), ("trainer", TrainerSchema)):
        try:
            OmegaConf.merge(OmegaConf.structured(schema), cfg[name])
        except ValidationError as e:
            key = getattr(e, "full_key", None) or getattr(e, "key", "?")
            raise ConfigError(f"{name}.{key}: {e.msg if hasattr(e, 'msg') else e}") from None
        except ConfigKeyError as e:  # e.g. +accountant.epsilonn=3: a key nothing reads
            key = str(getattr(e, "key", "?"))
            fields = [f.name for f in dataclasses.fields(schema)]
            raise ConfigError(f"{name}.{key} is not a setting;{suggestion(key, fields) or ' ' + name + ' has: ' + ', '.join(fields)}"
                              f" (drop the '+' key or fix its name)") from None

    warm = cfg.model.get("warm_start")
    target = str(cfg.model.get("_target_", "")).rsplit(".", 1)[-1]
    if warm is not None and target not in WARM_STARTABLE:
        raise ConfigError(f"model/warm_start is for {', '.join(WARM_STARTABLE.values())} only, not model {target}; "
                          "drop +model/warm_start (or choose, e.g., experiment=mnist_dpswd_partition)")

    acc = cfg.accountant
    eps = acc.get("epsilon")
    if eps is not None and not (float(eps) > 0 and math.isfinite(float(eps))):
        raise ConfigError(f"accountant.epsilon must be a positive finite number, got {eps}; e.g. "
                          "accountant.epsilon=10 (use the non-private preset mnist_swd for no privacy)")
    delta = float(acc.get("delta"))
    if not 0.0 < delta < 1.0:
        raise ConfigError(f"accountant.delta must be in (0, 1), got {delta}; typical: accountant.delta=1e-5 "
                          "(smaller than 1/N for N private records)")
    if acc.get("sampling") not in SAMPLING_SCHEMES:
        raise ConfigError(f"accountant.sampling={acc.get('sampling')!r} is not a known sampling scheme; choose "
                          f"{' or '.join(SAMPLING_SCHEMES)}")
    if acc.get("data_dependent_reports", False) and acc.get("sampling") != "poisson":
        raise ConfigError("accountant.data_dependent_reports=true (WA/BA/MA) is implemented for Poisson sampling only: "
                          "set accountant.sampling=poisson or accountant.data_dependent_reports=false")
    try:
        calibrating_accountant(acc.get("sampling"), acc.get("calibrate_with", "auto"))
    except PrivacySettingError as e:
        raise privacy_setting_error(e) from None
    private = cfg.model.get("private", True)
    convention = validate_convention(cfg)
    if private and eps is None and convention == "honest":
        raise ConfigError("accountant.epsilon=null needs model.private=false (a non-private run); set "
                          "accountant.epsilon to a number for a private run")
    try:
        resolve_threads(cfg.trainer.get("threads", 1), cores=1, jobs=1)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    try:
        check_precision(cfg.trainer.get("precision", 32))
        check_compile(cfg.trainer.get("compile", "off"))
        check_graph(cfg.trainer.get("graph", "auto"))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    resume = cfg.trainer.get("resume", "auto")
    if isinstance(resume, str) and resume not in ("auto", "true", "false") and not Path(resume).exists():
        raise ConfigError(f"trainer.resume={resume!r}: no such run folder or checkpoint")
    if cfg.trainer.get("fresh_noise", False) and str(resume).lower() in ("auto", "true", "false"):
        raise ConfigError("trainer.fresh_noise=true branches a run from its checkpoint: name the run with "
                          "trainer.resume=<run folder or .pt> and give the branch its own hydra.run.dir=<new folder>")
    from .logging.wandb_checks import check_wandb
    check_delta_of_config(cfg)  # δ < 1/N when the dataset config bounds N (before any data is loaded)

    check_wandb(cfg.logger.get("wandb"))  # WANDB_MODE (environment) wins; online needs a W&B login


def _positive_int(value, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be a positive integer, got {value!r}")
    return value


def validate_convention(cfg: DictConfig) -> str:
    """``privacy.convention``: ``honest`` (default) or ``paper`` (a published setting that breaks its own
    guarantee, for the methods of ``privacy.conventions.METHODS`` only).  Returns the convention."""
    from .privacy.conventions import (
        CONVENTIONS,
        METHODS,
        NO_CONVENTION,
        PaperConvention,
        convention_of,
    )
    from .privacy.errors import PrivacySettingError

    pc = cfg.get("privacy") or {}
    convention = pc.get("convention", "honest")
    if convention not in CONVENTIONS:
        raise ConfigError(f"privacy.convention={convention!r} is unknown; choose {' or '.join(CONVENTIONS)} "
                          "(paper: only through the *_paper presets, e.g. experiment=mnist_dpswd_paper)")
    if convention == "honest":
        for key in ("paper_sigma", "paper_epsilon", "paper_sensitivity_dim"):
            if pc.get(key) is not None:
                raise ConfigError(f"privacy.{key} is used only with privacy.convention=paper; drop it (or use a "
                                  "*_paper preset)")
        return convention
    name = convention_of(cfg.model.get("_target_", ""))
    if name in NO_CONVENTION:
        raise ConfigError(f"privacy.convention=paper: {NO_CONVENTION[name]}")
    if name not in METHODS:
        raise ConfigError(f"privacy.convention=paper is defined for {', '.join(METHODS)} only, not model {name}; "
                          "set privacy.convention=honest")
    if name == "DomainAdaptation" and convention_of(cfg.model.alignment.get("_target_", "")) != "DPSWDAlignment":
        raise ConfigError("privacy.convention=paper for domain adaptation is the DP-SWD paper's batch scaling: it needs "
                          "the dpswd alignment (experiment=mnist_usps_dpswd_paper); set privacy.convention=honest")
    if not cfg.model.get("private", True):
        raise ConfigError("privacy.convention=paper reproduces a private setting: drop model.private=false (or set "
                          "privacy.convention=honest for the non-private baseline)")
    if cfg.accountant.get("epsilon") is not None:
        raise ConfigError("privacy.convention=paper fixes the noise at the paper's privacy.paper_sigma and runs the "
                          "paper's schedule: set accountant.epsilon=null (the paper's ε goes in privacy.paper_epsilon)")
    sigma = pc.get("paper_sigma")
    if sigma is None and name != "DPSWFlow":
        raise ConfigError(f"privacy.convention=paper for {name} needs privacy.paper_sigma (the paper's noise: "
                          f"{METHODS[name]})")
    dim = pc.get("paper_sensitivity_dim")
    if dim is not None and name != "DPSWGen":
        raise ConfigError(f"privacy.paper_sensitivity_dim={dim}: only the released DPSWgen latent trainer states its "
                          f"sensitivity at another dimension than its rows' (DPSWflow paper, DPSWgen baseline); drop it for {name}")
    try:
        PaperConvention(None if sigma is None else float(sigma), float(pc.get("paper_epsilon") or 0.0),
                        None if dim is None else _positive_int(dim, "privacy.paper_sensitivity_dim"))
    except PrivacySettingError as e:
        raise privacy_setting_error(e) from None
    return convention


# the privacy core names a setting in its own words (PrivacySettingError.setting); the config key it comes from
PRIVACY_SETTINGS = {
    "target_epsilon": "accountant.epsilon", "delta": "accountant.delta", "sampling": "accountant.sampling",
    "calibrate_with": "accountant.calibrate_with", "bound": "model.dp.bound", "directions": "model.dp.directions",
    "num_projections": "model.dp.num_projections", "sensitivity_fraction": "model.dp.sensitivity_fraction",
    "calibration": "model.calibration", "clip": "model.clip", "clip_norm": "model.clip_norm",
    "moment_shares": "model.moment_shares", "shrinkage": "model.shrinkage", "noise_multiplier": "model.noise_multiplier",
    "alignment.noise_multiplier": "model.alignment.noise_multiplier", "alignment.noise_std": "model.alignment.noise_std",
    "noise_std": "model.noise_std", "smoothing_std": "model.noise_std", "paper_sigma": "privacy.paper_sigma",
    "paper_epsilon": "privacy.paper_epsilon", "stated_dim": "privacy.paper_sensitivity_dim",
    "data_dependent_reports": "accountant.data_dependent_reports", "batch_size": "model.batch_size",
    "label_mode": "model.label_mode", "radius": "model.radius", "wa_order": "model.wa_order",
}


def check_delta_of_config(cfg, n: int | None = None) -> None:
    """δ < 1/N for a private run: N = ``n`` (the loaded private split) or, before loading (``n=None``),
    the dataset config's known bound (no check when there is none).  Refused as ``accountant.delta``."""
    from .privacy.delta import check_delta, known_record_bound
    from .privacy.errors import PrivacySettingError

    if not cfg.model.get("private", True):
        return
    try:
        if n is None:
            bound = known_record_bound(cfg.dataset)
            if bound is not None:
                check_delta(cfg.accountant.delta, bound, bound=True)
            return
        check_delta(cfg.accountant.delta, n)
    except PrivacySettingError as e:
        raise privacy_setting_error(e) from None


def privacy_setting_error(e: PrivacySettingError) -> ConfigError:
    """The privacy core's error as a :class:`ConfigError` naming the config key of its setting."""
    return ConfigError(f"{PRIVACY_SETTINGS.get(e.setting, e.setting)}: {e}")


def single_process_only(cfg, nproc: int) -> str | None:
    """Why the composed ``cfg`` cannot run on ``nproc`` > 1 processes, or None."""
    if nproc > 1 and cfg.accountant.get("data_dependent_reports", False):
        return SINGLE_PROCESS_REPORTS
    return None


SINGLE_PROCESS_REPORTS = ("accountant.data_dependent_reports=true (the reported-only WA / BA / MA accountants) reads "
                          "per-record gradients of the whole batch in one process: run it on one process (without "
                          "--nproc / torchrun), or add accountant.data_dependent_reports=false")
