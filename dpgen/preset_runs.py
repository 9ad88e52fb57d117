"""What has been run of each experiment preset, from the measured runs recorded in the repository.

``docs/guides/preset_runs.yaml`` records, per preset, the runs made on the development machine:

* ``smoke``     — the fast test suite's end-to-end run (``tests/e2e/test_presets_e2e.py``): a few steps, a
  shrunk evaluator, capped splits; ``cpu_s`` is the CPU time of that run;
* ``shortened`` — the preset with a shorter schedule (``overrides``);
* ``full``      — the preset's own schedule and evaluator.

Each run has ``data`` (fixture = fake files in the real layout, real, embedded), ``wall_s`` / ``cpu_s``
when measured, and optional ``note``.  A shortened or full run that is not in that file but is in the
reproduction evidence store (``docs/reproduction/runs``: every run behind a scoreboard cell, with its
command and wall time) is shown from there: "full" when none of its overrides changes the training
schedule (``SCHEDULE_KEYS``), else "shortened".  ``dpgen presets status`` prints the table of
docs/guides/presets.md.  A preset without a recorded run shows "not run".
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .paths import DOCS

RUNS_FILE = DOCS / "guides" / "preset_runs.yaml"
KINDS = ("smoke", "shortened", "full")
HEADERS = ("preset", "smoke run (fast suite)", "shortened run", "full schedule")
NOT_RUN = "not run"
# overrides that shorten (or lengthen) the training schedule: such a run is "shortened", not "full"
SCHEDULE_KEYS = ("trainer.max_steps", "model.steps", "model.epochs", "model.ae_steps", "model.ae_epochs",
                 "model.n_steps", "model.epoch_length")


def load(path: Path = RUNS_FILE) -> dict:
    """The recorded runs: ``{"machine": str, "runs": {preset: {kind: {...}}}}``."""
    return yaml.safe_load(path.read_text()) or {}


def duration(seconds: float) -> str:
    """``42 s`` / ``3.5 min`` / ``2.1 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def cell(run: dict | None) -> str:
    """One run as a table cell: data, the times measured, the overrides and note."""
    if not run:
        return NOT_RUN
    times = [f"{duration(run[k])} {label}" for k, label in (("wall_s", "wall"), ("cpu_s", "CPU")) if k in run]
    parts = [", ".join([run.get("data", "")] + times).strip(", ")]
    if run.get("overrides"):
        parts.append(f"`{run['overrides']}`")
    if run.get("note"):
        parts.append(run["note"])
    return "; ".join(p for p in parts if p)


def evidence_runs(store: list[dict] | None = None) -> dict[str, dict[str, dict]]:
    """``{preset: {"shortened" | "full": cell run}}`` from the reproduction evidence store: the number of
    runs and the median wall time of each kind."""
    from .reproduce.store import effective_overrides, load_store, override_key

    grouped: dict[tuple[str, str], list[float]] = {}
    for ev in load_store() if store is None else store:
        preset = ev.get("experiment")
        if not preset:
            continue
        keys = {override_key(o) for o in effective_overrides(ev)}
        kind = "shortened" if any(k in SCHEDULE_KEYS for k in keys) else "full"
        grouped.setdefault((preset, kind), []).append(float(ev.get("runtime_s") or "nan"))
    out: dict[str, dict[str, dict]] = {}
    for (preset, kind), times in grouped.items():
        measured = sorted(t for t in times if t == t)
        run = {"data": "real" if not preset.startswith(("digits", "toy")) else "embedded",
               "note": f"{len(times)} run{'s' if len(times) > 1 else ''} in the reproduction evidence"
                       + (", median wall time" if len(measured) > 1 else "")}
        if measured:
            run["wall_s"] = measured[len(measured) // 2]
        out.setdefault(preset, {})[kind] = run
    return out


def rows(presets: list[str], recorded: dict, evidence: dict | None = None) -> list[tuple[str, ...]]:
    runs = recorded.get("runs") or {}
    evidence = evidence_runs() if evidence is None else evidence
    return [(f"`{p}`", *(cell((runs.get(p) or {}).get(k) or (evidence.get(p) or {}).get(k)) for k in KINDS))
            for p in presets]


def markdown(presets: list[str], recorded: dict, evidence: dict | None = None) -> str:
    """The status table as markdown, with the count of presets run end to end by the fast suite."""
    body = rows(presets, recorded, evidence)
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    smoke = sum(1 for r in body if r[1] != NOT_RUN)
    lines += ["", f"Fast suite: {smoke} of {len(presets)} presets run end to end. Machine: {recorded.get('machine', '?')}."]
    return "\n".join(lines) + "\n"

