"""``trainer.compile=on`` (``dpgen.utils.compiling``): a compiled step is the eager step.

On the CPU, a few steps of a family with the setting on and off, from the same seeds:

* noise off (``model.private=false``): the trained weights agree to 1e-6 (every entry whose gradient Adam resolves:
  a bias followed by BatchNorm has gradient zero in exact arithmetic, and Adam scales the rounding noise of that
  zero, ~1e-13 in either run, up to a step of the learning rate's size);
* noise on: the same released tensors (the mechanism's noise drawn from the same generator), the same
  generator and sampler states after the steps (the release stays eager: drawn and recorded once), and the same ε;
* the compiled run did compile (dynamo's frame count): a helper that ignored the setting would pass the rest;
* (slow) every family that compiles runs its short preset through the pipeline with the same draws and ε.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from dpgen.bench.step_overhead import COMPILED, set_up
from dpgen.data.datasets import digits
from dpgen.errors import ConfigError
from dpgen.methods import DPSWDGenerator, loop
from dpgen.models import ConvCondGen
from dpgen.pipeline import run
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.projection import ProjectionDP
from dpgen.utils.compiling import check_compile
from tests.helpers.configs import compose_cfg
from tests.helpers.context import spy_releases, train_context

STEPS = 4


def _dpswd_generator(private: bool) -> DPSWDGenerator:
    return DPSWDGenerator(generator=partial(ConvCondGen, d_code=4, hidden=16), dp=ProjectionDP(10, bound="bernstein"),
                          batch_size=10, epochs=1, lr=1e-3, label_mode="partition", private=private)


def _run(tmp_path, monkeypatch, compiled: bool, private: bool, backend: str = "inductor"):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(torch, "compile", partial(torch.compile, backend=backend))
    releases = spy_releases(monkeypatch)
    torch.manual_seed(0)  # the generator's initial weights and the public codes: the same in both runs
    m, ledger = _dpswd_generator(private), PrivacyLedger(10.0, 1e-4)
    loop.train(m, digits(), ledger, train_context(tmp_path / str(compiled), max_steps=STEPS, compile=compiled))
    monkeypatch.undo()
    return m, ledger, releases, counters["frames"]["ok"]


def assert_same_weights(eager, comp) -> None:
    """Every weight entry to 1e-6, except those whose gradient is below Adam's eps in the eager run (module
    docstring); most entries are compared."""
    compared = total = 0
    for p, q in zip(eager.G.parameters(), comp.G.parameters(), strict=True):
        resolved = eager.opt.state[p]["exp_avg_sq"].sqrt() > eager.opt.defaults["eps"]
        torch.testing.assert_close(q.detach()[resolved], p.detach()[resolved], rtol=0, atol=1e-6)
        compared, total = compared + int(resolved.sum()), total + p.numel()
    assert compared > 0.9 * total


# inductor (torch.compile's default, what a run uses) takes a minute or more to build its C++ on a loaded 2-core
# machine: slow; aot_eager traces the same graphs (forward and backward, through AOTAutograd) and runs them
# without code generation, in seconds (the fast suite's check, with the noise on: weights, noise and epsilon)
BACKENDS = ["aot_eager", pytest.param("inductor", marks=pytest.mark.slow)]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["inductor"])
def test_compiled_step_equals_the_eager_step_with_noise_off(tmp_path, monkeypatch, backend):
    eager, _, _, frames_eager = _run(tmp_path, monkeypatch, compiled=False, private=False)
    comp, _, _, frames = _run(tmp_path, monkeypatch, compiled=True, private=False, backend=backend)
    assert frames_eager == 0 and frames >= 3  # the generator, the loss and the Adam step were compiled
    assert eager.projection.noise_std == comp.projection.noise_std == 0.0
    assert_same_weights(eager, comp)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_step_draws_the_same_noise_and_spends_the_same_epsilon(tmp_path, monkeypatch, backend):
    eager, led_e, rel_e, _ = _run(tmp_path, monkeypatch, compiled=False, private=True)
    comp, led_c, rel_c, frames = _run(tmp_path, monkeypatch, compiled=True, private=True, backend=backend)
    assert frames >= 3 and len(rel_e) == len(rel_c) == STEPS
    assert eager.projection.noise_std == comp.projection.noise_std > 0
    for a, b in zip(rel_e, rel_c, strict=True):  # the release: same rows, same directions, same noise
        assert torch.equal(a.rows, b.rows) and torch.equal(a.out, b.out)
    assert torch.equal(eager.projection.generator.get_state(), comp.projection.generator.get_state())
    assert torch.equal(eager.sampler.generator.get_state(), comp.sampler.generator.get_state())
    assert led_c.steps == led_e.steps == STEPS and led_c.epsilon() == led_e.epsilon()
    assert_same_weights(eager, comp)


@pytest.mark.parametrize(("value", "on"), [("off", False), ("on", True), (False, False), (True, True), ("ON", True)])
def test_setting_values(value, on):
    assert check_compile(value) is on


def test_unknown_setting_is_one_error_line_naming_it():
    with pytest.raises(ValueError, match=r"trainer.compile='fast' is unknown; choose off .* or on"):
        check_compile("fast")


def test_unknown_setting_is_refused_before_any_data_loads(tmp_path, monkeypatch):
    import dpgen.data.datasets as ds

    monkeypatch.setattr(ds, "digits", lambda *a, **k: pytest.fail("data was loaded before validation"))
    with pytest.raises(ConfigError, match=r"^trainer.compile='fast' is unknown"):
        run(compose_cfg(["trainer.compile=fast"], out_dir=tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("family", COMPILED)
def test_every_compiled_family_runs_its_preset_with_the_eager_release(family, tmp_path):
    """Each family's short preset through the real pipeline, compile off and on (inductor): the mechanisms' and
    the sampler's generators end in the same states (the same draws) and ε is the same."""
    eager, _ = set_up(family, tmp_path / "off")
    comp, _ = set_up(family, tmp_path / "on", ["trainer.compile=on"])
    assert eager.mechanisms.keys() == comp.mechanisms.keys()
    for name, mech in eager.mechanisms.items():
        other = comp.mechanisms[name]
        assert torch.equal(mech.generator.get_state(), other.generator.get_state())
        assert other.ledger.steps == mech.ledger.steps > 0 and other.ledger.epsilon() == mech.ledger.epsilon()
    assert torch.equal(eager.sampler.generator.get_state(), comp.sampler.generator.get_state())


def test_the_gpu_check_prepares_a_compile_row_beside_the_eager_run(monkeypatch):
    from types import SimpleNamespace

    from dpgen.bench import gpu_check
    from tests.tools.test_gpu_check import _fake

    monkeypatch.setattr(gpu_check.subprocess, "run", lambda *a, **k: SimpleNamespace(stdout="", stderr=""))  # gpu-bench
    assert "trainer.compile=on beside off, DP-SWD generator: cuda precision=32, 40 steps (5 warm-up, compiling)" in \
        gpu_check.plan(list(gpu_check.FAMILIES), "cuda", 40, 5)
    rep = _fake()
    rep["compile"] = {"dpswd_generator": {"steps": 40, "timed_steps": 35, "epsilon": 1.25, "steps_per_s": 500.0,
                                          "run_s": 61.0}}
    rep["families"]["dpswd_generator"]["cuda/32"]["run_s"] = 9.0
    assert "| DP-SWD generator | 250.0 | 500.0 | ×2.0 | 1.2500 / 1.2500 | 9 / 61 |" in gpu_check.render(rep)
    rep["compile"]["dpswd_generator"] = {"error": "RuntimeError: boom"}
    assert gpu_check.failed(rep) and "| DP-SWD generator | 250.0 | failed |" in gpu_check.render(rep)
