"""The one training loop: no method checkpoints, builds a progress bar or records a release by hand;
resume refuses changed budgets; the loop's budget check, finite check and release artefact."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from dpgen.methods import loop
from dpgen.methods.base import Method
from dpgen.privacy import PrivacyLedger, PrivateSampler
from dpgen.privacy.mechanisms import GaussianProjectionRelease
from dpgen.privacy.noise import Calibrated
from tests.helpers import ROOT
from tests.helpers.context import train_context

METHODS = ROOT / "dpgen" / "methods"
FORBIDDEN_CALLS = {"atomic_save", "Progress", "record", "save"}


def _calls(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


@pytest.mark.parametrize("path", sorted(p for p in METHODS.glob("*.py") if p.name not in {"loop.py", "__init__.py"}),
                         ids=lambda p: p.name)
def test_no_method_checkpoints_draws_a_bar_or_records_a_release_itself(path):
    bad = _calls(path) & FORBIDDEN_CALLS
    assert not bad, f"{path.name} calls {sorted(bad)}: only methods/loop.py and privacy/mechanisms.py may"
    src = path.read_text()
    assert "rich.progress" not in src and "from ..utils import atomic_save" not in src


class _Toy(Method):
    """Minimal method: releases the noisy projection of a private batch each step."""

    name = "toy"

    def __init__(self, steps: int = 10, nan_at: int | None = None) -> None:
        self.steps, self.nan_at = steps, nan_at

    def setup(self, data, ledger, ctx):
        torch.manual_seed(ctx.seed)  # fixed_size's subset: the global RNG (restored by the loop on a resume)
        self.sampler = PrivateSampler(data, 8, ledger.sampling, seed=ctx.seed)
        self.mech = GaussianProjectionRelease(ledger, dim=4, num_projections=3, steps=self.steps,
                                              sample_rate=self.sampler.sample_rate, n_private=len(data),
                                              bound="chernoff", seed=ctx.seed + 1, noise=Calibrated())
        self.mechanisms = {"projection": self.mech}
        self.w = torch.zeros(3)

    @property
    def total_steps(self):
        return self.steps

    def step(self, t):
        from dpgen.privacy.rows import clip_rows, fixed_size

        x, _ = self.sampler.sample()
        u = self.mech.draw_directions()  # the mechanism's own directions generator (checkpointed)
        a = self.mech.release(fixed_size(clip_rows(x, 0.5), 8), u)
        self.w = self.w + a.mean(0)
        return {"w_norm": float("nan") if t == self.nan_at else float(self.w.norm())}

    def signature(self):
        return {"steps": self.steps}

    def state_dict(self):
        return {"w": self.w}

    def load_state_dict(self, state):
        self.w = state["w"]

    def release_state(self):
        return {"w": self.w}


def _data(n=200):
    from dpgen.data.base import PrivateSplit

    g = torch.Generator().manual_seed(0)
    return PrivateSplit(torch.randn(n, 4, generator=g), torch.zeros(n, dtype=torch.long))


def test_loop_trains_checkpoints_and_writes_the_release_artefact(tmp_path):
    led = PrivacyLedger(5.0, 1e-4)
    out = loop.train(_Toy(), _data(), led, train_context(tmp_path))
    assert out["train_steps"] == 10 == led.steps and not out["stopped_by_budget"]
    # the steady steps (all but the first) and their wall time, a private timing of the bench's steps/s
    assert 0 < out["steady_time_s"] <= out["train_time_s"]
    assert out["mechanisms"]["projection"]["relation"] == "add_remove" and out["mechanisms"]["projection"]["releases"] == 10
    art = torch.load(tmp_path / "release.pt", weights_only=False)
    assert set(art) == {"w", "signature"}
    ck = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert set(ck) == {"step", "signature", "method", "ledger", "mechanisms", "sampler", "rng", "public_generator", "values",
                       "processes"}


def test_resume_draws_the_same_noise_as_an_uninterrupted_run(tmp_path):
    full = _Toy()
    loop.train(full, _data(), PrivacyLedger(5.0, 1e-4), train_context(tmp_path / "a"))
    loop.train(_Toy(), _data(), PrivacyLedger(5.0, 1e-4), train_context(tmp_path / "b", max_steps=6))
    resumed, led = _Toy(), PrivacyLedger(5.0, 1e-4)
    torch.manual_seed(99)
    loop.train(resumed, _data(), led, train_context(tmp_path / "b", resume_from=tmp_path / "b" / "checkpoints" / "last.pt"))
    assert led.steps == 10 and torch.equal(resumed.w, full.w)


@pytest.mark.parametrize("change", [dict(epsilon=6.0), dict(delta=1e-5), dict(sampling="without_replacement")])
def test_resume_with_a_changed_accountant_setting_is_refused_naming_it(tmp_path, change):
    """Defect 5: a resume with another accountant.epsilon / delta / sampling was silently accepted."""
    loop.train(_Toy(), _data(), PrivacyLedger(5.0, 1e-4), train_context(tmp_path, max_steps=4))
    kw = {"epsilon": 5.0, "delta": 1e-4, "sampling": "poisson", **change}
    name = f"accountant.{next(iter(change))}"
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        loop.train(_Toy(), _data(), PrivacyLedger(**kw), train_context(tmp_path, resume_from=tmp_path / "checkpoints" / "last.pt"))


def test_loop_stops_before_the_budget_is_exceeded(tmp_path):
    led = PrivacyLedger(5.0, 1e-4)
    led.record(1.0, 0.04, 200)  # spent elsewhere
    out = loop.train(_Toy(), _data(), led, train_context(tmp_path))
    assert out["stopped_by_budget"] and out["train_steps"] < 10 and led.epsilon() <= 5.0


def test_a_non_finite_released_value_stops_the_run_with_a_clear_error(tmp_path):
    from dpgen.methods import NonFiniteLossError

    with pytest.raises(NonFiniteLossError, match="w_norm"):
        loop.train(_Toy(nan_at=2), _data(), PrivacyLedger(5.0, 1e-4), train_context(tmp_path))
    assert math.isfinite(PrivacyLedger(5.0, 1e-4).epsilon())
