"""Run folders: one owner at a time, resume or refuse, never a silent overwrite (docs/guides/runs.md).

``claim_run_folder(cfg)`` is the first thing a run does with its folder (``paths.output_dir``):

1. lock ``.dpgen/lock`` (``filelock``: an OS ``flock``, released by the kernel when the process dies,
   so the lock of a ``kill -9``-ed run is free again at once) for the run's whole life; a second run
   into a locked folder fails at once naming the folder and the holder (``.dpgen/holder.json``: pid,
   host, start time, command line);
2. decide from ``trainer.resume`` (``auto`` | ``true`` | ``false`` | a run folder or checkpoint) and
   ``trainer.overwrite`` whether the run resumes the folder's checkpoint, starts fresh, or is refused:
   a folder holding a run is continued only by a run with the same settings (the run signature in
   ``.dpgen/signature.json``: experiment, seed, dataset, model, accountant, privacy) and replaced only
   on ``trainer.overwrite=true``;
3. remove the temporary files of writes a killed run left half-done.

``read_checkpoint`` / ``write_atomically`` turn a damaged checkpoint or a failed write (disk full) into
one ``error:`` line naming the file and the fix; a failed write leaves the previous file intact.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout
from omegaconf import DictConfig, OmegaConf

from .errors import ConfigError
from .utils import atomic_save, load_checkpoint, without_keys

STATE_DIR = ".dpgen"  # beside Hydra's .hydra/: the lock, its holder and the run signature
LOCK_FILE, HOLDER_FILE, SIGNATURE_FILE = "lock", "holder.json", "signature.json"
LOCATIONS_FILE = "locations.json"  # where the run found its data: `dpgen evaluate` reads it there again
CHECKPOINT = Path("checkpoints") / "last.pt"
# the settings a run folder's work depends on; trainer.*, evaluator.*, logger.* may change between segments
SIGNATURE_KEYS = ("experiment_name", "seed", "dataset", "model", "accountant", "privacy")
# what a finished or interrupted run leaves in its folder (removed by trainer.overwrite=true)
RUN_ARTEFACTS = ("checkpoints", "metrics.csv", "results.json", "private_timings.json", "runtime.json", "wandb_run_id", "wandb", "*.pt",
                 "*.png", "privacy_card.json", "privacy_card.md")
LOCATION_KEYS = ("root", "data_root", "autoencoder_cache", "cache_dir")
NEW_FOLDER = "choose a new folder with hydra.run.dir=<new folder>"


class RunFolderBusy(ConfigError):
    """Another live process holds the run folder's lock."""


def run_signature(cfg: DictConfig) -> dict:
    """The settings a resume must match (resolved): experiment, seed, dataset, model, accountant, privacy.

    Locations (data roots, caches of public weights) are left out: the same data elsewhere is the same run.
    """
    sig = {key: without_keys(OmegaConf.to_container(cfg[key], resolve=True) if isinstance(cfg.get(key), DictConfig)
                             else cfg.get(key), LOCATION_KEYS)
           for key in SIGNATURE_KEYS}
    return json.loads(json.dumps(sig, sort_keys=True, default=str))  # as stored in signature.json


def signature_diff(old: dict, new: dict, limit: int = 3) -> str:
    """``key: a there, b now`` for the first ``limit`` differing dotted keys (``and N more``)."""
    a, b = _flatten(old), _flatten(new)
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    shown = [f"{k}: {a.get(k)!r} there, {b.get(k)!r} now" for k in keys[:limit]]
    return "; ".join(shown) + (f"; and {len(keys) - limit} more" if len(keys) > limit else "")


def _flatten(node, prefix: str = "") -> dict:
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node}
    out = {}
    for k, v in node.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


# ---------------------------------------------------------------------------- lock
def _lock(run_dir: Path) -> FileLock:
    return FileLock(run_dir / STATE_DIR / LOCK_FILE)


UNRECORDED = "holder not yet recorded"


def _holder_when_recorded(run_dir: Path, seconds: float = 2.0) -> str:
    """``holder_text``, waiting up to ``seconds`` for a holder that has just taken the lock to record itself."""
    deadline = time.monotonic() + seconds
    while (text := holder_text(run_dir)) == UNRECORDED and time.monotonic() < deadline:
        time.sleep(0.05)
    return text


def holder_text(run_dir: Path) -> str:
    """``pid 123 on host h, started 2026-01-01 10:00:00 UTC (command ...)`` from ``.dpgen/holder.json``."""
    try:
        h = json.loads((run_dir / STATE_DIR / HOLDER_FILE).read_text())
        return f"pid {h['pid']} on {h['host']}, started {h['started_utc']} ({h['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return UNRECORDED


def in_use(run_dir: Path) -> bool:
    """True while a live process holds the folder's lock (a folder without a lock is not in use)."""
    if not (run_dir / STATE_DIR / LOCK_FILE).exists():
        return False
    lock = _lock(run_dir)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


# ---------------------------------------------------------------------------- the claim
@dataclass
class RunFolder:
    """A claimed run folder: the held lock and the checkpoint this run resumes from (None: fresh)."""

    path: Path
    resume_from: Path | None
    lock: FileLock = field(repr=False)
    notes: list[str] = field(default_factory=list)
    hydra_record: dict[Path, str] = field(default_factory=dict, repr=False)

    def release(self) -> None:
        """Restore this run's ``.hydra/`` record, drop the holder record, then the lock (a holder record
        without a lock = a killed run)."""
        for path, text in self.hydra_record.items():
            if not path.is_file() or path.read_text() != text:  # a refused start's Hydra wrote over it
                path.write_text(text)
        (self.path / STATE_DIR / HOLDER_FILE).unlink(missing_ok=True)
        self.lock.release()

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def claim_run_folder(cfg: DictConfig, log: Callable[[str], None] = print) -> RunFolder:
    """Lock ``paths.output_dir`` for this run and decide resume / fresh / refuse (module docstring).

    Raises :class:`RunFolderBusy` when a live run holds the folder, :class:`ConfigError` when the folder
    holds a run this one may not continue or replace.  Use as a context manager: the lock is held until exit.
    """
    run_dir = Path(cfg.paths.output_dir)
    (run_dir / STATE_DIR).mkdir(parents=True, exist_ok=True)
    lock = _lock(run_dir)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        _put_back_hydra_record(run_dir)
        raise RunFolderBusy(f"run folder {run_dir} is in use by another run ({_holder_when_recorded(run_dir)}): wait for it "
                            f"to finish, or {NEW_FOLDER}") from None
    try:
        holder, notes = run_dir / STATE_DIR / HOLDER_FILE, []
        if holder.exists():  # the lock was free but the record is there: its run was killed
            notes.append(f"taking over run folder {run_dir} from a run that ended without releasing it "
                         f"({holder_text(run_dir)})")
        _write_json(holder, {"pid": os.getpid(), "host": socket.gethostname(), "command": " ".join(sys.argv),
                             "started_utc": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())})
        folder = RunFolder(run_dir, None, lock, notes, hydra_record=_hydra_record(cfg, run_dir))
        _remove_partial_writes(run_dir)
        folder.resume_from = _decide(cfg, run_dir, folder.notes)
        _write_json(run_dir / STATE_DIR / SIGNATURE_FILE, run_signature(cfg))
        _write_json(run_dir / STATE_DIR / LOCATIONS_FILE, run_locations(cfg))
        _keep_hydra_record(folder.hydra_record, run_dir)
    except BaseException:
        _put_back_hydra_record(run_dir)  # a refused start leaves the folder's record as its run wrote it
        (run_dir / STATE_DIR / HOLDER_FILE).unlink(missing_ok=True)
        lock.release()
        raise
    for note in folder.notes:
        log(note)
    return folder


def claim_new_folder(folder: Path) -> Path:
    """A run folder named from the clock, made by this run alone: ``folder`` itself, or ``<folder>_2``,
    ``<folder>_3`` ... when runs started in the same second name the same one.  Each name is claimed by one
    ``mkdir``, which exactly one process wins, so a run never lands in (and never resumes, overwrites or
    mixes with) the folder of another run."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        candidate = folder if n == 1 else folder.with_name(f"{folder.name}_{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            n += 1
            continue
        return candidate


def run_locations(cfg: DictConfig) -> dict:
    """Where this run reads from, resolved: the data root and the folder it was started in (relative data
    paths start there).  Kept in the run folder only (``.dpgen/locations.json``), never in a release or card."""
    from hydra.core.hydra_config import HydraConfig

    out = {"cwd": str(HydraConfig.get().runtime.cwd) if HydraConfig.initialized() else os.getcwd()}
    try:
        root = (cfg.get("paths") or {}).get("data_root")
    except Exception:  # noqa: BLE001 - an interpolation that cannot be resolved here: nothing to record
        root = None
    if root is not None:
        out["data_root"] = str(Path(out["cwd"], str(root)).resolve())
    return out


def read_locations(run_dir: Path) -> dict:
    """``run_locations`` as the run recorded them ({} for a folder written before they were recorded)."""
    return _read_json(Path(run_dir) / STATE_DIR / LOCATIONS_FILE) or {}


def _hydra_record(cfg: DictConfig, run_dir: Path) -> dict[Path, str]:
    """What Hydra wrote into ``<run>/.hydra/`` for THIS run (``{}`` outside a Hydra app).

    Hydra writes ``.hydra/`` before the task starts, so a start that is then refused has overwritten
    the record of the folder's run with its own command: the refused start puts back the copy the owner
    keeps in ``.dpgen/hydra/``, and the owner rewrites its record when it releases the folder.
    """
    from hydra.core.hydra_config import HydraConfig

    folder = _hydra_record_dir(run_dir)
    if folder is None:
        return {}
    hc = HydraConfig.get()
    return {folder / "config.yaml": OmegaConf.to_yaml(cfg), folder / "hydra.yaml": OmegaConf.to_yaml({"hydra": hc}),
            folder / "overrides.yaml": OmegaConf.to_yaml(hc.overrides.task)}


def _keep_hydra_record(record: dict[Path, str], run_dir: Path) -> None:
    for path, text in record.items():
        (run_dir / STATE_DIR / "hydra").mkdir(exist_ok=True)
        (run_dir / STATE_DIR / "hydra" / path.name).write_text(text)


def _put_back_hydra_record(run_dir: Path) -> None:
    """Restore the folder's run's ``.hydra/`` record (kept by its owner) over a refused start's."""
    record = _hydra_record_dir(run_dir)
    kept = run_dir / STATE_DIR / "hydra"
    if record is None or not kept.is_dir():
        return
    for copy in kept.glob("*.yaml"):
        (record / copy.name).write_text(copy.read_text())


def hydra_output_dir() -> Path | None:
    """The output folder of the Hydra app running now; None outside one, or for a config composed in this
    process (``hydra.compose``, ``--cfg job``), which sets Hydra's config without an output folder."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    output_dir = OmegaConf.select(HydraConfig.get(), "runtime.output_dir", default=None, throw_on_missing=False)
    return None if output_dir is None else Path(str(output_dir))


def _hydra_record_dir(run_dir: Path) -> Path | None:
    """``<run>/.hydra`` when this is a Hydra app writing into ``run_dir``, else None."""
    from hydra.core.hydra_config import HydraConfig

    output_dir = hydra_output_dir()
    if output_dir is None:
        return None
    hc = HydraConfig.get()
    if hc.output_subdir is None or output_dir.resolve() != run_dir.resolve():
        return None
    return run_dir / str(hc.output_subdir)


def _decide(cfg: DictConfig, run_dir: Path, notes: list[str]) -> Path | None:
    """The checkpoint to resume from (None: start fresh); refuses what would lose or mix work."""
    resume, overwrite = cfg.trainer.get("resume", "auto"), bool(cfg.trainer.get("overwrite", False))
    mode = str(resume).lower() if isinstance(resume, (bool, str)) and str(resume).lower() in ("auto", "true", "false") \
        else "path"
    own = run_dir / CHECKPOINT
    if mode == "path" and _checkpoint_of(Path(str(resume))).resolve() == own.resolve():
        mode = "true"  # trainer.resume=<this folder>
    if overwrite:
        if mode == "true":
            raise ConfigError("trainer.overwrite=true starts the run folder over and trainer.resume=true continues "
                              "it: drop one of them")
        removed = _clear(run_dir)
        if removed:
            notes.append(f"trainer.overwrite=true: removed the previous run's {', '.join(removed)} from {run_dir}")
    held = _held_run(run_dir)
    if mode == "path":
        source = _checkpoint_of(Path(str(resume)))
        if not source.is_file():
            raise ConfigError(f"trainer.resume={resume}: no checkpoint at {source}; give a run folder holding "
                              f"{CHECKPOINT} or the .pt file itself")
        if held:
            raise ConfigError(f"run folder {run_dir} already holds a run ({held}); trainer.resume={resume} would "
                              f"replace it: start it over with trainer.overwrite=true, or {NEW_FOLDER}")
        notes.append(f"resuming from {source}")
        return source
    if mode == "false":
        if held:
            raise ConfigError(f"run folder {run_dir} already holds a run ({held}) and trainer.resume=false would "
                              "overwrite it: continue it with trainer.resume=auto (the default), start it over with "
                              f"trainer.overwrite=true, or {NEW_FOLDER}")
        return None
    old = _read_json(run_dir / STATE_DIR / SIGNATURE_FILE)
    same = old is None or old == run_signature(cfg)
    if own.is_file():
        if not same:
            raise ConfigError(f"run folder {run_dir} holds a checkpoint of a run with other settings "
                              f"({signature_diff(old, run_signature(cfg))}): rerun with that run's settings to "
                              f"resume it, start it over with trainer.overwrite=true, or {NEW_FOLDER}")
        if _finished(_read_json(run_dir / "results.json"), cfg.trainer.get("max_steps")):
            notes.append(f"{run_dir} holds a finished run: its training is complete, so this run re-evaluates its "
                         "release and rewrites results.json (no further privacy cost); trainer.overwrite=true starts "
                         "it over")
        else:
            notes.append(f"resuming from {own}")
        return own
    if held:  # results but no checkpoint (deleted): nothing to resume from, and the results must not be lost
        raise ConfigError(f"run folder {run_dir} holds a finished run ({held}) but no {CHECKPOINT} to resume "
                          f"from: replace it with trainer.overwrite=true, or {NEW_FOLDER}")
    if not same:  # a run of other settings killed before its first checkpoint: its logs are not this run's
        _clear(run_dir)
    if mode == "true":
        notes.append(f"trainer.resume=true but no checkpoint in {run_dir}: starting fresh")
    return None


def _finished(results: dict | None, max_steps) -> bool:
    """Whether the run of ``results`` has nothing left to train for a run with ``trainer.max_steps``: it ended at
    its plan or its budget (or at this max_steps), and was not stopped early (``incomplete``)."""
    if not results or "incomplete" in results:
        return False
    train = results.get("train") or {}
    done, planned = train.get("train_steps"), train.get("steps_planned")
    if done is None:
        return False
    return bool(train.get("stopped_by_budget") or (planned is not None and done >= planned)
                or (max_steps is not None and done >= int(max_steps)))


def _checkpoint_of(path: Path) -> Path:
    return path / CHECKPOINT if path.is_dir() else path


def _held_run(run_dir: Path) -> str:
    """What of a run the folder holds that a fresh start would overwrite ('' if nothing)."""
    found = [name for name in (str(CHECKPOINT), "results.json") if (run_dir / name).is_file()]
    return " and ".join(found)


def _clear(run_dir: Path) -> list[str]:
    """Remove a previous run's artefacts (RUN_ARTEFACTS) from ``run_dir``; returns what was removed.

    Only in a folder a dpgen run has claimed before (a signature or a checkpoint): never in an arbitrary folder.
    """
    removed: list[str] = []
    if not (_held_run(run_dir) or (run_dir / STATE_DIR / SIGNATURE_FILE).is_file()):
        return removed
    for pattern in RUN_ARTEFACTS:
        for p in sorted(run_dir.glob(pattern)):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            removed.append(p.name)
    return removed


def _remove_partial_writes(run_dir: Path) -> None:
    """Temporary files of atomic writes a killed run never renamed (``.last.pt.*.tmp``, ``metrics.csv.tmp``)."""
    for folder in (run_dir, run_dir / CHECKPOINT.parent):
        for p in folder.glob("*.tmp"):
            if p.is_file():
                p.unlink()


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------- checkpoint files
def read_checkpoint(path: Path) -> dict:
    """The training checkpoint at ``path``; a truncated or garbled file is a ConfigError naming it and the fix."""
    try:
        ck = load_checkpoint(path)
    except Exception as err:  # noqa: BLE001 - whatever torch.load trips on, the file is damaged
        raise ConfigError(_damaged(path, f"cannot be read: {type(err).__name__}")) from None  # not torch's paragraph
    if not isinstance(ck, dict):
        raise ConfigError(_damaged(path, "not a dpgen checkpoint"))
    return ck


def _damaged(path: Path, reason: str) -> str:
    """One short line naming the file and the fix.  The advice never deletes an intact release: a finished run's
    release (``*.pt`` beside ``checkpoints/``) is evaluated and sampled from without its checkpoint; starting over
    would delete it and spend ε again."""
    run_dir = path.parent.parent if path.parent.name == CHECKPOINT.parent.name else path.parent
    releases = sorted(p for p in run_dir.glob("*.pt") if p.is_file())
    if releases:
        return (f"checkpoint {path} is damaged ({reason}); the run's release {releases[0].name} is intact: "
                f"`dpgen evaluate {run_dir}` or `dpgen sample {run_dir} --n <N> --out <file>` use it at no privacy "
                f"cost; to train anew, {NEW_FOLDER} (trainer.overwrite=true would delete that release and spend ε again)")
    return (f"checkpoint {path} is damaged ({reason}): start the run folder over with trainer.overwrite=true, or "
            f"{NEW_FOLDER}")


def write_atomically(obj: dict, path: Path) -> Path:
    """``atomic_save`` whose OSError (disk full, permissions) is one error line; the previous file stays intact."""
    try:
        return atomic_save(obj, path)
    except OSError as err:
        raise ConfigError(f"could not write {path} ({err.strerror or err}); the previous version of the file is "
                          "intact: free disk space (or fix the folder's permissions) and rerun the same command "
                          "to resume from the last checkpoint") from None
