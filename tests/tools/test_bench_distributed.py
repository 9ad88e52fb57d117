"""``dpgen bench --only distributed``: 1 vs N processes of the same command, one ratio per row (no timing asserted)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from dpgen.bench import distributed


def test_the_n_process_command_is_torchrun_around_the_one_process_command(tmp_path):
    one = distributed.command("digits_dpsgd", 60, "cpu", 1, tmp_path / "a")
    two = distributed.command("digits_dpsgd", 60, "cpu", 2, tmp_path / "a")
    assert one[0] == sys.executable and one[1] == "train.py"
    assert two[:6] == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    assert two[6:] == one[1:] and "trainer.max_steps=60" in one and f"hydra.run.dir={tmp_path / 'a'}" in one


def test_rows_give_the_ratio_in_one_run_and_say_why_a_side_was_not_measured(monkeypatch):
    calls: list[str] = []

    def fake(cmd: list[str], run_dir: Path) -> float:
        calls.append("2" if "torch.distributed.run" in cmd else "1")
        distributed.WHOLE_S[run_dir] = 40.0 if calls[-1] == "1" else 32.0  # the whole command's wall seconds
        if "digits_dpswd" in " ".join(cmd) and calls[-1] == "2":
            raise RuntimeError("exit 1: no process group")
        return 10.0 if calls[-1] == "1" else 18.0

    monkeypatch.setattr(distributed, "steps_per_s", fake)
    monkeypatch.setattr(distributed, "collective_latency", lambda device, n: {"us": {"all-reduce of 1 number": 250.0}})
    rows = dict(distributed.rows(torch.device("cpu")))
    latency = rows.pop(next(k for k in rows if k.startswith("one collective between 2 processes on cpu (gloo")))
    assert latency == "all-reduce of 1 number: 250 µs (median of 10 blocks of 30)"
    sgd = next(v for k, v in rows.items() if "`mnist_dpsgd`" in k)
    swd = next(v for k, v in rows.items() if "`digits_dpswd`" in k)
    assert sgd.startswith("10.0 vs 18.0 steps/s: ×1.80 (median of") and "load average" in sgd and "target ×1.8" in sgd
    assert swd == "not measured: exit 1: no process group"
    assert sgd.endswith("; whole run 40.0 vs 32.0 s: ×1.25")  # what a user's wall clock sees, beside the steps
    assert all(len(f"| {k} | {v} |") <= 300 for k, v in rows.items())  # a table row of the page (tests/structure)
    families = {k.split(" (")[0] for k in rows}
    assert families == {"DP-SGD classifier", "DP-SWD generator", "DP-SWD adapter", "DP-DANN", "DPSWflow-r", "DPSWgen",
                        "DP-Sinkhorn"}
    assert calls[:2 * distributed.REPEATS] == ["1", "2"] * distributed.REPEATS  # alternating


def test_a_failed_run_is_told_by_its_error_line_not_torchrun_s_banner():
    import subprocess

    banner = "=" * 60 + "\n  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n" + "=" * 60
    r = subprocess.CompletedProcess([], 1, stdout="", stderr="[rank0]: Traceback ...\nRuntimeError: gloo: connection "
                                    "closed by peer\n" + banner)
    assert distributed.failure_line(r) == "exit 1: RuntimeError: gloo: connection closed by peer"
    r = subprocess.CompletedProcess([], 2, stdout="", stderr="error: trainer.device=cuda but no CUDA device\n" + banner)
    assert distributed.failure_line(r) == "exit 2: error: trainer.device=cuda but no CUDA device"
    died = ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n" + "=" * 60 + "\nFailures:\n"
            "  <NO_OTHER_FAILURES>\nRoot Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n"
            "  exitcode  : -6 (pid: 123)\n" + "=" * 60)
    r = subprocess.CompletedProcess([], 1, stdout="", stderr=died)
    assert distributed.failure_line(r) == ("exit 1: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "
                                           "(rank : 1 (local_rank: 1); exitcode : -6 (pid: 123))")


def test_the_collectives_bench_times_every_collective_on_two_gloo_processes():
    """The real module on 2 gloo processes: one median per collective, positive (no time is asserted)."""
    got = distributed.collective_latency("cpu", 2)
    assert got["backend"] == "gloo" and got["world_size"] == 2
    assert set(got["us"]) == {"all-reduce of 1 number", "all-reduce of 100,000 numbers",
                              "all-gather of 100 x 1,000 rows", "broadcast of 100 numbers"}
    assert all(v > 0 for v in got["us"].values())
