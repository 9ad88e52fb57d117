"""Everyday commands as whole processes: a typo refused and ``dpgen presets``, against ``import dpgen``.

Each command runs ``REPEATS`` times after one warm-up, in a fresh interpreter (what a user waits for:
interpreter start, imports, composition); the row gives the median wall time and its ratio to the
median of ``python -c "import dpgen"`` measured in the same run.  The target: both under 1.5 s on a
2-core machine.  Refusals are checked to refuse (exit status 2, one ``error:`` line), so a row can never
time a command that did something else.

``dpgen bench --only commands --out docs/benchmarks.md`` (about 20 s on 2 cores).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from ..paths import ROOT

REPEATS = 5
# (label, argv after the interpreter, the exit status it must end with)
COMMANDS = [
    ('`python -c "import dpgen"` (the floor)', ["-c", "import dpgen"], 0),
    ("`python train.py experimnt=x` (a misspelt group, refused)", ["train.py", "experimnt=x"], 2),
    ("`python train.py accountant.epsilonn=3` (an unknown key, refused)", ["train.py", "accountant.epsilonn=3"], 2),
    ("`dpgen presets` (the preset list)", ["-m", "dpgen", "presets"], 0),
]


def _wall(argv: list[str], status: int, env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != status or (status == 2 and not r.stderr.startswith("error: ")):
        raise RuntimeError(f"{' '.join(argv)} ended with status {r.returncode}, expected {status}: {r.stderr[-500:]}")
    return wall


def medians(repeats: int = REPEATS) -> list[tuple[str, float, float, float]]:
    """``(label, median, min, max)`` wall seconds of every command, each after one warm-up run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = []
    for label, argv, status in COMMANDS:
        _wall(argv, status, env)
        walls = [_wall(argv, status, env) for _ in range(repeats)]
        out.append((label, statistics.median(walls), min(walls), max(walls)))
    return out


def rows(device) -> list[tuple[str, str]]:  # noqa: ARG001 (whole processes on the CPU)
    load = os.getloadavg()[0]
    measured = medians()
    floor = measured[0][1]
    return [(f"{label}, median of {REPEATS} whole processes (load {load:.1f})",
             f"{m:.2f} s ({lo:.2f}–{hi:.2f}){'' if i == 0 else f'; ×{m / floor:.1f} the import'}")
            for i, (label, m, lo, hi) in enumerate(measured)]
