"""Several jobs of a sweep at once (``hydra/launcher=joblib hydra.launcher.n_jobs=N``, docs/guides/sweeps.md).

Fast: the launcher composes, and its ``n_jobs`` reaches what a job sizes from it (``trainer.threads=auto``:
cores / jobs; DP-SGD's ``model.microbatch=auto``: the free GPU memory / jobs).  Slow: a real 2-job sweep with
``n_jobs=2`` runs its jobs at the same time, each in its own process holding its own run folder's lock, and
leaves every folder complete, released and unmixed.  Counts and process ids are asserted, never times
(jobs per hour: ``dpgen bench --only sweep``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra.core.hydra_config import HydraConfig

from dpgen.runs import HOLDER_FILE, STATE_DIR, in_use
from dpgen.utils.threads import concurrent_jobs, resolve_threads
from tests.helpers import ROOT
from tests.helpers.configs import compose_cfg

JOBLIB = ["hydra/launcher=joblib", "hydra.mode=MULTIRUN"]


@pytest.fixture
def sweep_of(request):
    """``sweep_of(n_jobs)``: this process inside a job of a joblib multirun of ``n_jobs`` (Hydra's runtime config as
    a job sees it), undone after the test."""

    def enter(n_jobs: int):
        cfg = compose_cfg([*JOBLIB, f"hydra.launcher.n_jobs={n_jobs}"], out_dir=Path("unused-output"),
                          return_hydra_config=True)
        HydraConfig.instance().set_config(cfg)
        return cfg

    request.addfinalizer(lambda: setattr(HydraConfig.instance(), "cfg", None))
    return enter


def test_the_joblib_launcher_composes_and_its_n_jobs_divides_the_cores(sweep_of):
    cfg = sweep_of(2)
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.prefer == "processes"
    assert concurrent_jobs() == 2
    assert resolve_threads("auto", cores=4) == 2 and resolve_threads("auto", cores=2) == 1  # jobs read from Hydra
    assert resolve_threads(1) == 1  # the default: one thread per job, whatever n_jobs
    sweep_of(4)
    assert concurrent_jobs() == 4 and resolve_threads("auto", cores=16) == 4


def test_microbatch_auto_shares_the_free_gpu_memory_between_the_jobs_of_a_sweep(sweep_of, monkeypatch):
    """``auto_microbatch`` on a (faked) CUDA device: 8 GiB free, 1 MiB per sample's gradients, the share
    AUTO_MEMORY_SHARE = 1/2: 4096 rows for one run, 2048 for each of the two runs of an ``n_jobs=2`` sweep.  The
    probe's per-sample gradients are faked too (their memory is what the fake allocator reports)."""
    import dpgen.privacy.dpsgd as dpsgd

    probe = 8
    monkeypatch.setattr(dpsgd, "on_gpu", lambda device: True)
    monkeypatch.setattr(dpsgd, "per_sample_grads", lambda *a, **k: {})
    monkeypatch.setattr(dpsgd, "per_sample_norms", lambda grads: None)
    for name, fake in {"synchronize": lambda *a: None, "reset_peak_memory_stats": lambda *a: None,
                       "memory_allocated": lambda *a: 0, "max_memory_allocated": lambda *a: probe * 2**20,
                       "mem_get_info": lambda *a: (8 * 2**30, 80 * 2**30)}.items():
        monkeypatch.setattr(torch.cuda, name, fake)
    net = torch.nn.Linear(64, 10)

    def chunk() -> int:
        return dpsgd.auto_microbatch(net, None, (1, 8, 8), torch.device("cpu"), capacity=10**6, probe=probe)

    assert chunk() == 4096  # no sweep: the run has the free memory's share to itself
    sweep_of(2)
    assert chunk() == 2048


# ----------------------------------------------------------------------------------------- a real sweep
# one release of per-class moments on the 8x8 digits, a small logistic-regression check, no FID
TINY = ["experiment=digits_moments", "logger=local", "trainer.progress=false", "evaluator.n_synthetic=100",
        "evaluator.classifiers=[logreg]", "evaluator.logreg_max_iter=50", "evaluator.fid.enabled=false",
        "evaluator.class_grids=false", "evaluator.grid_per_class=1"]


def _holders(sweep: Path) -> dict[str, int]:
    """``{job folder name: pid}`` of the jobs whose run folder is held right now (``.dpgen/holder.json`` exists
    from just after a run takes its lock until just before it releases it; read only, never locked here)."""
    out = {}
    for path in sweep.glob(f"*/{STATE_DIR}/{HOLDER_FILE}"):
        try:
            out[path.parent.parent.name] = json.loads(path.read_text())["pid"]
        except (OSError, ValueError, KeyError):  # removed or half-written between glob and read
            continue
    return out


@pytest.mark.slow  # two fresh processes importing torch and running a sweep job each (~30 s on 2 cores)
def test_a_two_job_sweep_with_n_jobs_2_runs_both_at_once_each_in_its_own_locked_folder(tmp_path):
    sweep, barrier = tmp_path / "sweep", tmp_path / "barrier"
    cmd = [sys.executable, str(ROOT / "train.py"), "-m", "accountant.epsilon=2,8", *TINY, "trainer.threads=auto",
           "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}",
           "hydra.sweep.subdir=${hydra.job.num}",
           "+hydra.callbacks.barrier._target_=tests.helpers.sweep_barrier.Barrier",
           "+hydra.callbacks.barrier.jobs=2", f"+hydra.callbacks.barrier.folder={barrier}"]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    seen: dict[str, set[int]] = {"0": set(), "1": set()}
    most_at_once = 0
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        while p.poll() is None:
            held = _holders(sweep)
            most_at_once = max(most_at_once, len(held))
            for job, pid in held.items():
                seen.setdefault(job, set()).add(pid)
            time.sleep(0.02)
        out, err = p.communicate()
    assert p.returncode == 0, (out + err)[-3000:]

    # both jobs had started before either ran its task: they ran at the same time, in two processes
    assert [(barrier / f"{j}.met").read_text() for j in (0, 1)] == ["2", "2"]
    pids = {int((barrier / f"{j}.started").read_text()) for j in (0, 1)}
    assert len(pids) == 2 and p.pid not in pids
    # each job held its own folder's lock, both at once, from the process that ran it
    assert most_at_once == 2, seen
    assert seen["0"] | seen["1"] == pids and len(seen["0"]) == len(seen["1"]) == 1 and seen["0"] != seen["1"]

    threads = resolve_threads("auto", jobs=2)  # what trainer.threads=auto gives each of 2 jobs here
    for job, eps in (("0", 2.0), ("1", 8.0)):
        folder = sweep / job
        res = json.loads((folder / "results.json").read_text())  # complete and its own: its ε, its overrides
        assert res["privacy"]["target_epsilon"] == eps and 0 < res["privacy"]["epsilon"] <= eps
        assert f"accountant.epsilon={eps:g}" in res["overrides"] and "acc_logreg" in res["metrics"]
        assert res["threads"] == threads
        assert not (folder / STATE_DIR / HOLDER_FILE).exists() and not in_use(folder)  # released
        assert (folder / ".hydra" / "config.yaml").exists() and (folder / "privacy_card.json").exists()
    assert sorted(q.name for q in sweep.iterdir() if q.is_dir()) == ["0", "1"]  # no other folder, nothing mixed
