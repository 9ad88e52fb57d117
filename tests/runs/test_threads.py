"""trainer.threads: resolved before any torch work, validated with a message naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpgen.config import validate
from dpgen.errors import ConfigError
from dpgen.utils.threads import THREAD_ENV_VARS, apply_threads, resolve_threads
from tests.helpers import ROOT
from tests.helpers.configs import compose_cfg


def test_default_is_one_thread():
    cfg = compose_cfg([], out_dir=Path("unused-output"))
    assert cfg.trainer.threads == 1


@pytest.mark.parametrize("cores,jobs,expected", [(2, 1, 2), (8, 1, 4), (8, 2, 4), (8, 4, 2), (2, 2, 1), (2, 8, 1),
                                                 (1, 1, 1), (16, 3, 4)])
def test_auto_divides_the_cores_among_concurrent_jobs(cores, jobs, expected):
    assert resolve_threads("auto", cores=cores, jobs=jobs) == expected


def test_explicit_counts_pass_through():
    assert resolve_threads(3) == 3 and resolve_threads("2") == 2


@pytest.mark.parametrize("bad", [0, -1, "many", 1.5])
def test_bad_threads_fail_in_validate_naming_the_setting(bad):
    cfg = compose_cfg([f"trainer.threads={bad}"], out_dir=Path("unused-output"))
    with pytest.raises(ConfigError, match="trainer.threads"):
        validate(cfg)


def test_apply_sets_torch_and_the_environment_of_subprocesses():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the test process runs one thread (tests/conftest.py): start from another count
    try:
        assert apply_threads(1) == 1
        assert torch.get_num_threads() == 1
        assert all(os.environ[v] == "1" for v in THREAD_ENV_VARS)
    finally:
        torch.set_num_threads(before)


def test_a_fresh_process_gets_the_threads_before_torch_work():
    code = ("import torch; from dpgen.utils.threads import apply_threads; apply_threads(2); "
            "print(torch.get_num_threads(), torch.get_num_interop_threads())")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for v in THREAD_ENV_VARS:
        env.pop(v, None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["2", "2"]
