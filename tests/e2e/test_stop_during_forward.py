"""A signal during a long native forward (the Inception network's TorchScript forward holds the main thread for
minutes on a CPU) ends the run within the grace period: the checkpoint intact, results.json labelled incomplete.
The forward here never returns (a TorchScript loop), so only the signal path can end the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from dpgen.runs import read_checkpoint
from tests.helpers import ROOT

DRIVER = textwrap.dedent("""
    import sys, pathlib, torch
    import dpgen.eval.fid as fid

    MARKER = pathlib.Path(sys.argv[1])

    @torch.jit.script
    def forever(x: torch.Tensor) -> torch.Tensor:  # one native call that does not return (the GIL released)
        while bool(x.sum() > -1.0):
            x = x * 1.0
        return x

    def forward(self, x):
        MARKER.write_text("in the forward")
        return forever(x)

    fid.DomainFeatures.forward = forward
    from dpgen.app import run_app
    raise SystemExit(run_app(sys.argv[2:]))
""")


def die_with_the_test() -> None:
    """Linux: the run is killed when the test process dies (a killed test run leaves no spinning child)."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the never-returning child is tied to the test on Linux")
def test_a_signal_during_a_forward_that_never_returns_ends_the_run_with_its_checkpoint(tmp_path):
    run_dir, marker, driver = tmp_path / "run", tmp_path / "forward", tmp_path / "driver.py"
    driver.write_text(DRIVER)
    args = ["experiment=digits_dpswd", "logger=local", "trainer.progress=false", "trainer.max_steps=6",
            "trainer.checkpoint_every=5", "evaluator.classifiers=[]", "evaluator.n_synthetic=0",
            "evaluator.fid.n_fid=300", "evaluator.fid.domain.min_steps=20", "evaluator.fid.domain.epochs=1",
            f"evaluator.fid.cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.Popen([sys.executable, str(driver), str(marker), *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=die_with_the_test)
    try:
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        time.sleep(0.5)  # inside the native loop by now
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)  # a hang guard: without the watchdog the run never ends
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM: the checkpoint is intact" in err, err[-3000:]  # the watchdog's end says so too
    results = json.loads((run_dir / "results.json").read_text())
    assert results["incomplete"]["stopped_by"] == "SIGTERM" and results["incomplete"]["during"] == "evaluation"
    assert read_checkpoint(run_dir / "checkpoints" / "last.pt")["step"] == 6  # whole and loadable
    assert not list(run_dir.glob("**/*.tmp"))
