"""Branching a run from a checkpoint with fresh secret noise (``trainer.fresh_noise=true``, methods/loop.py): two
branches of one warm-up draw different batches and noise, and each branch's ledger holds the warm-up's spend."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from dpgen.data.datasets import digits
from dpgen.logging import RunLogger
from dpgen.methods import DPSWDGenerator, TrainContext, loop
from dpgen.models import ConvCondGen
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.projection import ProjectionDP

WARM = dict(kind="class_gaussian", epsilon_share=0.5, steps=4, batch_size=40, num_projections=16)


@pytest.fixture(scope="module")
def data():
    return digits(public_fraction=0.0, seed=0)


def _ctx(run_dir, **kw) -> TrainContext:
    base = dict(device=torch.device("cpu"), logger=RunLogger(run_dir), run_dir=run_dir, log_every=2,
                checkpoint_every=100, progress=False, deterministic=True)
    return TrainContext(**{**base, **kw})


def _dpswd() -> DPSWDGenerator:
    return DPSWDGenerator(generator=partial(ConvCondGen, d_code=4, hidden=16),
                          dp=ProjectionDP(64, bound="bernstein", directions="orthogonal"), batch_size=40, epochs=1,
                          lr=1e-3, label_mode="partition", warm_start=WARM)


def _continue(data, warm_dir, run_dir, fresh: bool) -> tuple[DPSWDGenerator, PrivacyLedger, dict]:
    method, ledger = _dpswd(), PrivacyLedger(4.0, 1e-4)
    out = loop.train(method, data, ledger, _ctx(run_dir, max_steps=3, fresh_noise=fresh,
                                                resume_from=warm_dir / "checkpoints" / "last.pt"))
    return method, ledger, out


def test_two_branches_of_one_warm_up_draw_fresh_noise_and_carry_its_ledger(tmp_path, data):
    warm_ledger = PrivacyLedger(4.0, 1e-4)
    loop.train(_dpswd(), data, warm_ledger, _ctx(tmp_path / "warm", max_steps=0))  # the warm-up alone
    assert len(warm_ledger.entries) == 1  # the moment release

    copies = [_continue(data, tmp_path / "warm", tmp_path / f"copy{i}", fresh=False) for i in (1, 2)]
    branches = [_continue(data, tmp_path / "warm", tmp_path / f"branch{i}", fresh=True) for i in (1, 2)]
    # resumed copies restore the checkpoint's generators: the same batches and noise, one draw for both
    for p, q in zip(copies[0][0].G.parameters(), copies[1][0].G.parameters(), strict=True):
        assert torch.equal(p, q)
    # branches: fresh secret noise and batches from the checkpoint's step on
    moved = [not torch.equal(p, q) for p, q in zip(branches[0][0].G.parameters(), branches[1][0].G.parameters(),
                                                    strict=True)]
    assert any(moved)
    g = [b[0].projection.generator.get_state() for b in branches]
    assert not torch.equal(g[0], g[1])
    for _, ledger, out in branches:
        # the warm-up's release first, then the branch's own OT releases; ε over the whole history
        assert ledger.entries[0] == warm_ledger.entries[0] and sum(e.steps for e in ledger.entries) == 1 + 3
        assert ledger.epsilon() > warm_ledger.epsilon()
        assert out["fresh_noise"] is True and out["branched_at_step"] == 0
    assert "fresh_noise" not in copies[0][2]


def test_fresh_noise_without_a_checkpoint_to_branch_is_refused(tmp_path):
    from tests.helpers.runs import train_here

    r = train_here(["experiment=digits_dpswd", "trainer.fresh_noise=true", "logger=local", f"hydra.run.dir={tmp_path}"])
    assert r.returncode == 2, r.stderr[-2000:]
    assert "error: trainer.fresh_noise=true branches a run from its checkpoint" in r.stderr
    assert "trainer.resume=<run folder or .pt>" in r.stderr


def test_a_branch_from_the_command_line_records_itself_and_the_whole_ledger(tmp_path):
    import json

    from tests.helpers.runs import train_here

    common = ["experiment=digits_dpswd", "logger=local", "evaluator=none", "trainer.progress=false",
              "trainer.checkpoint_every=2"]
    r = train_here([*common, "trainer.max_steps=4", f"hydra.run.dir={tmp_path / 'warm'}"])
    assert r.returncode == 0, r.stderr[-3000:]
    r = train_here([*common, "trainer.max_steps=6", f"trainer.resume={tmp_path / 'warm'}", "trainer.fresh_noise=true",
                    f"hydra.run.dir={tmp_path / 'branch'}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((tmp_path / "branch" / "results.json").read_text())
    assert res["train"]["fresh_noise"] is True and res["train"]["branched_at_step"] == 4
    assert res["privacy"]["private_steps"] == 6  # the 4 steps before the branch point and its own 2
