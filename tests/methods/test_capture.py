"""The capture wrapper (``dpgen.methods.capture``): one captured step, replayed, with its releases recorded once per
replay.

On the CPU the emulated backend does the bookkeeping of a CUDA run without a graph (warm-up, one capture with the
ledger's records deferred, replays each applying the captured records): a run through it must leave the ledger,
the mechanisms, the sampler and the weights exactly where the eager run leaves them, and a resumed run captures
again.  The ``cuda``-marked tests run the real graph (``make gpu-check``).
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from dpgen.data.datasets import digits
from dpgen.errors import ConfigError
from dpgen.methods import DPSWDGenerator, loop
from dpgen.methods.capture import StepRunner
from dpgen.models import ConvCondGen
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.projection import ProjectionDP
from dpgen.utils.compiling import check_graph, resolve_graph
from tests.helpers.context import train_context


def _dpswd(private: bool = True) -> DPSWDGenerator:
    return DPSWDGenerator(generator=partial(ConvCondGen, d_code=4, hidden=16), dp=ProjectionDP(10, bound="bernstein"),
                          batch_size=10, epochs=1, lr=1e-3, label_mode="partition", private=private)


def _train(tmp_path, graph: bool, steps: int = 8, private: bool = True, **kw):
    torch.manual_seed(0)
    m, ledger = _dpswd(private), PrivacyLedger(10.0, 1e-4)
    summary = loop.train(m, digits(), ledger, train_context(tmp_path, max_steps=steps, graph=graph, **kw))
    return m, ledger, summary


def test_an_emulated_capture_leaves_the_run_where_the_eager_run_leaves_it(tmp_path):
    eager, led_e, _ = _train(tmp_path / "eager", graph=False)
    graphed, led_g, summary = _train(tmp_path / "graph", graph=True)
    assert summary["graph"] == "emulated" and summary["graph_captures"] == 1
    assert summary["graph_replays"] == 8 - 3 and summary["steps_eager"] == 3  # 3 warm-up steps, capture, replays
    assert led_g.entries == led_e.entries and led_g.steps == 8  # one record per step, replays included
    assert led_g.epsilon() == led_e.epsilon()
    for name, mech in graphed.mechanisms.items():
        assert mech.releases == eager.mechanisms[name].releases == 8
        assert torch.equal(mech.generator.get_state(), eager.mechanisms[name].generator.get_state())
    assert graphed.sampler.draws == eager.sampler.draws
    assert torch.equal(graphed.sampler.generator.get_state(), eager.sampler.generator.get_state())
    for p, q in zip(graphed.G.parameters(), eager.G.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_resumed_run_captures_again_and_ends_where_the_uninterrupted_run_ends(tmp_path):
    whole, led_w, _ = _train(tmp_path / "whole", graph=True, steps=12)
    _train(tmp_path / "cut", graph=True, steps=7)  # stopped after 7 steps (its last checkpoint)
    torch.manual_seed(0)
    m, ledger = _dpswd(), PrivacyLedger(10.0, 1e-4)
    summary = loop.train(m, digits(), ledger, train_context(tmp_path / "cut", max_steps=12, graph=True,
                                                            resume_from=tmp_path / "cut" / "checkpoints" / "last.pt"))
    assert summary["graph_captures"] == 1 and summary["steps_eager"] == 3 and summary["graph_replays"] == 2
    assert ledger.entries == led_w.entries and ledger.steps == 12
    for p, q in zip(m.G.parameters(), whole.G.parameters(), strict=True):
        assert torch.equal(p, q)


def test_dpsgd_with_its_reports_is_captured_and_reports_what_the_eager_run_reports(tmp_path, monkeypatch):
    """DP-SGD with the data-dependent reports (WA / BA / MA) under ``trainer.graph=on`` (the emulated capture): its
    step is captured and replayed, the pair distances accounted after each replay; ε, the reports (results.json, the
    logged rows, the checkpoint), the privacy card and the weights are those of the run whose every step runs eagerly
    over the same padded batches."""
    import json

    from dpgen.methods.dpsgd_classifier import DPSGDClassifier
    from dpgen.pipeline import run
    from dpgen.privacy.bayesian import BayesianAccountant
    from dpgen.privacy.wdp import WassersteinAccountant
    from dpgen.utils import load_checkpoint
    from tests.helpers.configs import compose_cfg

    runners: list[StepRunner] = []
    made = StepRunner.__init__

    def spy(self, *a, **k):
        made(self, *a, **k)
        runners.append(self)

    monkeypatch.setattr(StepRunner, "__init__", spy)
    computed: list[torch.Tensor] = []  # every step's pair distances, as the step computed them
    pairs = DPSGDClassifier._pair_distances

    def kept(self, *a, **k):
        computed.append(pairs(self, *a, **k).clone())
        return computed[-1]

    monkeypatch.setattr(DPSGDClassifier, "_pair_distances", kept)
    steps = 12

    def go(name: str, *extra: str) -> dict:
        run(compose_cfg(["experiment=digits_dpsgd", "logger=local", "evaluator=none", "trainer.progress=false",
                         "trainer.deterministic=true", f"trainer.max_steps={steps}", "trainer.log_every=4",
                         "trainer.checkpoint_every=8", "trainer.graph=on", "accountant.data_dependent_reports=true",
                         *extra], out_dir=tmp_path / name))
        folder = tmp_path / name
        return {"results": json.loads((folder / "results.json").read_text()),
                "card": json.loads((folder / "privacy_card.json").read_text()),
                "rows": (folder / "metrics.csv").read_text(),
                "checkpoint": load_checkpoint(folder / "checkpoints" / "last.pt")}

    graphed = go("graph")
    runner = runners[-1]
    assert (runner.warm, runner.captures, runner.eager, runner.replays) == (3, 1, 0, steps - 3)
    # the reports account each step's own distances (a replay's, not the captured step's), once per step
    assert len(computed) == steps and len({tuple(d.tolist()) for d in computed}) == steps
    train = graphed["results"]["train"]
    wa, ba = WassersteinAccountant(16, 32), BayesianAccountant(16, total_steps=train["steps_planned"])
    for d in computed:
        for acct in (wa, ba):
            acct.step(d.numpy(), train["noise_std"], train["sample_rate"])
    reported = graphed["checkpoint"]["ledger"]["reported"]
    assert reported["wa"] == wa.state_dict() and reported["ba"] == ba.state_dict()
    with monkeypatch.context() as eager_steps:
        eager_steps.setattr(DPSGDClassifier, "capturable", lambda self, t: False)
        eager = go("eager")
    assert runners[-1].captures == 0 and runners[-1].eager == steps
    p, q = graphed["results"]["privacy"], eager["results"]["privacy"]
    assert p == q and p["private_steps"] == steps
    assert all(math.isfinite(p[f"epsilon_{k}"]) and p[f"epsilon_{k}"] > 0 for k in ("wa", "ba", "ma"))
    assert graphed["card"] == eager["card"]
    assert graphed["rows"] == eager["rows"] and "epsilon_wa_reported_only" in graphed["rows"]
    assert reported == eager["checkpoint"]["ledger"]["reported"] and reported["wa"]["steps"] == steps
    for name, w in graphed["checkpoint"]["method"]["network"].items():
        assert torch.equal(w, eager["checkpoint"]["method"]["network"][name])
    # stopped after its checkpoint at step 8, resumed: it captures again and ends with the uninterrupted reports
    go("cut", "trainer.max_steps=8")
    resumed = go("cut", "trainer.resume=true")
    assert runners[-1].captures == 1 and runners[-1].replays == steps - 8 - 3
    assert resumed["checkpoint"]["ledger"]["reported"] == reported
    assert resumed["results"]["privacy"] == p


class _Toy:
    """A method whose step makes one release of a real mechanism and returns a 0-d tensor."""

    sampler = None

    def __init__(self, mech) -> None:
        self.mechanisms, self.mech, self.calls, self.steady = {"m": mech}, mech, [], True

    def step(self, t):
        self.calls.append(t)
        if self.steady:
            self.mech.release()
        return {"v": torch.tensor(float(t))}

    def capturable(self, t):
        return t != 6

    def generators(self):
        return []


def test_each_replay_records_the_captured_releases_once_and_a_changed_step_is_refused(tmp_path):
    from dpgen.privacy.mechanisms import UnnoisedAccess

    ledger = PrivacyLedger(None, 1e-5)
    toy = _Toy(UnnoisedAccess(ledger, sample_rate=0.1))
    runner = StepRunner(toy, ledger, train_context(tmp_path, graph=True))
    for t in range(8):
        runner.run(t)
    assert ledger.steps == 8 and toy.mech.releases == 8
    assert toy.calls == [0, 1, 2, 3, 3, 3, 6, 3]  # warm-up 0-2, capture at 3, replays of step 3, eager step 6
    assert (runner.captures, runner.replays, runner.eager, runner.warm) == (1, 4, 1, 3)
    toy.steady = False  # a step whose releases differ from the captured one's: not static
    with pytest.raises(RuntimeError, match="not static"):
        runner.run(8)


class _FailingGraph:
    """Stands in for ``torch.cuda.CUDAGraph`` whose capture fails (an operation a graph cannot hold)."""

    def register_generator_state(self, gen):
        pass


class _failing_capture:  # noqa: N801 - stands in for the context manager torch.cuda.graph
    def __init__(self, graph, stream=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        raise RuntimeError("operation not permitted when stream is capturing\nsecond line")


@pytest.mark.parametrize("required", [False, True])
def test_a_failed_capture_under_auto_goes_on_eagerly_and_records_only_what_ran(tmp_path, monkeypatch, required):
    from dpgen.privacy.mechanisms import UnnoisedAccess

    monkeypatch.setattr(torch.cuda, "CUDAGraph", _FailingGraph)
    monkeypatch.setattr(torch.cuda, "graph", _failing_capture)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    ledger = PrivacyLedger(None, 1e-5)
    toy = _Toy(UnnoisedAccess(ledger, sample_rate=0.1))
    runner = StepRunner(toy, ledger, train_context(tmp_path, graph=True, graph_required=required), backend="cuda",
                        warmup=0)
    if required:  # trainer.graph=on: the failure is the user's to see
        with pytest.raises(RuntimeError, match="not permitted"):
            runner.run(0)
        assert ledger.steps == 0
        return
    for t in range(3):
        runner.run(t)
    # the failed capture recorded nothing (it ran no kernel); each step ran eagerly, once, and recorded once
    assert ledger.steps == 3 and toy.mech.releases == 3 and toy.calls == [0, 0, 1, 2]
    assert runner.backend is None and runner.summary()["graph"] == "off"
    assert runner.summary()["graph_failed"].startswith("RuntimeError: operation not permitted")


def test_nothing_is_recorded_inside_a_deferred_block():
    from dpgen.privacy.mechanisms import UnnoisedAccess

    ledger = PrivacyLedger(None, 1e-5)
    mech = UnnoisedAccess(ledger, sample_rate=0.1)
    with ledger.deferred() as records:
        mech.release()
        mech.release()
    assert ledger.steps == 0 and mech.releases == 0 and len(records) == 2
    assert records[0].entry == mech.ledger_entry()
    for r in records:
        r()
    assert ledger.steps == 2 and mech.releases == 2


def test_the_graph_setting():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert check_graph(True) == "on" and check_graph("OFF") == "off"
    assert resolve_graph("auto", cuda) and not resolve_graph("auto", cpu)
    assert not resolve_graph("auto", cuda, compile_on=True) and not resolve_graph("auto", cuda, processes=2)
    assert resolve_graph("on", cpu)  # the emulated capture (tests)
    for bad, words in ((("sometimes", cuda), "trainer.graph='sometimes' is unknown"),
                       (("on", cuda, True), "trainer.compile=off"), (("on", cuda, False, 2), "one process")):
        with pytest.raises(ValueError, match=words) as err:
            resolve_graph(*bad)
        assert "\n" not in str(err.value)


def test_a_bad_graph_setting_is_one_error_line_before_anything_loads(tmp_path):
    from dpgen.pipeline import run
    from tests.helpers.configs import compose_cfg

    with pytest.raises(ConfigError, match=r"^trainer.graph='maybe' is unknown; choose auto") as err:
        run(compose_cfg(["trainer.graph=maybe"], out_dir=tmp_path))
    assert "\n" not in str(err.value)


# -- on a GPU (make gpu-check) ------------------------------------------------------------------------------------
def _cuda_train(tmp_path, graph: bool, private: bool, steps: int = 12):
    torch.manual_seed(0)
    m, ledger = _dpswd(private), PrivacyLedger(10.0, 1e-4)
    ctx = train_context(tmp_path, max_steps=steps, graph=graph, device=torch.device("cuda"))
    summary = loop.train(m, digits(), ledger, ctx)
    return m, ledger, summary


@pytest.mark.cuda
def test_cuda_a_replayed_release_has_the_calibrated_std_and_fresh_noise(monkeypatch):
    """A captured projection release of zero rows is the noise alone: each replay's has the calibrated std, and no
    two replays repeat a draw."""
    from dpgen.privacy.mechanisms import GaussianProjectionRelease
    from dpgen.privacy.noise import FixedStd

    ledger = PrivacyLedger(None, 1e-5)
    mech = GaussianProjectionRelease(ledger, dim=8, num_projections=4096, steps=100, sample_rate=0.1, n_private=1000,
                                     noise=FixedStd(0.7), seed=3, device="cuda")
    rows, u = torch.zeros(64, 8, device="cuda"), torch.zeros(8, 4096, device="cuda")

    class One:
        sampler, mechanisms = None, {"m": mech}

        def step(self, t):
            return {"out": mech.release(rows, u)}

        def capturable(self, t):
            return True

        def generators(self):
            return [mech.generator, mech.directions_generator]

    from tests.helpers.context import train_context as ctx_of

    runner = StepRunner(One(), ledger, ctx_of(None, device=torch.device("cuda"), graph=True))
    outs = [runner.run(t)["out"].clone() for t in range(8)]
    assert runner.captures == 1 and runner.replays == 5 and ledger.steps == 8
    for out in outs[3:]:
        assert float(out.std()) == pytest.approx(0.7, rel=0.02)
    for a in range(3, 8):
        for b in range(a + 1, 8):
            assert not torch.allclose(outs[a], outs[b])


@pytest.mark.cuda
def test_cuda_the_captured_run_has_the_eager_runs_epsilon_card_and_weights(tmp_path):
    eager, led_e, _ = _cuda_train(tmp_path / "eager", graph=False, private=False)
    graphed, led_g, summary = _cuda_train(tmp_path / "graph", graph=True, private=False)
    assert summary["graph"] == "cuda" and summary["graph_replays"] == 12 - 3
    for p, q in zip(graphed.G.parameters(), eager.G.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-5)
    _, led_e, _ = _cuda_train(tmp_path / "eager_dp", graph=False, private=True)
    _, led_g, _ = _cuda_train(tmp_path / "graph_dp", graph=True, private=True)
    assert led_g.entries == led_e.entries and led_g.steps == 12
    assert led_g.epsilon() == led_e.epsilon() and led_g.summary() == led_e.summary()


@pytest.mark.cuda
def test_cuda_dpsgd_with_its_reports_captured_reports_what_its_eager_steps_report(tmp_path, monkeypatch):
    """The real graph: DP-SGD with the WA / BA / MA reports captured, beside the same run with every step eager over
    the same padded batches: ε and the card equal, the reports and the weights equal to float rounding."""
    import json

    from dpgen.methods.dpsgd_classifier import DPSGDClassifier
    from dpgen.pipeline import run
    from tests.helpers.configs import compose_cfg

    def go(name: str) -> dict:
        run(compose_cfg(["experiment=digits_dpsgd", "logger=local", "evaluator=none", "trainer.progress=false",
                         "trainer.deterministic=true", "trainer.max_steps=12", "trainer.log_every=4",
                         "trainer.device=cuda", "trainer.graph=on", "accountant.data_dependent_reports=true"],
                        out_dir=tmp_path / name))
        return {"results": json.loads((tmp_path / name / "results.json").read_text()),
                "card": json.loads((tmp_path / name / "privacy_card.json").read_text()),
                "weights": torch.load(tmp_path / name / "classifier.pt", weights_only=False)["network"]}

    graphed = go("graph")
    assert graphed["results"]["train"]["graph"] == "cuda"
    with monkeypatch.context() as eager_steps:
        eager_steps.setattr(DPSGDClassifier, "capturable", lambda self, t: False)
        eager = go("eager")
    p, q = graphed["results"]["privacy"], eager["results"]["privacy"]
    assert p["epsilon"] == q["epsilon"] and p["private_steps"] == q["private_steps"] == 12
    for k in ("wa", "ba", "ma"):
        assert p[f"epsilon_{k}"] == pytest.approx(q[f"epsilon_{k}"], rel=1e-5), k
    assert graphed["card"]["privacy"] == eager["card"]["privacy"]
    for name, w in graphed["weights"].items():
        assert torch.allclose(w, eager["weights"][name], atol=1e-5), name
