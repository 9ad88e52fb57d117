"""DP-SGD classifier of the WDP experiments: networks, clipping, pair statistics, end-to-end presets."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io as sio
import torch
import torch.nn.functional as F

from dpgen.methods import loop
from dpgen.methods.dpsgd_classifier import DPSGDClassifier, _loss_one
from dpgen.models import ConvClassifier, cifar_convnet, mnist_convnet
from dpgen.privacy.dpsgd import clip_per_sample, per_sample_grads, per_sample_norms
from dpgen.utils import load_checkpoint
from tests.helpers.context import train_context
from tests.helpers.runs import beats_chance, train, train_here

FAST = ["logger=local", "trainer.progress=false", "trainer.log_every=5"]


# ----------------------------------------------------------------------------------- networks
def test_authors_architectures_have_the_papers_flatten_sizes_and_no_batchnorm():
    m, c = mnist_convnet(), cifar_convnet()
    assert m.flat_dim == 64 * 4 * 4 and c.flat_dim == 64 * 5 * 5
    assert m(torch.zeros(2, 1, 28, 28)).shape == (2, 10) and c(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    for net in (m, c):
        assert not any(isinstance(x, torch.nn.modules.batchnorm._BatchNorm) for x in net.modules())
    with pytest.raises(ValueError, match="BatchNorm"):
        mnist_convnet(norm="batch")
    with pytest.raises(ValueError, match="too small"):
        ConvClassifier(1, 8, kernel_size=5)


def test_per_sample_clipping_bounds_every_norm_and_keeps_small_gradients():
    torch.manual_seed(0)
    net = ConvClassifier(1, 8, channels=(4, 4), kernel_size=3, padding=1, hidden=(8, 8))
    x, y = torch.randn(12, 1, 8, 8) * 5, torch.randint(10, (12,))
    g = per_sample_grads(net, _loss_one, x, y)
    norms = per_sample_norms(g)
    C = float(norms.median())
    clipped, before = clip_per_sample(g, C)
    after = per_sample_norms(clipped)
    assert torch.all(after <= C * (1 + 1e-5))
    small = before <= C
    torch.testing.assert_close(after[small], before[small])
    assert torch.allclose(after[~small], torch.full_like(after[~small], C), rtol=1e-5)
    # per-sample gradients are those of single-sample losses (no cross-sample mixing)
    net.zero_grad()
    F.cross_entropy(net(x[3:4]), y[3:4]).backward()
    torch.testing.assert_close(g["head.4.weight"][3], net.head[4].weight.grad)


def test_pair_distances_add_remove_and_leave_one_out_modes():
    vecs = torch.tensor([[3.0, 4.0], [0.0, 1.0], [1.0, 0.0]])
    gen = torch.Generator().manual_seed(0)
    m = DPSGDClassifier(network=mnist_convnet, pair_samples=4, pair_mode="add_remove", clip_norm=2.0)
    assert m._pair_distances([vecs], gen).tolist() == pytest.approx([5.0, 1.0, 1.0, 2.0])  # padded with C
    m = DPSGDClassifier(network=mnist_convnet, pair_samples=4, pair_mode="loo", clip_norm=2.0)
    d = m._pair_distances([vecs], gen).tolist()
    assert d[:3] == pytest.approx([math.sqrt(9 + 9), math.sqrt(4 + 16), math.sqrt(2)])
    assert d[3:] == [4.0] * 3 and len(d) == 6  # padded with 2C to P(P-1)/2


def test_bad_settings_fail_with_messages_naming_them():
    with pytest.raises(ValueError, match="model.pair_samples"):
        DPSGDClassifier(network=mnist_convnet, pair_samples=2)
    with pytest.raises(ValueError, match="model.clip_norm"):
        DPSGDClassifier(network=mnist_convnet, clip_norm=0)
    with pytest.raises(ValueError, match="model.pair_mode"):
        DPSGDClassifier(network=mnist_convnet, pair_mode="x")


# ---------------------------------------------------------------------------------- end to end
def test_digits_dpsgd_run_writes_results_with_four_epsilons(tmp_path):
    out = tmp_path / "run"
    r = train_here(["experiment=digits_dpsgd", *FAST, "trainer.max_steps=20", "accountant.data_dependent_reports=true",
                    f"hydra.run.dir={out}"], env_extra={"COLUMNS": "250"})  # a wide table: no wrapped labels
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert beats_chance(res["metrics"]["test_accuracy"]), res["metrics"]
    p = res["privacy"]
    for key in ("epsilon_rdp", "epsilon_pld", "epsilon_ba", "epsilon_wa"):
        assert math.isfinite(p[key]) and p[key] > 0, key
    assert p["epsilon"] <= p["target_epsilon"] and p["private_steps"] == 20  # the calibrating accountant's
    assert res["train"]["noise_multiplier"] > 0.5  # calibrated for the full schedule, not for 20 steps
    assert "epsilon (WA, reported only)" in r.stdout and "NOT a DP" in r.stdout
    assert p["status"] == "not DP: data-dependent reports" and "not DP: data-dependent reports" in r.stdout
    assert p["guarantee"] == "not DP: data-dependent reports"  # the label says it too, not "rigorous"
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "epsilon_wa_reported_only" in header and "epsilon" in header and "epsilon_rdp" not in header
    ck = load_checkpoint(out / "checkpoints" / "last.pt")
    assert ck["ledger"]["reported"]["wa"]["steps"] == 20
    assert (out / "classifier.pt").exists()


@pytest.mark.slow  # train.py subprocess(es); make test-all
def test_resumed_run_continues_the_reported_accountants(tmp_path):
    out = tmp_path / "run"
    common = ["experiment=digits_dpsgd", *FAST, "evaluator=none", "trainer.checkpoint_every=5",
              "accountant.data_dependent_reports=true", f"hydra.run.dir={out}"]
    assert train([*common, "trainer.max_steps=10"]).returncode == 0
    r = train([*common, "trainer.max_steps=15", "trainer.resume=true"])
    assert r.returncode == 0, r.stderr[-3000:]
    ck = load_checkpoint(out / "checkpoints" / "last.pt")
    led = ck["ledger"]
    assert sum(e["steps"] for e in led["entries"]) == 15
    assert led["reported"]["wa"]["steps"] == led["reported"]["ba"]["steps"] == led["reported"]["ma"]["steps"] == 15


@pytest.mark.slow  # train.py subprocess(es); make test-all
def test_fixed_noise_multiplier_stops_at_the_budget(tmp_path):
    out = tmp_path / "run"
    r = train(["experiment=digits_dpsgd", *FAST, "evaluator=none", "model.noise_multiplier=2.0",
               "accountant.epsilon=1.0", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    p = res["privacy"]  # the budget stop uses the calibrating accountant (PLD for Poisson sampling)
    assert res["train"]["stopped_by_budget"] and p["calibrating_accountant"] == "pld" and p["epsilon"] <= 1.0
    assert 0 < res["train"]["train_steps"] < res["train"]["steps_planned"]


# CIFAR-10 / SVHN are not on this machine: the presets run on fixtures in the real on-disk formats.  δ stays below
# 1/N of the real training splits: it is checked against their sizes before the (fixture) data are loaded.
def _cifar_fixture(root: Path, n_per_batch: int = 8) -> None:
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        d = {b"data": rng.integers(0, 256, size=(n_per_batch, 3072), dtype=np.uint8),
             b"labels": [int(v) for v in rng.integers(0, 10, size=n_per_batch)]}
        with open(base / name, "wb") as fh:
            pickle.dump(d, fh, protocol=2)


def _svhn_fixture(root: Path, n: int = 40) -> None:
    base = root / "svhn"
    base.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name in ("train_32x32.mat", "test_32x32.mat"):
        sio.savemat(base / name, {"X": rng.integers(0, 256, size=(32, 32, 3, n), dtype=np.uint8),
                                  "y": rng.integers(1, 11, size=(n, 1)).astype(np.uint8)})


@pytest.mark.slow  # train.py subprocess(es); make test-all
@pytest.mark.parametrize("preset,make", [("cifar10_dpsgd", _cifar_fixture), ("svhn_dpsgd", _svhn_fixture)])
def test_cifar10_and_svhn_presets_run_on_fixtures(tmp_path, preset, make):
    make(tmp_path / "data")
    out = tmp_path / "run"
    r = train([f"experiment={preset}", *FAST, "trainer.max_steps=2", "model.batch_size=8", "model.microbatch=4",
               "accountant.delta=1e-5", f"paths.data_root={tmp_path / 'data'}", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["privacy"]["private_steps"] == 2 and math.isfinite(res["privacy"]["epsilon_wa"])
    assert "test_accuracy" in res["metrics"]  # evaluated on the fixture's test split (2 steps learn nothing)


@pytest.mark.slow  # train.py subprocess(es); make test-all
@pytest.mark.usefixtures("data_root")
def test_mnist_preset_runs_on_shared_data(tmp_path, data_root):
    out = tmp_path / "run"
    r = train(["experiment=mnist_dpsgd", *FAST, "trainer.max_steps=1", "model.batch_size=16",
               f"paths.data_root={data_root}", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert "n_private" not in res and res["privacy"]["private_steps"] == 1  # add/remove: N is not published


# ------------------------------------------------------------------------ privacy defects
def _tiny_splits(n: int = 60, seed: int = 0):
    from dpgen.data import DataSplits, PrivateSplit, TensorSplit

    gen = torch.Generator().manual_seed(seed)
    x, y = torch.rand(n, 1, 8, 8, generator=gen), torch.randint(3, (n,), generator=gen)
    return DataSplits(name="tiny", private=PrivateSplit(x, y), test=TensorSplit(x[:10], y[:10]), public=None,
                      num_classes=3, image_shape=(1, 8, 8))


def _tiny_fit(tmp_path: Path, ledger, **kw):
    from functools import partial


    net = partial(ConvClassifier, channels=(2, 2), kernel_size=3, padding=1, hidden=(4, 4), norm="none")
    m = DPSGDClassifier(network=net, batch_size=10, epochs=1, lr=0.1, microbatch=8, **kw)
    return m, loop.train(m, _tiny_splits(), ledger, train_context(tmp_path))


@pytest.mark.parametrize("fixed", [None, 3.0])
def test_replace_one_dp_sgd_accounts_with_twice_the_sensitivity(tmp_path, fixed):
    """Sampling without replacement = replace-one: the clipped sum moves by up to 2C, so the ledger's
    epsilon is the RDP epsilon of multiplier sigma/2 (the same rule as DP-DANN)."""
    from dpgen.privacy import PrivacyLedger, RDPAccountant, Release

    led = PrivacyLedger(50.0, 1e-4, "without_replacement")
    _, out = _tiny_fit(tmp_path, led, noise_multiplier=fixed)
    sigma = out["noise_std"] / 1.0  # noise std / C (C = model.clip_norm = 1)
    want = RDPAccountant("without_replacement").epsilon_of([Release(sigma / 2, 10 / 60, 6)], 1e-4)
    assert led.steps == 6 and led.epsilon() == pytest.approx(want, rel=1e-9)
    assert out["noise_multiplier"] == pytest.approx(sigma / 2) and out["sensitivity_on_sum"] == 2.0
    if fixed is None:
        assert want <= 50.0


def test_non_private_sgd_reports_infinite_epsilon(tmp_path):
    from dpgen.privacy import PrivacyLedger

    led = PrivacyLedger(None, 1e-4, "poisson")
    _, out = _tiny_fit(tmp_path, led, private=False)
    assert led.steps == 6 and math.isinf(led.epsilon()) and math.isinf(led.summary()["epsilon_pld"])


def test_default_private_run_publishes_no_data_dependent_accountant(tmp_path):
    """WA/BA are un-noised functions of private gradients: off unless accountant.data_dependent_reports=true."""
    out = tmp_path / "run"
    r = train_here(["experiment=digits_dpsgd", *FAST, "trainer.max_steps=10", "evaluator=none", f"hydra.run.dir={out}"])
    assert r.returncode == 0, r.stderr[-3000:]
    p = json.loads((out / "results.json").read_text())["privacy"]
    assert not any(k in p for k in ("epsilon_wa", "epsilon_ba", "epsilon_ma", "reported_accountants", "status"))
    assert p["data_dependent_reports"] is False and math.isfinite(p["epsilon_rdp"])
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert "epsilon" in header.split(",") and not any(k in header for k in ("epsilon_wa", "epsilon_ba", "epsilon_ma"))
    assert "WA" not in r.stdout and "not DP" not in r.stdout
    assert "reported" not in load_checkpoint(out / "checkpoints" / "last.pt")["ledger"]


def test_one_vmap_step_of_the_mnist_cnn_dispatches_at_most_500_kernels(tmp_path):
    """The step of mnist_dpsgd with the whole batch in one vmap (``model.microbatch=auto`` on CUDA) launches at
    most 500 kernels whatever the batch size (counted on the CPU: aten operators that are not views); chunks
    of 2 need several times more."""
    from dpgen.bench.op_count import OpCounter
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit
    from dpgen.privacy import PrivacyLedger

    x, y = torch.rand(200, 1, 28, 28), torch.randint(10, (200,))
    data = DataSplits("t", PrivateSplit(x, y), TensorSplit(x[:4], y[:4]), None, 10, (1, 28, 28))
    counts = {}
    for mb in (64, 2):
        m = DPSGDClassifier(network=mnist_convnet, batch_size=16, epochs=1, noise_multiplier=1.0, microbatch=mb)
        m.setup(data, PrivacyLedger(None, 1e-5), train_context(tmp_path))
        m.step(0)
        with OpCounter() as c:
            m.step(1)
        counts[mb] = c.kernels
    assert counts[64] <= 500 < counts[2]
    with pytest.raises(ValueError, match="model.microbatch"):
        DPSGDClassifier(network=mnist_convnet, microbatch="big")


def test_a_step_with_the_data_dependent_reports_reads_nothing_from_the_device(tmp_path):
    """WA/BA on: the pair members are chosen and their distances computed on the device and kept there until a log
    step copies them without blocking: a steady step reads nothing, copies nothing to the device and draws no host
    random number (counted as a CUDA run takes them: ``bench.step_overhead``), and the step is static: captured in
    a graph with the reports (their accounting made after each replay)."""
    from dpgen.bench.step_overhead import family_steps, static_check

    # trainer.graph=on as a CUDA run takes it (auto): the sampler's host size draw is made before the step
    fs = family_steps("dpsgd_classifier", tmp_path / "run", ["accountant.data_dependent_reports=true",
                                                             "trainer.graph=on"])
    assert fs.steady and fs.method.reports
    where = [w for c in fs.steady for w in c.where]
    assert (fs.worst("reads"), fs.worst("copies"), fs.worst("host_random")) == (0, 0, 0), where
    assert fs.method.wa.steps == fs.method.ba.steps == len(fs.intervals)  # every step accounted by the end
    assert not static_check(fs), static_check(fs)


def test_a_ghost_step_is_static_and_releases_what_the_layer_rules_release(tmp_path):
    """``model.per_sample=ghost``: the noiseless release equals the layer rules' (the same clipped sum), and the
    step is fit for one captured graph (``trainer.graph=on``: same ops both steps, 0 device reads)."""
    from dpgen.bench.step_overhead import family_steps, static_check
    from dpgen.data.base import DataSplits, PrivateSplit, TensorSplit
    from dpgen.privacy import PrivacyLedger

    x, y = torch.rand(200, 1, 28, 28), torch.randint(10, (200,))
    data = DataSplits("t", PrivateSplit(x, y), TensorSplit(x[:4], y[:4]), None, 10, (1, 28, 28))
    released = {}
    for rule in ("unfold", "ghost"):
        m = DPSGDClassifier(network=mnist_convnet, batch_size=32, epochs=1, noise_multiplier=1.0, per_sample=rule,
                            microbatch=16)
        torch.manual_seed(0)  # the same network on both paths
        m.setup(data, PrivacyLedger(None, 1e-5), train_context(tmp_path / rule))
        assert m.rule == rule
        m.gradient_release.noise_std = 0.0
        released[rule] = m.private_gradient(m.normalize(x[:40]), y[:40])
    for k, v in released["unfold"].items():
        torch.testing.assert_close(released["ghost"][k], v, rtol=1e-4, atol=1e-7)
    fs = family_steps("dpsgd_classifier", tmp_path / "run", ["trainer.graph=on", "model.per_sample=ghost"])
    assert fs.method.rule == "ghost"
    faults = static_check(fs)
    assert not faults, "\n".join(faults)
    assert fs.worst("reads") == 0
