"""Everyday commands stay fast: a refused typo and `dpgen presets` import neither torch nor the privacy core
(seconds on a 2-core machine), the refusal composes the config once.  Counted, never timed: the times are
`dpgen bench --only commands` rows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

HEAVY = ("torch", "scipy", "dpgen.privacy.mechanisms", "dpgen.methods")


def _imported(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=120)
    names = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    return r, names


@pytest.mark.parametrize("argv", [("train.py", "experimnt=x"), ("train.py", "accountant.epsilonn=3"),
                                  ("-m", "dpgen", "presets")], ids=" ".join)
def test_a_refusal_and_the_preset_list_import_nothing_heavy(argv):
    r, names = _imported(*argv)
    assert r.returncode == (0 if "presets" in argv else 2), r.stderr[-2000:]
    assert not {n for n in names if n.split(".")[0] in HEAVY or n in HEAVY}


def test_audit_help_imports_nothing_heavy():
    r, names = _imported("-m", "dpgen", "audit", "--help")
    assert r.returncode == 0 and "--conventions" in r.stdout, r.stderr[-2000:]
    assert not {n for n in names if n.split(".")[0] in HEAVY or n in HEAVY}


def test_a_misspelt_key_is_refused_after_one_composition(monkeypatch):
    import dpgen.preflight as preflight

    calls = []
    real = preflight.compose
    monkeypatch.setattr(preflight, "compose", lambda *a, **k: calls.append(a) or real(*a, **k))
    problem = preflight.preflight(["experiment=digits_dpswd", "accountant.epsiln=1"])
    assert problem is not None and "accountant.epsilon" in problem and len(calls) == 1
