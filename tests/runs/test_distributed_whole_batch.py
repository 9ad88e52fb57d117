"""Two processes (gloo) compute the one-process estimator and log the whole batch's values.

* The non-private baselines (SGD, DANN, SWD) are the mean loss over the WHOLE batch (the sum over every rank's
  rows divided by the batch's size), not the average of each rank's mean: without dropout, a few steps on two
  processes move the weights as one process does, to float rounding (a rank's Poisson half is not half the
  batch, so the average of the ranks' means weights the samples wrongly and ends 1e-3 or more away).
* Every logged quantity of the domain-adaptation step (``loss``, ``loss_cls``, ``align``) is the whole batch's
  on every rank: the DP-SWD adapter's and DP-DANN's, private, with the same noise as one process (the same
  seeds), and the baselines'.

One pair of processes for the module (slow suite); each runs every family and saves what it logged and released.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dpgen.logging import SilentLogger
from dpgen.methods import loop
from dpgen.methods.base import TrainContext
from tests.runs.test_distributed import BASELINES, MORE_PRESETS, NO_DROPOUT, _two_and_one

STEPS = 4
FAMILIES = {  # family -> (experiment, overrides): dropout off, so one and two processes draw nothing different
    "sgd": BASELINES["sgd"],
    "swd": (BASELINES["swd"][0], [*BASELINES["swd"][1], *NO_DROPOUT]),
    "dann": (BASELINES["dann"][0], [*BASELINES["dann"][1], *NO_DROPOUT]),
    "dpswd_adapter": MORE_PRESETS["dpswd_adapter"],
    "dp_dann": MORE_PRESETS["dp_dann"],
}
LOGGED = ("loss", "loss_cls", "align", "released_grad_norm")
ATOL = 1e-5  # float32 rounding of sums taken in another order over a few steps


def _run(family: str, out: Path) -> dict:
    from hydra.utils import instantiate

    from tests.helpers.configs import compose_cfg

    experiment, extra = FAMILIES[family]
    cfg = compose_cfg([f"experiment={experiment}", "trainer.deterministic=true", *extra], out_dir=out)
    method = instantiate(cfg.model, _convert_="all")
    ledger = instantiate(cfg.accountant, _convert_="all")
    data = instantiate(cfg.dataset)
    torch.manual_seed(0)
    ctx = TrainContext(device=torch.device("cpu"), logger=SilentLogger(), run_dir=out, seed=0, log_every=10**6,
                       checkpoint_every=10**6, max_steps=STEPS, progress=False, deterministic=True)
    logged, step = [], method.step

    def recorded(t: int) -> dict:
        values = step(t)
        logged.append({k: float(v) for k, v in values.items() if k in LOGGED})
        return values
    method.step = recorded
    loop.train(method, data, ledger, ctx)
    return {"release": method.release_state(), "logged": logged}


def _checks(rank: int, out: Path) -> dict:
    return {family: _run(family, out / family / str(rank)) for family in FAMILIES}


@pytest.fixture(scope="module")
def two_ranks_whole(tmp_path_factory) -> tuple[list[dict], dict]:
    return _two_and_one(tmp_path_factory.mktemp("whole_batch"), _checks)


def _tensors(release: dict) -> dict:
    return {f"{name}.{k}": v for name, value in release.items() if isinstance(value, dict)
            for k, v in value.items() if torch.is_tensor(v) and v.is_floating_point()}


@pytest.mark.slow
@pytest.mark.parametrize("family", ["sgd", "swd", "dann"])
def test_a_non_private_baseline_on_two_processes_is_the_one_process_estimator(two_ranks_whole, family):
    ranks, single = two_ranks_whole
    one = _tensors(single[family]["release"])
    for r in ranks:
        got = _tensors(r[family]["release"])
        for k, v in one.items():
            torch.testing.assert_close(got[k], v, rtol=0, atol=ATOL, msg=f"{family} {k}")


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_logged_value_of_two_processes_is_the_whole_batch_s(two_ranks_whole, family):
    ranks, single = two_ranks_whole
    one = single[family]["logged"]
    assert len(one) == STEPS and all(one)
    if family != "sgd":
        assert all("align" in v and "loss_cls" in v for v in one)  # every step aligns (start_align=0)
    for r in ranks:
        got = r[family]["logged"]
        assert [sorted(v) for v in got] == [sorted(v) for v in one]
        for t, (a, b) in enumerate(zip(got, one, strict=True)):
            for k in b:
                assert a[k] == pytest.approx(b[k], rel=1e-4, abs=ATOL), (family, t, k, a[k], b[k])
