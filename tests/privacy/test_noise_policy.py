"""Noise policies (privacy/noise.py): a mechanism is given its policy once, applies it itself, checks it on
resume; the noise and the projection directions come from generators the mechanism owns and checkpoints."""

from __future__ import annotations

import re

import pytest
import torch

from dpgen.config import privacy_setting_error
from dpgen.errors import ConfigError
from dpgen.privacy import PrivacyLedger
from dpgen.privacy.errors import PrivacySettingError
from dpgen.privacy.guarantee import NON_PRIVATE, PAPER_CONVENTION, RIGOROUS
from dpgen.privacy.mechanisms import GaussianProjectionRelease, NoisyGradientSum
from dpgen.privacy.noise import (
    Calibrated,
    FixedMultiplier,
    FixedStd,
    NoiseSettings,
    NotPrivate,
    PaperNoise,
    build_policy,
)
from tests.helpers import ROOT

METHODS = ROOT / "dpgen" / "methods"


def _proj(ledger, noise, steps=20, **kw):
    base = dict(dim=6, num_projections=5, steps=steps, sample_rate=0.1, n_private=100, bound="chernoff", seed=0)
    return GaussianProjectionRelease(ledger, noise=noise, **{**base, **kw})


def test_each_policy_fixes_the_noise_when_the_mechanism_is_built():
    led = PrivacyLedger(4.0, 1e-5)
    cal = _proj(led, Calibrated())
    assert cal.noise_multiplier == pytest.approx(led.calibrate(0.1, 20, cal.beta, history=False), rel=1e-12)
    assert cal.noise_std == pytest.approx(cal.noise_multiplier * cal.sensitivity) and cal.guarantee == RIGOROUS
    fixed = _proj(led, FixedMultiplier(2.0))
    assert fixed.noise_multiplier == 2.0 and fixed.noise_std == pytest.approx(2.0 * fixed.sensitivity)
    std = _proj(led, FixedStd(3.0))
    assert std.noise_std == 3.0 and std.noise_multiplier == pytest.approx(3.0 / std.sensitivity)
    paper = _proj(led, PaperNoise(3.0))
    assert paper.noise_std == 3.0 and paper.guarantee == PAPER_CONVENTION
    off = _proj(PrivacyLedger(None, 1e-5), NotPrivate(0.5))
    assert off.noise_std == 0.5 and off.noise_multiplier == 0.0 and off.sensitivity is None
    assert off.guarantee == NON_PRIVATE and off.beta == 0.0
    # the noise of a built mechanism has no setter: the policy is the only way in
    assert not any(hasattr(cal, m) for m in ("calibrate", "set_noise_multiplier", "fix_noise_std", "set_noise_std"))


def test_a_policy_is_required_and_checked():
    with pytest.raises(TypeError):
        GaussianProjectionRelease(PrivacyLedger(4.0, 1e-5), dim=6, num_projections=5, steps=20, sample_rate=0.1,
                                  n_private=100)
    with pytest.raises(PrivacySettingError, match="Calibrated"):
        _proj(PrivacyLedger(4.0, 1e-5), 1.5)
    with pytest.raises(PrivacySettingError, match="planned releases"):  # calibrating needs the number of releases
        NoisyGradientSum(PrivacyLedger(4.0, 1e-5), clip_norm=1.0, sample_rate=0.1, expected_batch_size=10.0,
                         noise=Calibrated())
    with pytest.raises(PrivacySettingError) as e:
        FixedMultiplier(0.0)
    assert e.value.setting == "noise_multiplier" and isinstance(e.value, ValueError)
    with pytest.raises(ValueError, match="epsilon"):  # nothing to calibrate to
        _proj(PrivacyLedger(None, 1e-5), Calibrated())


def test_calibrated_with_history_spends_what_an_earlier_phase_left():
    """A second phase calibrated with history=True composes with the ledger's earlier releases: both phases
    together spend the target (not more); without history the second phase alone would spend it."""
    target = 3.0
    led = PrivacyLedger(target, 1e-5)

    def _proj(ledger, noise, steps):  # orthogonal directions: no delta reserved, so both phases fit in delta
        return GaussianProjectionRelease(ledger, noise=noise, dim=6, num_projections=5, steps=steps, sample_rate=0.1,
                                         n_private=100, directions="orthogonal", seed=0)

    first = _proj(led, FixedMultiplier(3.0), steps=30)
    rows, u = torch.zeros(4, 6), first.draw_directions()
    for _ in range(30):
        first.release(rows, u)
    spent = led.epsilon()
    assert 0 < spent < target
    second = _proj(led, Calibrated(history=True), steps=40)
    alone = _proj(PrivacyLedger(target, 1e-5), Calibrated(), steps=40)
    assert second.noise_multiplier > alone.noise_multiplier  # less budget left: more noise
    assert second._config()["history_steps"] == 30 and "history_steps" not in alone._config()
    for _ in range(40):
        second.release(rows, u)
    assert target * 0.98 <= led.epsilon() <= target * (1 + 1e-9)
    over = PrivacyLedger(target, 1e-5)  # the same two phases with the second calibrated without history
    for m, n in ((_proj(over, FixedMultiplier(3.0), steps=30), 30), (_proj(over, Calibrated(), steps=40), 40)):
        for _ in range(n):
            m.release(rows, u)
    assert over.epsilon() > target


def test_a_resume_refuses_another_policy_and_restores_noise_and_directions():
    """The uninterrupted run and the resumed one draw the same directions and the same noise."""
    rows = torch.rand(4, 6) * 0.1

    def run(m, n):
        return [m.release(rows, m.draw_directions()) for _ in range(n)]

    whole = _proj(PrivacyLedger(4.0, 1e-5), Calibrated(), seed=None)
    run(whole, 2)
    state = whole.state_dict()
    expected = run(whole, 3)
    torch.manual_seed(0)  # torch's global RNG plays no part in either draw
    resumed = _proj(PrivacyLedger(4.0, 1e-5), Calibrated(), seed=None)
    resumed.load_state_dict(state)
    torch.manual_seed(1)
    assert all(torch.equal(a, b) for a, b in zip(run(resumed, 3), expected, strict=True))
    assert resumed.releases == 5
    for other in (FixedMultiplier(resumed.noise_multiplier), Calibrated(history=True)):
        with pytest.raises(ValueError, match="cannot resume.*noise"):
            _proj(PrivacyLedger(4.0, 1e-5), other).load_state_dict(state)


def test_the_directions_generator_is_the_mechanism_s_own():
    a, b = _proj(PrivacyLedger(4.0, 1e-5), Calibrated(), seed=3), _proj(PrivacyLedger(4.0, 1e-5), Calibrated(), seed=3)
    torch.manual_seed(0)
    ua = a.draw_directions()
    torch.manual_seed(99)
    assert torch.equal(ua, b.draw_directions())  # same seed: same directions, whatever the global RNG
    assert torch.allclose(ua.norm(dim=0), torch.ones(5))
    orth = _proj(PrivacyLedger(4.0, 1e-5), Calibrated(), directions="orthogonal", seed=3)
    state = orth.directions_generator.get_state()
    u = orth.draw_directions()
    orth.directions_generator.set_state(state)
    assert torch.equal(orth.draw_directions(), u)


def _policy(**settings):
    try:
        return build_policy(NoiseSettings(**settings))
    except PrivacySettingError as e:
        raise privacy_setting_error(e) from None


def test_one_function_decides_the_policy_and_the_error_names_the_setting():
    assert _policy() == Calibrated() and _policy(noise_multiplier=1.2) == FixedMultiplier(1.2)
    assert _policy(private=False, noise_std=0.5) == NotPrivate(0.5) and _policy(private=False, noise_multiplier=1.1) == NotPrivate()
    assert _policy(paper_std=0.7) == PaperNoise(0.7)
    assert _policy(history=True) == Calibrated(history=True) and _policy(epsilon_share=0.5) == Calibrated(epsilon_share=0.5)
    assert _policy(noise_multiplier=2.0, history=True) == FixedMultiplier(2.0)  # a fixed noise is kept in a phase 2
    with pytest.raises(ConfigError, match=r"^model\.noise_multiplier"):
        _policy(noise_multiplier=-1.0)
    with pytest.raises(ConfigError, match=r"^model\.alignment\.noise_multiplier"):
        _policy(noise_multiplier=0.0, scope="alignment")
    with pytest.raises(ConfigError, match=r"^model\.noise_std"):
        _policy(noise_std=0.5)
    with pytest.raises(ConfigError, match=r"^model\.noise_std"):
        _policy(private=False, noise_std=-1.0)


def test_the_pipeline_hands_each_method_its_policy_and_the_method_only_restates_it():
    from dpgen.methods.domain_adaptation import DPDANNAlignment
    from dpgen.methods.dp_class_gaussian import DPClassGaussian
    from dpgen.methods.dpsinkhorn import DPSinkhorn

    sink = DPSinkhorn(generator=None, noise_multiplier=1.1, clip_norm=0.5)
    assert sink.noise == FixedStd(2.0 * 0.5 * 1.1)  # its one hook: the paper's sigma as a std 2 C sigma
    sink.take_noise(Calibrated())  # what the pipeline hands in wins over the settings' own reading
    assert sink.noise == Calibrated()
    assert DPClassGaussian(epsilon_share=0.25).noise == Calibrated(epsilon_share=0.25)
    assert DPDANNAlignment(discriminator=None, noise_multiplier=0.8).noise == FixedMultiplier(0.8)
    src = (ROOT / "dpgen" / "pipeline.py").read_text()
    assert src.count("take_noise(build_policy(") == 1


def test_no_method_builds_a_policy_or_reads_the_config_for_it():
    # base.py: the holder takes what it is handed (or, built by hand, applies the same one decision)
    hits = [f"{p.name}:{i}" for p in sorted(METHODS.glob("*.py")) if p.name != "base.py"
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"noise_policy|build_policy|from \.\.config import .*noise|\b(Calibrated|FixedMultiplier|NotPrivate)\(", line)]
    assert not hits, hits


def test_methods_hold_no_noise_policy_logic_and_no_epsilon_checks():
    """The policy comes from the config layer and the mechanism applies it: no method calibrates, sets a
    noise, or checks whether epsilon is set."""
    pattern = re.compile(r"target_epsilon|\.calibrate\(|set_noise|fix_noise_std|set_sigma|paper_convention\s*=")
    hits = [f"{p.name}:{i}" for p in sorted(METHODS.glob("*.py")) if p.name != "loop.py"  # the budget stop
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not hits, hits
