"""One run on two processes (torch.distributed, gloo) is the single-process run.

Two processes are forked ONCE for the module (``two_ranks``: a few seconds); each runs every check
below on its part of the data and saves what it released.  The test process computes the
single-process reference with the same seeds and compares:

* the sampler: the ranks' parts of every batch are disjoint and their union is the single-process
  batch (inclusion rate q within its sampling error; B records without replacement);
* a sum release is noised once: over repeated releases of a fixed sum the released variance is
  sigma^2 Delta^2 (not ~2 sigma^2 Delta^2), and the released tensor equals the single-process one;
* a projection release and a class-moment release equal the single-process ones (same noise draws);
* training (DP-SGD, the class-Gaussian default, DP-SWD, DP-Sinkhorn; trainer.deterministic=true): epsilon, delta,
  sigma and the ledger equal the single-process run's to 1e-9; with the noise switched off one step's
  parameters equal the single-process step's to 1e-6 (DP-Sinkhorn: 1e-4, its rounding; each rank
  generating and back-propagating its part of the batch), and every rank holds the same parameters;
* the other private families (DPSWflow-r, DPSWgen, DPSWflow, the DP-SWD adapter, DP-DANN) and a
  warm-started DP-Sinkhorn run the same way, and the non-private baselines (SGD, SWD, DANN) hold one model on every rank, in one more
  pair of processes (slow suite).

Bit for bit: epsilon, the ledger, the mechanisms' description and every rank's weights (atol 0 between the
ranks); to float rounding only: the weights against one process's (the sums are taken in another order), as
docs/guides/distributed.md states with the measured gaps.  The non-private baselines' one-process estimator and
the whole batch's logged values: ``test_distributed_whole_batch.py``.

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
    # the generated batch split, the image-gradient release computed on the gathered whole batch
    "dpsinkhorn": ("digits_dpsinkhorn", ["model.steps=20", "model.generator.hidden=8"]),
}
NO_DROPOUT = ["++model.feature_extractor.dropout=0.0", "++model.classifier.dropout=0.0"]
MORE_PRESETS = {  # the other private families (slow suite: one more pair of processes)
    "dpswflow_r": ("digits_dpswflow_r", ["model.ae_steps=5", "model.epochs=1", "model.dp.num_projections=20"]),
    # dropout 0 in g and h: each rank draws the masks of its own samples (the same law as one process, other values)
    "dpswd_adapter": ("digits_shift_dpswd", ["model.epochs=1", "model.start_align=0", *NO_DROPOUT]),
    "dp_dann": ("digits_shift_dp_dann", ["model.epochs=1", "model.start_align=0", *NO_DROPOUT]),
    "dpswgen": (None, ["dataset=digits", "model=dpswgen", "model.autoencoder=null", "model.epochs=1",
                         "model.representation={kind:dct,n_components:8}", "model.dp.num_projections=20"]),
    "dpswflow": (None, ["dataset=digits", "model=dpswflow", "model.autoencoder=null", "model.steps=5",
                          "model.representation={kind:dct,n_components:8}"]),
}
BASELINES = {  # the non-private baselines: every rank's gradients are averaged, so the ranks hold one model
    "sgd": ("digits_dpsgd", [*PRESETS["dpsgd"][1], "model.private=false"]),
    "swd": ("digits_shift_swd", ["model.epochs=1", "model.start_align=0"]),
    "dann": ("digits_shift_dann", ["model.epochs=1", "model.start_align=0"]),
}
STEPS = 3
# one step without noise is the gradient itself (lr 1). DP-Sinkhorn's transport plan exp(-C / lambda) amplifies
# float32 rounding: one process's own step moves by up to ~1e-5 between 1 and 2 threads, two processes' by
# ~2.5e-5 (measured); a gradient not added over the processes, or BatchNorm statistics of a process's rows
# only, move it by more than 1e-2
STEP_ATOL = {"dpsinkhorn": 1e-4}
WARM = {  # a warm start's generator fit, split like the step (slow suite; noise on: the warm-up is not one step)
    "dpsinkhorn_warm": ("digits_dpsinkhorn", [*PRESETS["dpsinkhorn"][1], "model/warm_start=class_gaussian",
                                              "model.warm_start.steps=5", "model.warm_start.batch_size=100",
                                              "model.warm_start.num_projections=20"]),
    "dpswd_warm": ("digits_dpswd", [*PRESETS["dpswd"][1], "model/warm_start=class_gaussian", "model.warm_start.steps=5",
                                    "model.warm_start.batch_size=100", "model.warm_start.num_projections=20"]),
}


class _Rows:
    """A private source of ``n`` records: record i is ``(i * ones(dim), i % 3)`` (visible sampling)."""

    def __init__(self, n: int, dim: int = 2) -> None:
        self.x, self.y = torch.arange(n, dtype=torch.float32)[:, None].repeat(1, dim), torch.arange(n) % 3

    def __len__(self) -> int:
        return self.x.shape[0]

    def _gather(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[idx], self.y[idx]

    def _labels(self) -> torch.Tensor:
        return self.y


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
    out = {"batch": batch, "blocks": blocks, "u": u, "released": mech.release(batch, u),
           "released_blocks": mech.release(blocks, u)}
    part = distributed.block_bounds(3, 4)  # this process's whole blocks: its rows of the release, nothing gathered
    out["block_part"], out["released_part"] = part, mech.release(blocks, u, part=part)
    out["released_after"] = mech.release(batch, u)  # the noise generator stayed in step with one process's
    return out


def _moment_release(z: torch.Tensor, y: torch.Tensor) -> dict:
    mech = ClassMomentRelease(_ledger(), n_classes=3, radius=1.0, seed=4, shrinkage="none", noise=FixedMultiplier(0.5))
    m = mech.release(z, y)
    return {"counts": m.counts, "means": m.means, "covariances": m.covariances}


def _moment_rows() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    z = torch.nn.functional.normalize(torch.randn(50, 4, generator=g), dim=1) * 0.9
    return z, torch.arange(50) % 3


COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "broadcast_object_list",
               "all_gather_object", "reduce_scatter", "reduce_scatter_tensor", "barrier")


def _count_collectives(method) -> list[dict]:
    """The collectives of each of ``method``'s steps, counted by name (filled as the steps run)."""
    counts, step = [], method.step

    def counted(t: int) -> dict:
        calls, saved = {}, {name: getattr(dist, name) for name in COLLECTIVES}

        def counting(name):
            def call(*args, **kwargs):
                calls[name] = calls.get(name, 0) + 1
                return saved[name](*args, **kwargs)
            return call
        for name in COLLECTIVES:
            setattr(dist, name, counting(name))
        try:
            return step(t)
        finally:
            for name, fn in saved.items():
                setattr(dist, name, fn)
            counts.append(calls)
    method.step = counted
    return counts


def _train(family: str, out: Path, noise: bool, steps: int) -> dict:
    """A few deterministic steps of a preset through the training loop; what a rank holds at the end."""
    from hydra.utils import instantiate

    from tests.helpers.configs import compose_cfg

    experiment, extra = {**PRESETS, **MORE_PRESETS, **BASELINES, **WARM}[family]
    cfg = compose_cfg([f"experiment={experiment}" if experiment else "~experiment", "trainer.deterministic=true", *extra], out_dir=out)
    method = instantiate(cfg.model, _convert_="all")
    ledger = instantiate(cfg.accountant, _convert_="all")
    data = instantiate(cfg.dataset)
    torch.manual_seed(0)
    ctx = TrainContext(device=torch.device("cpu"), logger=SilentLogger(), run_dir=out, seed=0, log_every=10**6,
                       checkpoint_every=10**6, max_steps=steps, progress=False, deterministic=True)
    saved, adam = Mechanism.noise, torch.optim.Adam
    if not noise:  # test-only: the noise switched off, to compare the un-noised updates
        Mechanism.noise = lambda self, shape, like: None
    # test-only: the updates through plain SGD. Adam divides each entry by the root of its own second moment, so
    # an entry whose gradient is zero up to rounding (the bias of a layer before a BatchNorm) moves by anything in
    # (-lr, lr) depending on the order of a sum; SGD's step is lr times the gradient, which is compared. With the
    # noise off the step is the gradient itself (lr 1), so a gradient that differs shows at the tolerance
    torch.optim.Adam = lambda params, lr, **_: torch.optim.SGD(params, lr=lr if noise else 1.0)
    collectives = _count_collectives(method)
    try:
        summary = loop.train(method, data, ledger, ctx)
    finally:
        Mechanism.noise, torch.optim.Adam = saved, adam
    # epsilon under every accountant is a function of the ledger's entries and delta (compared below)
    return {"release": method.release_state(), "ledger": ledger.state_dict(), "epsilon": ledger.epsilon(), "delta": ledger.delta,
            "mechanisms": {k: m.describe() for k, m in method.mechanisms.items()}, "steps": summary["train_steps"],
            "collectives": collectives}


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
        res[f"{family}_noise_off"] = _train(family, out / "off" / family / str(rank), noise=False, steps=1)
    return res


def _more_checks(rank: int, out: Path) -> dict:
    res = {family: _train(family, out / family / str(rank), noise=True, steps=STEPS) for family in MORE_PRESETS}
    for family in MORE_PRESETS:
        res[f"{family}_noise_off"] = _train(family, out / "off" / family / str(rank), noise=False, steps=1)
    for family in BASELINES:
        res[family] = _train(family, out / family / str(rank), noise=True, steps=STEPS)
    for family in WARM:
        res[family] = _train(family, out / family / str(rank), noise=True, steps=STEPS)
    return res


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
        for key in ("batch", "blocks", "u", "released", "released_blocks", "released_after"):
            torch.testing.assert_close(r["projection"][key], single["projection"][key], rtol=0, atol=1e-6)
        lo, hi = r["projection"]["block_part"]  # a release of this process's blocks: its rows of the one release
        torch.testing.assert_close(r["projection"]["released_part"], single["projection"]["released_part"][lo:hi],
                                   rtol=0, atol=1e-6)
        for key in ("counts", "means", "covariances"):
            torch.testing.assert_close(r["moments"][key], single["moments"][key], rtol=0, atol=1e-9)
    assert [r["projection"]["block_part"] for r in ranks] == [(0, 8), (8, 12)] and single["projection"]["block_part"] == (0, 12)


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


def test_a_dp_swd_generator_step_makes_one_all_reduce(two_ranks):
    """Per step on two processes, the class blocks shared out (``label_mode=partition``, the default): ONE
    all-reduce. The processes' shares of the sliced cost travel with the parameter gradients; nothing is gathered
    (the BatchNorm layers run in the generator's head on the whole batch in every process).  One process: none."""
    ranks, single = two_ranks
    for r in ranks:
        for run in ("dpswd", "dpswd_noise_off"):
            assert r[run]["collectives"] == [{"all_reduce": 1}] * r[run]["steps"]
    assert single["dpswd"]["collectives"] == [{}] * single["dpswd"]["steps"]


@pytest.mark.slow
@pytest.mark.parametrize("family", list(MORE_PRESETS))
def test_every_other_private_family_is_the_single_process_run(two_ranks_more, family):
    _same_run(*two_ranks_more, family)


def _same_step(ranks: list[dict], single: dict, family: str) -> None:
    """One step with the noise off: every rank's released tensors are the single-process step's to 1e-6 (or the
    family's ``STEP_ATOL``)."""
    one, atol = single[f"{family}_noise_off"]["release"], STEP_ATOL.get(family, 1e-6)
    for r in ranks:
        for name, value in one.items():
            if isinstance(value, dict):
                for k, v in value.items():
                    if torch.is_tensor(v) and v.is_floating_point():
                        torch.testing.assert_close(r[f"{family}_noise_off"]["release"][name][k], v, rtol=0, atol=atol)


@pytest.mark.parametrize("family", list(PRESETS))
def test_one_step_without_noise_equals_the_single_process_step(two_ranks, family):
    _same_step(*two_ranks, family)


def test_a_dp_sinkhorn_step_gathers_the_images_once_and_adds_the_gradients_once(two_ranks):
    """Per step on two processes: one all-gather (the generated images), one all-reduce per BatchNorm layer each
    way (the whole batch's statistics and their gradients) and one of the parameters' gradients; nothing else
    (no broadcast, no pickled state).  One process: none."""
    ranks, single = two_ranks
    n_batch_norms = 3  # DCGANCondGenerator
    for r in ranks:
        for run in ("dpsinkhorn", "dpsinkhorn_noise_off"):
            assert r[run]["collectives"] == [{"all_gather": 1, "all_reduce": 2 * n_batch_norms + 1}] * r[run]["steps"]
    assert single["dpsinkhorn"]["collectives"] == [{}] * single["dpsinkhorn"]["steps"]


@pytest.mark.slow
@pytest.mark.parametrize("family", list(MORE_PRESETS))
def test_one_step_of_every_other_family_without_noise_equals_the_single_process_step(two_ranks_more, family):
    _same_step(*two_ranks_more, family)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["dpswflow_r", "dpswflow"])
def test_the_particle_flows_split_by_direction_move_the_single_process_particles(two_ranks_more, family):
    """Each rank computes the drift on its part of a step's directions; the parts added over the ranks, every rank
    moves every particle as one process does: one step with the noise off to 1e-6, the ranks exactly alike, and a
    few steps with the noise on (the same draws) to float rounding."""
    ranks, single = two_ranks_more
    one = single[f"{family}_noise_off"]["release"]["particles"]
    for r in ranks:
        torch.testing.assert_close(r[f"{family}_noise_off"]["release"]["particles"], one, rtol=0, atol=1e-6)
        torch.testing.assert_close(r[family]["release"]["particles"], ranks[0][family]["release"]["particles"],
                                   rtol=0, atol=0)
    torch.testing.assert_close(ranks[0][family]["release"]["particles"], single[family]["release"]["particles"],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(WARM))
def test_a_warm_started_run_fits_and_trains_the_single_process_generator(two_ranks_more, family):
    """The warm-up and three noisy steps: epsilon and ledger as one process's, and every tensor of the release
    (BatchNorm's running statistics included: a batch counted once per process would bias them) to 1e-6."""
    ranks, single = two_ranks_more
    _same_run(ranks, single, family)
    for r in ranks:
        for k, v in single[family]["release"]["generator"].items():
            if v.is_floating_point():
                torch.testing.assert_close(r[family]["release"]["generator"][k], v, rtol=0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(BASELINES))
def test_the_non_private_baselines_average_their_gradients(two_ranks_more, family):
    """Every rank holds the same model (the gradients are averaged over the ranks), epsilon is infinite."""
    ranks, _ = two_ranks_more
    for name, value in ranks[0][family]["release"].items():
        if isinstance(value, dict):
            for k, v in value.items():
                if torch.is_tensor(v) and v.is_floating_point():
                    torch.testing.assert_close(ranks[1][family]["release"][name][k], v, rtol=0, atol=0)
    assert ranks[0][family]["epsilon"] == float("inf")


@pytest.mark.parametrize("multirun", [False, True])
def test_every_rank_uses_the_folder_rank_0_claimed_and_claims_nothing(monkeypatch, tmp_path, multirun):
    """torchrun: rank 1 started a second later, yet its run (or sweep) folder is the one rank 0 claimed (a sweep's
    jobs then run one after the other on all the processes, in ONE sweep folder); rank 1 makes no folder."""
    from dpgen.paths import CONFIGS
    from dpgen.utils import dist as udist
    from dpgen.utils import launch

    claimed = str(tmp_path / "outputs" / "digits_dpsgd" / "2026-01-02_03-04-05_2")  # rank 0's, broadcast
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(udist, "init_from_env", lambda: True)
    monkeypatch.setattr(udist, "broadcast_object", lambda obj, src=0: claimed)

    def claim():
        raise AssertionError("rank 1 claimed a folder")

    def overrides(argv):
        out = launch.run_dir_overrides(argv, CONFIGS / "hydra" / "default.yaml", claim)
        return dict(a.split("=", 1) for a in out)

    if not multirun:
        quiet = {"hydra.output_subdir": "null", "hydra/hydra_logging": "disabled"}  # Hydra's own lines: rank 0's only
        assert overrides(["accountant.epsilon=1"]) == {"hydra.run.dir": claimed, **quiet}
        assert overrides(["accountant.epsilon=1", "hydra.run.dir=/x"]) == quiet
    else:  # Hydra's multirun.yaml goes to a scratch folder of rank 1's; the jobs run in rank 0's job folders
        for argv, sweep in ((["-m", "accountant.epsilon=1,2"], claimed), (["-m", "hydra.sweep.dir=/x"], "/x")):
            out = overrides(argv)
            scratch = Path(out.pop("hydra.sweep.dir"))
            assert scratch.is_dir() and not scratch.is_relative_to(tmp_path) and list(scratch.iterdir()) == []
            assert out == {"hydra.sweep.subdir": f"{sweep}/${{hydra.job.num}}_${{hydra.job.override_dirname}}",
                           "hydra.output_subdir": "null", "hydra/hydra_logging": "disabled"}
    assert not (tmp_path / "outputs").exists()


def test_the_preflight_of_rank_1_writes_nothing(monkeypatch, tmp_path):
    """Every rank checks the command line, but only rank 0 probes (creates and writes) the run folder."""
    from dpgen import preflight as pf

    folder = tmp_path / "a" / "run"
    probes: list = []
    monkeypatch.setattr(pf, "_probe", lambda path, *a: probes.append(path))
    for rank in ("1", "0"):
        monkeypatch.setenv("RANK", rank)
        assert pf.preflight(["experiment=digits_dpsgd", f"hydra.run.dir={folder}"]) is None
        assert pf.CHECKED == [folder]  # the folder rank 0 claims, resolved on every rank
        assert probes == ([] if rank == "1" else [folder])
    assert list(tmp_path.iterdir()) == []
    assert pf.preflight(["--cfg", "job"]) is None and pf.CHECKED == []  # Hydra answers: no folder to claim


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
    monkeypatch.setattr(udist.tdist, "init_process_group", lambda backend, **kw: chosen.append(backend))
    monkeypatch.setattr(udist.tdist, "rendezvous", lambda url, timeout: iter([(udist.tdist.HashStore(), 1, 2)]))
    monkeypatch.setattr(udist, "die_with_parent", lambda: None)
    assert udist.init_from_env()
    assert chosen == (["gloo"] if gpus == 1 else [1, "cpu:gloo,cuda:nccl"])
    monkeypatch.setattr(udist, "active", lambda: True)
    assert udist.too_few_gpus(torch.device("cpu")) is None
    if gpus == 1:
        assert re.search(r"trainer.device=cuda on 2 processes per node .* --nproc 1", udist.too_few_gpus(torch.device("cuda")))
    else:
        assert udist.too_few_gpus(torch.device("cuda")) is None


# ---------------------------------------------------------------------------- launching
def test_plain_srun_tasks_are_one_error_line_not_n_runs(monkeypatch, tmp_path, capsys):
    """srun with 2 tasks and no distributed launcher: refused before anything runs (never 2 runs spending 2 eps)."""
    from dpgen.app import run_app
    from dpgen.utils.launch import slurm_tasks_problem

    for key in ("WORLD_SIZE", "RANK", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")  # the batch script of sbatch --ntasks 2: it runs once
    assert slurm_tasks_problem() is None
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")  # srun: one of 2 tasks
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert run_app(["experiment=digits_dpsgd", f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "one of 2 SLURM tasks" in err, err
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("WORLD_SIZE", "2")  # a launcher's process (torchrun under srun): not refused
    assert slurm_tasks_problem() is None


def test_nproc_refuses_what_runs_on_one_process_only_before_launching(monkeypatch, capsys):
    """dpgen train --nproc 2 with the data-dependent reports: one error line from the preflight, no process started."""
    from dpgen import cli
    from dpgen.utils import launch

    monkeypatch.setattr(launch, "launch", lambda argv, nproc: pytest.fail("launched"))
    assert cli.train(["--nproc", "2", "experiment=digits_dpsgd", "accountant.data_dependent_reports=true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: accountant.data_dependent_reports=true") and err.count("\n") == 1, err


def test_a_run_that_ended_before_its_first_checkpoint_is_not_called_resumable(tmp_path):
    from dpgen.utils.launch import resume_advice

    argv = ["experiment=digits_dpsgd", f"hydra.run.dir={tmp_path}"]
    assert "nothing to resume: run the same command again" in resume_advice(argv)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.pt").write_bytes(b"")
    assert "resume it with the same command plus trainer.resume=true" in resume_advice(argv)
    assert "if not, run the same command again" in resume_advice(argv[:1])  # the folder is rank 0's choice


def test_results_and_card_record_the_processes_and_a_resume_on_another_number():
    from dpgen.privacy.card import build_card, card_markdown

    assert distributed.processes() == {"world_size": 1, "backend": None}
    assert distributed.processes(resumed_from=1) == {"world_size": 1, "backend": None}  # the same number: nothing
    resumed = distributed.processes(resumed_from=2)
    assert resumed == {"world_size": 1, "backend": None, "resumed_from_world_size": 2}
    card = build_card(_ledger(), method="M", preset="p", config={}, dataset="d", n_private=10, processes=resumed)
    assert card["processes"] == resumed
    assert "| processes | 1; resumed from a checkpoint written by 2 processes |" in card_markdown(card)
