"""One run on two processes (torch.distributed, gloo) is the single-process run.

Two processes are forked ONCE for the module (``two_ranks``: a few seconds); each runs every check
below on its part of the data and saves what it released.  The test process computes the
single-process reference with the same seeds and compares:

* the sampler: the ranks' parts of every batch are disjoint and their union is the single-process
  batch (inclusion rate q within its sampling error; B records without replacement);
* a sum release is noised once: over repeated releases of a fixed sum the released variance is
  sigma^2 Delta^2 (not ~2 sigma^2 Delta^2), and the released tensor equals the single-process one;
* a projection release and a class-moment release equal the single-process ones (same noise draws);
* training (DP-SGD, the class-Gaussian default, DP-SWD; trainer.deterministic=true): epsilon, delta,
  sigma and the ledger equal the single-process run's to 1e-9; with the noise switched off one step's
  parameters equal the single-process step's to 1e-6, and every rank holds the same parameters;
* the other private families (DP-Sinkhorn, DPSWflow-r, DPSWgen, DPSWflow, the DP-SWD adapter, DP-DANN)
  the same way, in one more pair of processes (slow suite).

Launching through torchrun, one run folder, a killed rank and resuming on another number of
processes: ``test_distributed_runs.py``.
"""

from __future__ import annotations

import os
import re
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dpgen.logging import SilentLogger
from dpgen.methods import loop
from dpgen.methods.base import TrainContext
from dpgen.privacy import PrivacyLedger, PrivateSampler
from dpgen.privacy.mechanisms import GaussianProjectionRelease, Mechanism, NoisyGradientSum
from dpgen.privacy.moments import ClassMomentRelease
from dpgen.privacy.noise import FixedMultiplier
from dpgen.privacy.rows import class_blocks, fixed_size
from dpgen.utils import dist as distributed

WORLD = 2
N, Q, DRAWS = 1000, 0.05, 300          # sampler
SIGMA, C, DIM, REPEATS = 2.0, 1.0, 40, 300  # noise-once check
PRESETS = {  # family -> (experiment, overrides): a few steps of each on the bundled 8x8 digits (fast suite)
    "dpsgd": ("digits_dpsgd", ["model.batch_size=32", "model.epochs=1", "accountant.calibrate_with=rdp", "model.network.channels=[4,4]",
                               "model.network.hidden=[8,8]"]),
    "class_gaussian": ("digits_moments", []),
    "dpswd": ("digits_dpswd", ["model.dp.num_projections=20", "model.epochs=1"]),
}
MORE_PRESETS = {  # the other private families (slow suite: one more pair of processes)
    "dpsinkhorn": ("digits_dpsinkhorn", ["model.steps=20", "model.generator.hidden=8"]),
    "dpswflow_r": ("digits_dpswflow_r", ["model.ae_steps=5", "model.epochs=1", "model.dp.num_projections=20"]),
    "dpswd_adapter": ("digits_shift_dpswd", ["model.epochs=1", "model.start_align=0"]),
    # dropout 0 in g: its masks in the per-sample pass are drawn per rank (the released sum is still one draw)
    "dp_dann": ("digits_shift_dp_dann", ["model.epochs=1", "model.start_align=0", "++model.feature_extractor.dropout=0.0"]),
    "dpswgen": (None, ["dataset=digits", "model=dpswgen", "model.autoencoder=null", "model.epochs=1",
                         "model.representation={kind:dct,n_components:8}", "model.dp.num_projections=20"]),
    "dpswflow": (None, ["dataset=digits", "model=dpswflow", "model.autoencoder=null", "model.steps=5",
                          "model.representation={kind:dct,n_components:8}"]),
}
STEPS = 3


class _Rows:
    """A private source of ``n`` records: record i is ``(i * ones(dim), i % 3)`` (visible sampling)."""

    def __init__(self, n: int, dim: int = 2) -> None:
        self.x, self.y = torch.arange(n, dtype=torch.float32)[:, None].repeat(1, dim), torch.arange(n) % 3

    def __len__(self) -> int:
        return self.x.shape[0]

    def _gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[idx], self.y[idx]


def _contributions(rank: int) -> torch.Tensor:
    """Per-record gradients of this rank (3 records each, norms above and below C)."""
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(3, DIM, generator=g) * torch.tensor([0.1, 0.5, 3.0])[:, None]


def _ledger(sampling: str = "poisson") -> PrivacyLedger:
    return PrivacyLedger(epsilon=None, delta=1e-5, sampling=sampling)


# ---------------------------------------------------------------------------- what each rank (or one process) runs
def _sampler_draws(sampling: str, batch: int) -> list[torch.Tensor]:
    s = PrivateSampler(_Rows(N), batch, sampling, seed=7)
    return [s.sample_indices() for _ in range(DRAWS)]


def _sum_releases(parts: list[torch.Tensor]) -> torch.Tensor:
    mech = NoisyGradientSum(_ledger(), clip_norm=C, sample_rate=Q, expected_batch_size=1.0, seed=3,
                            noise=FixedMultiplier(SIGMA))
    return torch.stack([mech.release([{"w": p} for p in parts])["w"] for _ in range(REPEATS)])


def _projection_release(rows: torch.Tensor, labels: torch.Tensor) -> dict:
    torch.manual_seed(5)  # the global RNG: the cut of fixed_size / class_blocks
    mech = GaussianProjectionRelease(_ledger(), dim=rows.shape[1], num_projections=4, steps=1, sample_rate=Q,
                                     n_private=N, seed=9, noise=FixedMultiplier(1.0))
    batch = fixed_size(rows, 16)
    blocks = class_blocks(rows, labels, 3, 4)
    u = mech.draw_directions()
    return {"batch": batch, "blocks": blocks, "u": u, "released": mech.release(batch, u),
            "released_blocks": mech.release(blocks, u)}


def _moment_release(z: torch.Tensor, y: torch.Tensor) -> dict:
    mech = ClassMomentRelease(_ledger(), n_classes=3, radius=1.0, seed=4, shrinkage="none", noise=FixedMultiplier(0.5))
    m = mech.release(z, y)
    return {"counts": m.counts, "means": m.means, "covariances": m.covariances}


def _moment_rows() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    z = torch.nn.functional.normalize(torch.randn(50, 4, generator=g), dim=1) * 0.9
    return z, torch.arange(50) % 3


def _train(family: str, out: Path, noise: bool, steps: int) -> dict:
    """A few deterministic steps of a preset through the training loop; what a rank holds at the end."""
    from hydra.utils import instantiate

    from tests.helpers.configs import compose_cfg

    experiment, extra = {**PRESETS, **MORE_PRESETS}[family]
    cfg = compose_cfg([f"experiment={experiment}" if experiment else "~experiment", "trainer.deterministic=true", *extra], out_dir=out)
    method = instantiate(cfg.model, _convert_="all")
    ledger = instantiate(cfg.accountant, _convert_="all")
    data = instantiate(cfg.dataset)
    torch.manual_seed(0)
    ctx = TrainContext(device=torch.device("cpu"), logger=SilentLogger(), run_dir=out, seed=0, log_every=10**6,
                       checkpoint_every=10**6, max_steps=steps, progress=False, deterministic=True)
    saved = Mechanism.noise
    if not noise:  # test-only: the noise switched off, to compare the un-noised updates
        Mechanism.noise = lambda self, shape, like: None
    try:
        summary = loop.train(method, data, ledger, ctx)
    finally:
        Mechanism.noise = saved
    # epsilon under every accountant is a function of the ledger's entries and delta (compared below)
    return {"release": method.release_state(), "ledger": ledger.state_dict(), "epsilon": ledger.epsilon(), "delta": ledger.delta,
            "mechanisms": {k: m.describe() for k, m in method.mechanisms.items()}, "steps": summary["train_steps"]}


def _checks(rank: int, out: Path) -> dict:
    """Everything one rank (or the single process) computes; saved and compared by the tests."""
    rows = _Rows(48, dim=3)
    z, y = _moment_rows()
    lo, hi = distributed.shard_bounds(48)
    zlo, zhi = distributed.shard_bounds(z.shape[0])
    res = {
        "poisson": _sampler_draws("poisson", int(Q * N)),
        "without_replacement": _sampler_draws("without_replacement", 64),
        "sums": _sum_releases([_contributions(r) for r in range(WORLD)] if not distributed.active()
                              else [_contributions(rank)]),
        "projection": _projection_release(rows.x[lo:hi] / 100.0, rows.y[lo:hi]),
        "moments": _moment_release(z[zlo:zhi], y[zlo:zhi]),
    }
    for family in PRESETS:
        res[family] = _train(family, out / family / str(rank), noise=True, steps=STEPS)
    res["dpsgd_noise_off"] = _train("dpsgd", out / "off" / str(rank), noise=False, steps=1)
    return res


def _more_checks(rank: int, out: Path) -> dict:
    return {family: _train(family, out / family / str(rank), noise=True, steps=STEPS) for family in MORE_PRESETS}


def _rank_main(rank: int, port: int, out: Path, checks=_checks) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=120))
    try:
        torch.save(checks(rank, out), out / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _two_and_one(out: Path, checks) -> tuple[list[dict], dict]:
    """(what each of the 2 ranks computed, what one process computes with the same seeds).  The single process
    runs first; the ranks are forked from it and start with its imports done (a cache they inherit, e.g. of
    accountant evaluations, is keyed by the inputs: a rank's different ledger is computed afresh)."""
    single = checks(0, out / "single")
    mp.start_processes(_rank_main, args=(_free_port(), out, checks), nprocs=WORLD, join=True, start_method="fork")
    ranks = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    return ranks, single


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[list[dict], dict]:
    return _two_and_one(tmp_path_factory.mktemp("distributed"), _checks)


@pytest.fixture(scope="module")
def two_ranks_more(tmp_path_factory) -> tuple[list[dict], dict]:
    return _two_and_one(tmp_path_factory.mktemp("distributed_more"), _more_checks)


# ---------------------------------------------------------------------------- the sampler
@pytest.mark.parametrize("sampling", ["poisson", "without_replacement"])
def test_ranks_draw_disjoint_parts_whose_union_is_the_single_process_batch(two_ranks, sampling):
    ranks, single = two_ranks
    sizes = []
    for t in range(DRAWS):
        parts = [r[sampling][t] for r in ranks]
        union = torch.cat(parts)
        assert len(set(parts[0].tolist()) & set(parts[1].tolist())) == 0  # no record on two ranks
        assert torch.equal(union, single[sampling][t])                     # the single-process batch, in order
        sizes.append(union.numel())
    if sampling == "without_replacement":
        assert set(sizes) == {64}
    else:  # every record included with probability q: the rate over DRAWS * N trials, within 4 standard errors
        rate = sum(sizes) / (DRAWS * N)
        assert abs(rate - Q) < 4 * (Q * (1 - Q) / (DRAWS * N)) ** 0.5


# ---------------------------------------------------------------------------- the releases
def test_a_sum_is_noised_once_with_the_single_process_noise(two_ranks):
    ranks, single = two_ranks
    released = ranks[0]["sums"]
    assert torch.equal(released, ranks[1]["sums"])                    # one released tensor on every rank
    torch.testing.assert_close(released, single["sums"], rtol=0, atol=1e-5)  # = the single-process release
    clipped = torch.cat([_contributions(r) for r in range(WORLD)])
    clipped = clipped * (C / clipped.norm(dim=1, keepdim=True)).clamp(max=1.0)
    noise = released - clipped.sum(0)
    ratio = float(noise.var()) / (SIGMA * C) ** 2                     # sigma^2 Delta^2 (Delta = C, add/remove)
    se = (2 / noise.numel()) ** 0.5
    assert abs(ratio - 1) < 5 * se, ratio                             # not ~W = 2 (noise added on every rank)


def test_projection_and_moment_releases_equal_the_single_process_ones(two_ranks):
    ranks, single = two_ranks
    for r in ranks:
        for key in ("batch", "blocks", "u", "released", "released_blocks"):
            torch.testing.assert_close(r["projection"][key], single["projection"][key], rtol=0, atol=1e-6)
        for key in ("counts", "means", "covariances"):
            torch.testing.assert_close(r["moments"][key], single["moments"][key], rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------- training
def _same_run(ranks: list[dict], single: dict, family: str) -> None:
    one = single[family]
    for r in ranks:
        got = r[family]
        assert got["steps"] == one["steps"]
        assert got["epsilon"] == pytest.approx(one["epsilon"], rel=1e-9, abs=1e-9)
        assert got["delta"] == one["delta"]
        assert got["mechanisms"] == one["mechanisms"]  # sigma, sensitivity, sample rate, releases
        assert got["ledger"] == one["ledger"]  # the same entries: sigma, q, relation, kind, guarantee
    # with the noise on and the same seeds, the released model is the single-process one (same noise)
    for name, value in one["release"].items():
        if isinstance(value, dict):
            for k, v in value.items():
                if torch.is_tensor(v) and v.is_floating_point():
                    torch.testing.assert_close(ranks[1][family]["release"][name][k], ranks[0][family]["release"][name][k],
                                               rtol=0, atol=0)  # every rank holds the same model
                    torch.testing.assert_close(ranks[0][family]["release"][name][k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", list(PRESETS))
def test_epsilon_delta_sigma_and_ledger_equal_the_single_process_run(two_ranks, family):
    _same_run(*two_ranks, family)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(MORE_PRESETS))
def test_every_other_private_family_is_the_single_process_run(two_ranks_more, family):
    _same_run(*two_ranks_more, family)


def test_one_step_without_noise_equals_the_single_process_step(two_ranks):
    ranks, single = two_ranks
    one = single["dpsgd_noise_off"]["release"]["network"]
    for r in ranks:
        for k, v in one.items():
            torch.testing.assert_close(r["dpsgd_noise_off"]["release"]["network"][k], v, rtol=0, atol=1e-6)


@pytest.mark.parametrize("multirun", [False, True])
def test_every_rank_names_its_folder_from_rank_0s_clock(monkeypatch, multirun):
    """torchrun: rank 1 started a second later, yet its run (or sweep) folder is rank 0's; a sweep's jobs
    then run one after the other on all the processes, in ONE sweep folder."""
    from datetime import datetime

    from dpgen.paths import CONFIGS
    from dpgen.utils import dist as udist
    from dpgen.utils import launch

    rank0_start = datetime(2026, 1, 2, 3, 4, 5).timestamp()
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(udist, "init_from_env", lambda: True)
    monkeypatch.setattr(udist, "broadcast_object", lambda obj, src=0: rank0_start)
    argv = ["-m", "accountant.epsilon=1,2"] if multirun else ["accountant.epsilon=1"]
    key = "sweep" if multirun else "run"
    out = launch.run_dir_overrides(argv, CONFIGS / "hydra" / "default.yaml")
    assert out == [f"hydra.{key}.dir={'multirun' if multirun else 'outputs'}/${{experiment_name}}/2026-01-02_03-04-05",
                   "hydra.output_subdir=null"]
    assert launch.run_dir_overrides([*argv, f"hydra.{key}.dir=/x"], CONFIGS / "hydra" / "default.yaml") == \
        ["hydra.output_subdir=null"]


@pytest.mark.parametrize("gpus", [1, 2])
def test_nccl_only_when_every_process_of_the_node_has_a_gpu(monkeypatch, gpus):
    """Two processes on a one-GPU machine: gloo alone (trainer.device=cpu runs; cuda is one error line);
    on two GPUs: each process takes its own and NCCL carries the cuda tensors."""
    from dpgen.utils import dist as udist

    chosen: list = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(udist.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(udist.torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(udist.torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(udist.tdist, "is_initialized", lambda: False)
    monkeypatch.setattr(udist.tdist, "init_process_group", lambda backend, timeout: chosen.append(backend))
    assert udist.init_from_env()
    assert chosen == (["gloo"] if gpus == 1 else [1, "cpu:gloo,cuda:nccl"])
    monkeypatch.setattr(udist, "active", lambda: True)
    assert udist.too_few_gpus(torch.device("cpu")) is None
    if gpus == 1:
        assert re.search(r"trainer.device=cuda on 2 processes per node .* --nproc 1", udist.too_few_gpus(torch.device("cuda")))
    else:
        assert udist.too_few_gpus(torch.device("cuda")) is None
