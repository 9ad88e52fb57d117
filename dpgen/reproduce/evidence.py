"""The evidence store ``evidence/``: one small JSON file per finished run, matched to the registry.

``collect`` reads run folders (``results.json``, ``.hydra/overrides.yaml``, ``.hydra/config.yaml``),
keeps the fields the tables need and writes them only for the runs its selection keeps (a registry cell
or claim; ``reproduce.dpimagebench`` passes its own);
``load_store`` reads them back; ``match_reason`` / ``group_runs`` say which runs belong to a cell.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dpgen.logging.timings import load_results
from dpgen.paths import ROOT

from .registry import CELLS, REGISTRY, Cell, Row
from .store import STORE, effective_overrides, neutral, override_key

SCHEMA = 1

def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def _experiment(ev: dict) -> str | None:
    for o in ev.get("overrides") or []:
        if override_key(o) == "experiment":
            return o.split("=", 1)[1]
    return ev.get("experiment")


def match_reason(cell: Cell, ev: dict) -> str | None:
    """None when the evidence ``ev`` is a run of ``cell``; else why not (one sentence)."""
    if _experiment(ev) != cell.experiment:
        return f"experiment {_experiment(ev)} ≠ {cell.experiment}"
    have = effective_overrides(ev)
    want = sorted(o.lstrip("+~") for o in cell.overrides)
    missing = [o for o in want if o not in have]
    if missing:
        return f"missing overrides {missing}"
    extra = [o for o in have if o not in want and not any(fnmatch.fnmatch(override_key(o), p) for p in cell.vary)]
    if extra:
        return f"overrides {extra} are not part of this cell"
    cfg = ev.get("config") or {}
    for key, value in cell.config:
        if str(cfg.get(key)) != str(value):
            return f"config {key} = {cfg.get(key)!r}, the cell needs {value!r}"
    return None


def evidence_from_run(run_dir: Path, commit: str | None = None) -> dict:
    """The fields of one run folder that the scoreboard needs (a small, JSON-able dict)."""
    res_p = run_dir / "results.json"
    if not res_p.is_file():
        raise FileNotFoundError(f"{run_dir}: no results.json (the run did not finish, or this is not a run folder)")
    res = load_results(run_dir)  # + the private run time (the operator's own benchmark runs)
    if "incomplete" in res:  # stopped before the end (results.json says so): not a measurement of its command
        stop = res["incomplete"] or {}
        raise FileNotFoundError(f"{run_dir}: incomplete (stopped by {stop.get('stopped_by', '?')} during "
                                f"{stop.get('during', '?')}): run its command again in that folder to finish it")
    overrides = res.get("overrides")
    ov_p = run_dir / ".hydra" / "overrides.yaml"
    if not overrides and ov_p.is_file():
        overrides = yaml.safe_load(ov_p.read_text()) or []
    cfg_p = run_dir / ".hydra" / "config.yaml"
    raw_cfg = (yaml.safe_load(cfg_p.read_text()) or {}) if cfg_p.is_file() else {}
    config = {k: v for k, v in _flatten(raw_cfg).items()
              if not neutral(k) and isinstance(v, (str, int, float, bool, type(None)))}
    metrics = {k: v for k, v in (res.get("metrics") or {}).items()
               if not re.search(r"_class_\d+$|_cache$", k) and isinstance(v, (str, int, float, bool))}
    priv = res.get("privacy") or {}
    summary = (res.get("summary") or {}).get("privacy") or {}
    train = res.get("train") or {}
    from ..logging.summary import guarantee_label

    privacy = {"guarantee": guarantee_label(res)}
    for k in ("status", "convention", "calibrating_accountant", "delta", "target_epsilon", "private_steps", "sampling"):
        if priv.get(k) is not None:
            privacy[k] = priv[k]
    # every epsilon the run states (RDP, PLD, reported-only accountants, the epsilon a paper-convention run
    # really has under its data's sensitivity ...): numbers only, their names kept
    privacy.update({k: v for k, v in priv.items() if k.startswith("epsilon") and stored_number(v) is not None
                    or k.startswith("epsilon") and v in ("inf", "-inf")})
    mechanism = {k: (summary.get(k) if summary.get(k) is not None else train.get(k))
                 for k in ("noise_multiplier", "noise_std", "sensitivity", "clip_norm")}
    mechanism = {k: v for k, v in mechanism.items() if v is not None}
    steps = next((train[k] for k in ("train_steps", "steps", "train_step") if train.get(k) is not None), None)
    seed = raw_cfg.get("seed", 0)
    for o in overrides or []:
        if override_key(o) == "seed":
            seed = int(o.split("=", 1)[1])
    date = dt.datetime.fromtimestamp(res_p.stat().st_mtime, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    overrides = [portable_override(o) for o in overrides or []]
    shown = [o for o in overrides if not override_key(o).startswith("hydra.")]
    ev = {"schema": SCHEMA, "experiment": res.get("experiment"), "overrides": overrides,
          "seed": seed, "config": config, "metrics": metrics, "privacy": privacy, "mechanism": mechanism,
          "steps": steps, "runtime_s": res.get("runtime_s"),
          "command": " ".join(["python train.py", *shown]),
          "git_commit": res.get("git_commit") or commit or "not recorded",
          "date_utc": res.get("created_utc") or date, "run_dir": portable_path(run_dir)}
    if res.get("device"):  # where it ran (trainer.device=auto picks a GPU when there is one): cpu | cuda
        ev["device"] = res["device"]
    return ev


def portable_path(path: str | Path) -> str:
    """``path`` relative to the working directory: evidence is committed, so it never carries the paths of the
    machine that ran it (a path outside the working directory keeps only its last part, the folder's own name)."""
    rel = Path(os.path.relpath(Path(path).absolute())) if Path(path).is_absolute() else Path(path)
    return Path(rel.name).as_posix() if ".." in rel.parts else rel.as_posix()


def portable_override(override: str) -> str:
    """``key=/abs/path`` -> ``key=<path relative to the working directory>``; other overrides unchanged."""
    key, eq, value = override.partition("=")
    return f"{key}={portable_path(value)}" if eq and value.startswith("/") else override


def evidence_name(ev: dict) -> str:
    """``<experiment>__<8-hex hash of the effective overrides and resolved config>__seed<k>.json``, with
    ``__cuda`` before ``.json`` for a run on a GPU: a CPU run of the same command and seed replaces an earlier
    CPU run (a re-measurement), never a GPU one (the store keeps both kinds of device apart)."""
    cfg = {k: v for k, v in (ev.get("config") or {}).items() if k != "seed"}
    blob = json.dumps({"o": effective_overrides(ev), "c": cfg}, sort_keys=True, default=str)
    gpu = "__cuda" if str(ev.get("device") or "").startswith("cuda") else ""
    return f"{_experiment(ev)}__{hashlib.sha1(blob.encode()).hexdigest()[:8]}__seed{ev.get('seed', 0)}{gpu}.json"


def matching_cells(ev: dict, registry: tuple[Row, ...] = REGISTRY) -> list[tuple[str, str]]:
    return [(r.id, c) for r in registry for c in CELLS
            if isinstance(getattr(r, c), Cell) and match_reason(getattr(r, c), ev) is None]


def claim_runs(store: list[dict]) -> Callable[[str], list[dict]]:
    """``runs_of(claim_id)``: the runs of ``store`` that ran that claim's command (for ``claims.compare``)."""
    from .claims import CLAIMS

    cells = {c.id: c.cell for c in CLAIMS}
    return lambda claim_id: [ev for ev in store if match_reason(cells[claim_id], ev) is None]


def matching_claims(ev: dict) -> list[str]:
    """The ids of dpgen's own utility claims (``reproduce.claims``) that ``ev`` is a run of."""
    from .claims import CLAIMS

    return [c.id for c in CLAIMS if match_reason(c.cell, ev) is None]


def expand_run_dirs(paths: list[Path]) -> list[Path]:
    """Run folders among ``paths``: a folder with results.json, or every such folder below a sweep/parent
    folder; files (e.g. ``*.log`` from a shell glob) are ignored; a folder with none is kept (reported)."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            continue
        if (p / "results.json").is_file() or not p.is_dir():
            out.append(p)
            continue
        found = sorted(r.parent for r in p.rglob("results.json"))
        out += found or [p]
    return out


def scoreboard_skip_reason(ev: dict, registry: tuple[Row, ...] = REGISTRY) -> str | None:
    """None when the run matches a registry cell or a utility claim (``reproduce.claims``), else why not."""
    if matching_cells(ev, registry) or matching_claims(ev):
        return None
    same = [f"{r.id}/{c}: {match_reason(getattr(r, c), ev)}" for r in registry for c in CELLS
            if isinstance(getattr(r, c), Cell) and getattr(r, c).experiment == _experiment(ev)]
    return "matches no scoreboard cell" + (f" ({'; '.join(same)})" if same else
                                          f" (no row uses experiment {_experiment(ev)})")


def collect(run_dirs: list[Path], store: Path = STORE, commit: str | None = None,
            skip_reason: Callable[[dict], str | None] = scoreboard_skip_reason) -> tuple[list[Path], list[str]]:
    """Write the evidence of every run that ``skip_reason`` keeps (it returns None; by default a run of a
    scoreboard cell or claim) into ``store``; returns (written, skipped-with-reason)."""
    store.mkdir(parents=True, exist_ok=True)
    written, skipped = [], []
    for rd in expand_run_dirs(run_dirs):
        try:
            ev = evidence_from_run(Path(rd), commit)
        except FileNotFoundError as e:
            skipped.append(str(e))
            continue
        reason = skip_reason(ev)
        if reason is not None:
            skipped.append(f"{rd}: {reason}")
            continue
        path = store / evidence_name(ev)
        path.write_text(json.dumps(ev, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        written.append(path)
    return written, skipped


def shown_path(path: Path) -> str:
    """``path`` relative to the checkout when it lies in it (what the commands print)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def report_collected(written: list[Path], skipped: list[str]) -> None:
    """The ``collect`` commands' account: one line per run stored or skipped (with its reason)."""
    for p in written:
        print(f"stored {shown_path(p)}")
    for s in skipped:
        print(f"skipped {s}")


def stored_number(v) -> float | None:
    """A stored number (json's "inf" strings included) as a float; NaN and non-numbers None."""
    from dpgen.logging.summary import to_float

    x = to_float(v)
    return None if x is None or math.isnan(x) else x


def group_runs(cell: Cell, evidence: list[dict]) -> list[list[dict]]:
    """The runs of ``cell`` grouped by their effective overrides (one group = seeds of one command)."""
    groups: dict[tuple, list[dict]] = {}
    for ev in evidence:
        if match_reason(cell, ev) is None:
            groups.setdefault(tuple(effective_overrides(ev)), []).append(ev)
    return [sorted(g, key=lambda e: (e.get("seed", 0), e.get("date_utc", ""))) for _, g in sorted(groups.items())]

