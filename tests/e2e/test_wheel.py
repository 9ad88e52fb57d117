"""The package stands on its own: its wheel, installed into a fresh environment, trains the default from a
folder outside the checkout (configs read through Hydra's ``pkg://dpgen.configs``), as ``dpgen train`` and as
``python -m dpgen train``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import ROOT

RUN = ["evaluator=none", "logger=local", "trainer.progress=false"]


def _run(cmd: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout must not be importable
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env={**env, "WANDB_MODE": "offline"},
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow  # builds a wheel and trains twice (about a minute on 2 cores)
def test_the_installed_wheel_trains_the_default_outside_the_checkout(tmp_path):
    src = tmp_path / "src"  # a copy: the build leaves nothing in the checkout
    for name in ("dpgen", "configs"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", src, "-w", tmp_path],
             tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = tmp_path.glob("dpgen-*.whl")

    venv = tmp_path / "venv"  # fresh, no pip of its own, no downloads: the dependencies of this environment
    r = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
                .stdout.strip())
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel],
             tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]

    work = tmp_path / "work"
    work.mkdir()
    where = _run([python, "-c", "import dpgen.paths as p; print(p.PACKAGE, p.HYDRA_CONFIGS)"], work).stdout.split()
    assert Path(where[0]).is_relative_to(venv) and where[1] == "pkg://dpgen.configs"
    dpgen = python.with_name("dpgen")
    for name, cmd in (("console", [dpgen, "train"]), ("module", [python, "-m", "dpgen", "train"])):
        r = _run([*cmd, *RUN, f"hydra.run.dir=runs/{name}"], work)
        assert r.returncode == 0, r.stderr[-3000:]
        res = json.loads((work / "runs" / name / "results.json").read_text())
        assert res["experiment"] == "digits_moments" and 0 < res["privacy"]["epsilon"] <= 10.0
