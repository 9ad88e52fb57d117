"""Everyday commands stay fast: a refused typo, a refused value (ε, δ, a missing dataset setting, a device the
machine lacks, a wrong `dpgen sample --out`) and `dpgen presets` import neither torch nor the privacy core
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


def _no_gpu_driver() -> bool:
    from dpgen.utils.settings import certainly_no_cuda_gpu

    return certainly_no_cuda_gpu()


VALUE_REFUSALS = {
    "epsilon": (("train.py", "accountant.epsilon=-1"), "accountant.epsilon must be a positive"),
    "delta": (("train.py", "accountant.delta=2"), "accountant.delta must be in (0, 1)"),
    "dataset settings": (("train.py", "dataset=image_folder"), "required setting(s) not given: dataset.channels"),
    "precision": (("train.py", "trainer.precision=16"), "trainer.precision=16 is unknown"),
    "wandb mode": (("train.py", "logger.wandb.mode=sometimes"), "logger.wandb.mode='sometimes'"),
    "device": (("train.py", "trainer.device=cuda"), "trainer.device=cuda but this machine has no CUDA GPU"),
    "evaluator device": (("train.py", "evaluator.device=gpu"), "evaluator.device=gpu: dpgen runs on cpu, cuda or mps"),
    "nproc device": (("-m", "dpgen", "train", "--nproc", "2", "trainer.device=cuda"),
                     "trainer.device=cuda but this machine has no CUDA GPU"),
    "sample --out": (("-m", "dpgen", "sample", "{release}", "--out", "{tmp}/synth.txt"), "write a .npz file"),
    "sample --out taken": (("-m", "dpgen", "sample", "{release}", "--out", "{tmp}/taken.npz"), "already exist(s)"),
    "sample --out unwritable": (("-m", "dpgen", "sample", "{release}", "--out", "{tmp}/file/synth.npz"),
                                "cannot write there"),
    "sample release": (("-m", "dpgen", "sample", "{tmp}", "--out", "{tmp}/synth.npz"), "holds no release"),
}


@pytest.mark.parametrize("case", list(VALUE_REFUSALS))
def test_a_refused_value_is_said_before_torch_loads(case, tmp_path):
    """Every check of a setting's value runs before torch loads: a refusal costs a second, not the import of torch."""
    argv, fragment = VALUE_REFUSALS[case]
    if "device" in case and not _no_gpu_driver():
        pytest.skip("this machine has a GPU driver: torch must say whether the GPU is there")
    release = tmp_path / "run"
    release.mkdir()
    (release / "generator.pt").write_bytes(b"not read before the places are checked")
    (tmp_path / "taken.npz").write_bytes(b"")
    (tmp_path / "file").write_text("a file where a folder should be")
    argv = [a.format(release=release, tmp=tmp_path) for a in argv]
    r, names = _imported(*argv, f"hydra.run.dir={tmp_path / 'out'}") if "sample" not in case else _imported(*argv)
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(errors) == 1 and fragment in errors[0], r.stderr[-3000:]
    assert not {n for n in names if n.split(".")[0] in HEAVY or n in HEAVY}, "torch loaded before the refusal"
    assert not (tmp_path / "out").exists()


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
