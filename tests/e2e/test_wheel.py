"""The package stands on its own: its wheel, built once per test session and installed into a fresh
environment, runs every `dpgen` command from a folder outside the checkout (configs read through Hydra's
``pkg://dpgen.configs``): the preset list, the audit's options, a tiny training run and sampling from it;
the commands that read or write the checkout's docs refuse in one ``error:`` line.

Cost: about 30 s of CPU on 2 cores: one wheel build and install (no download: ``--no-build-isolation``, the
venv sees this environment's packages), one class-Gaussian run (one release), one sampling, a few commands."""

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


def _run(cmd: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout must not be importable
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env={**env, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """(the venv's python, a work folder outside the checkout) with the wheel of this checkout installed."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"  # a copy: the build leaves nothing (build/, *.egg-info) in the checkout
    for name in ("dpgen", "configs"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    r = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", ".", "-w", tmp], src)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = tmp.glob("dpgen-*.whl")
    venv = tmp / "venv"  # fresh, no pip of its own, no downloads: the dependencies of this environment
    r = _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv], tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip())
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    r = _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel], tmp)
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp / "work"
    work.mkdir()
    return python, work


def test_the_wheel_reads_its_own_configs_and_lists_the_presets(installed):
    python, work = installed
    where = _run([python, "-c", "import dpgen.paths as p; print(p.PACKAGE, p.HYDRA_CONFIGS)"], work).stdout.split()
    assert Path(where[0]).is_relative_to(python.parents[1]) and where[1] == "pkg://dpgen.configs"
    r = _run([python, "-m", "dpgen", "presets"], work)
    assert r.returncode == 0 and "digits_moments" in r.stdout, r.stderr[-3000:]
    r = _run([python.with_name("dpgen"), "audit", "--help"], work)
    assert r.returncode == 0 and "usage: dpgen audit" in r.stdout, r.stderr[-3000:]


def test_the_wheel_trains_the_default_and_samples_from_it(installed):
    python, work = installed
    dpgen = python.with_name("dpgen")
    r = _run([dpgen, "train", "evaluator=none", "logger=local", "trainer.progress=false", "hydra.run.dir=runs/default"],
             work)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((work / "runs" / "default" / "results.json").read_text())
    assert res["experiment"] == "digits_moments" and 0 < res["privacy"]["epsilon"] <= 10.0
    r = _run([dpgen, "sample", "runs/default", "--n", "20", "--out", "synth.npz"], work)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (work / "synth.npz").is_file() and (work / "synth.card.json").is_file()


@pytest.mark.parametrize("command", [["presets", "status"], ["reproduce", "render"], ["bench", "--only", "commands"]],
                         ids=" ".join)
def test_checkout_only_commands_refuse_in_one_line_from_the_wheel(installed, command):
    python, work = installed
    r = _run([python.with_name("dpgen"), *command], work)
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "source checkout" in r.stderr


def test_bench_from_the_wheel_refuses_before_torch_loads(installed):
    """`dpgen bench` from a wheel once printed its refusal and did not exit: it is refused before its module (and
    torch) loads."""
    python, work = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(python), "-X", "importtime", "-m", "dpgen", "bench", "--only", "commands"], cwd=work,
                       env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and "source checkout" in errors[0], r.stderr[-3000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "dpgen.bench.run" not in imported
