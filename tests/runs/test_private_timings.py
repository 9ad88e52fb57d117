"""Wall-clock timings of a private run never leave the run folder: not through W&B's own time stamps,
results.json, the console or a world-readable file (docs/guides/runs.md, "What is kept where")."""

from __future__ import annotations

import io
import json
import stat
import struct
import time

import pytest
import torch
from rich.console import Console

from dpgen.logging import RunLogger
from dpgen.logging.run_logger import split_private_timings
from dpgen.logging.summary import print_summary


def wandb_records(path):
    """The records of an offline W&B transaction log (``run-<id>.wandb``: a 7-byte header, then 32 KiB blocks
    of records framed as checksum (4 bytes), length (2), type (1: full, 2: first, 3: middle, 4: last))."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, block, part = path.read_bytes(), 7, 32768, b""
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # block padding
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(part)
            yield record


def finished_records(path, timeout: float = 60.0) -> list:
    """The records of an offline W&B run once its ``exit`` record is on disk (W&B's service writes after
    ``finish()`` returns)."""
    deadline = time.time() + timeout
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.time() > deadline:
            return records
        time.sleep(0.2)


def key(item) -> str:
    return item.key or "/".join(item.nested_key)


def test_wandb_gets_no_per_step_times_and_no_system_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = RunLogger(tmp_path, run_config={"experiment_name": "e", "trainer": {"resume": False}},
                       wandb={"mode": "offline"})
    for step in (1, 2, 3):
        logger.log_metrics({"epsilon": 0.1 * step}, step=step)
        time.sleep(0.6)  # private steps that take time: W&B must not see how long
    logger.log_images("samples", torch.rand(4, 1, 8, 8), nrow=2)
    logger.log_summary({"experiment": "e", "metrics": {"acc_logreg": 0.5, "eval_time_s": 7.0},
                        "privacy": {"epsilon": 0.3, "delta": 1e-5}, "train": {"train_time_s": 3.0}, "runtime_s": 3.0})
    logger.finish()
    log = next(tmp_path.glob("wandb/offline-run-*/run-*.wandb"))
    records = finished_records(log)
    history = [{key(i): json.loads(i.value_json) for i in r.history.item} for r in records
               if r.WhichOneof("record_type") == "history"]
    steps = [h["_step"] for h in history if "epsilon" in h and "eval/acc_logreg" not in h]
    assert steps == [1, 2, 3]  # the whole history arrived
    assert len({h["_timestamp"] for h in history}) == 1  # one stamp for every row: no per-step times
    runtimes = [h["_runtime"] for h in history]
    assert max(runtimes) - min(runtimes) < 0.5  # the steps were 0.6 s apart; W&B saw only the upload
    assert not [r for r in records if r.WhichOneof("record_type") == "stats"]  # no system metrics sampled over time
    summary = {key(i) for r in records if r.WhichOneof("record_type") == "summary"
               for i in r.summary.update}
    assert not [k for k in summary if k.endswith("_time_s") or k == "runtime_s"]


def test_wandb_gets_the_whole_history_of_a_run_killed_before_its_upload(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    first = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    first.log_metrics({"epsilon": 0.1}, step=1)  # killed here (kill -9: no finish, nothing sent)
    assert not (tmp_path / "wandb").exists() and not (tmp_path / "wandb_run_id").exists()
    second = RunLogger(tmp_path, run_config={"trainer": {"resume": True}}, wandb={"mode": "offline"})
    second.log_metrics({"epsilon": 0.2}, step=2)
    second.finish()
    run_id = (tmp_path / "wandb_run_id").read_text().strip()
    log = next(tmp_path.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))
    steps = [json.loads(i.value_json) for r in finished_records(log) if r.WhichOneof("record_type") == "history"
             for i in r.history.item if key(i) == "_step"]
    assert steps == [1, 2]


def test_a_run_refused_before_logging_opens_no_wandb_run(tmp_path, fake_wandb_init):
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}}, wandb={"mode": "offline"})
    logger.finish()  # e.g. a batch size the private split cannot fill, raised in the method's setup
    assert fake_wandb_init == [] and not (tmp_path / "wandb_run_id").exists()


@pytest.fixture
def fake_wandb_init(monkeypatch):
    import sys
    import types

    calls: list = []
    mod = types.ModuleType("wandb")
    mod.init = lambda **kw: calls.append(kw)
    monkeypatch.setitem(sys.modules, "wandb", mod)
    return calls


def test_results_keep_no_timing_and_the_timings_file_is_private(tmp_path):
    results = {"experiment": "e", "metrics": {"acc_logreg": 0.5, "eval_time_s": 7.0},
               "privacy": {"epsilon": 1.0, "delta": 1e-5, "target_epsilon": 1.0},
               "train": {"train_time_s": 3.0, "train_steps": 5}, "runtime_s": 11.0}
    public, timings = split_private_timings(results)
    assert "eval_time_s" not in public["metrics"] and timings["metrics.eval_time_s"] == 7.0
    logger = RunLogger(tmp_path, run_config={"trainer": {"resume": False}})
    logger.log_summary(results)
    logger.finish()
    saved = (tmp_path / "results.json").read_text()
    assert "_time_s" not in saved and "runtime" not in saved
    path = tmp_path / "private_timings.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # owner only, as the checkpoints
    assert json.loads(path.read_text())["metrics.eval_time_s"] == 7.0
    buf = io.StringIO()
    print_summary(results, Console(file=buf, width=200))
    assert "11.0" not in buf.getvalue() and "private_timings.json" in buf.getvalue()  # the console names the file only
