"""The privacy ledger: recording, delta reservation, the budget stop, persistence."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpgen.config import privacy_setting_error
from dpgen.privacy import PLDAccountant, PrivacyLedger, RDPAccountant, Release
from dpgen.privacy.errors import PrivacySettingError
from dpgen.utils import atomic_save, load_checkpoint


def test_ledger_survives_checkpoint_round_trip(tmp_path):
    led = PrivacyLedger(8.0, 1e-5, "poisson")
    led.record(1.1, 0.05, 30, delta_per_step=1e-9)
    led.record(0.9, 0.05, 10)
    atomic_save({"ledger": led.state_dict()}, tmp_path / "ck.pt")
    back = PrivacyLedger.from_state_dict(load_checkpoint(tmp_path / "ck.pt")["ledger"])
    assert back.entries == led.entries
    assert back.epsilon() == pytest.approx(led.epsilon())
    assert back.epsilon(accountant="pld") == pytest.approx(led.epsilon(accountant="pld"))


def test_ledger_refuses_checkpoint_with_other_sampling():
    led = PrivacyLedger(8.0, 1e-5, "poisson")
    other = PrivacyLedger(8.0, 1e-5, "without_replacement")
    with pytest.raises(ValueError, match="sampling"):
        other.load_state_dict(led.state_dict())


def test_ledger_reserves_sensitivity_delta_for_every_release():
    led = PrivacyLedger(10.0, 1e-5)
    led.record(1.0, 0.01, 100, delta_per_step=2e-8)
    assert led.delta_reserved == pytest.approx(2e-6)
    # conversion happens at delta - reserved
    expected = RDPAccountant("poisson").epsilon_of([Release(1.0, 0.01, 100)], 1e-5 - 2e-6)
    assert led.epsilon(accountant="rdp") == pytest.approx(expected)
    led.record(1.0, 0.01, 500, delta_per_step=2e-8)  # reserved now exceeds delta
    assert led.epsilon() == math.inf


def test_allowance_stops_before_target_epsilon_is_exceeded():
    led = PrivacyLedger(2.0, 1e-5)
    n = led.allowance(1.0, 0.02)
    assert n > 0
    led.record(1.0, 0.02, n)
    assert led.epsilon() <= 2.0
    led.record(1.0, 0.02, 1)
    assert led.epsilon() > 2.0  # one more step would have exceeded it


def test_ledger_reports_no_pld_for_sampling_without_replacement():
    led = PrivacyLedger(10.0, 1e-5, "without_replacement")
    led.record(1.0, 0.01, 100)
    s = led.summary()
    assert s["epsilon_pld"] is None and "without replacement" in s["epsilon_pld_note"]
    assert s["epsilon_rdp"] > 0


@pytest.mark.parametrize("eps,delta,key", [(-1.0, 1e-5, "accountant.epsilon"), (0.0, 1e-5, "accountant.epsilon"),
                                           (1.0, 2.0, "accountant.delta"), (1.0, 0.0, "accountant.delta")])
def test_bad_epsilon_or_delta_raise_naming_the_setting(eps, delta, key):
    """The core names the setting in its words; the config layer names the key."""
    with pytest.raises(PrivacySettingError) as e:
        PrivacyLedger(eps, delta)
    assert str(privacy_setting_error(e.value)).startswith(key + ": ")


@pytest.mark.parametrize("sampling,calibrate_with,expected", [("poisson", "auto", "pld"), ("poisson", "rdp", "rdp"),
                                                              ("poisson", "pld", "pld"),
                                                              ("without_replacement", "auto", "rdp")])
def test_one_calibrating_accountant_chosen_from_the_sampling(sampling, calibrate_with, expected):
    led = PrivacyLedger(5.0, 1e-5, sampling, calibrate_with=calibrate_with)
    assert led.calibrating_accountant == expected
    led.record(1.0, 0.02, 100)
    s = led.summary()
    assert s["calibrating_accountant"] == expected and s["epsilon"] == s[f"epsilon_{expected}"]
    assert led.epsilon() == s["epsilon"]


def test_pld_calibration_needs_poisson_sampling():
    with pytest.raises(ValueError, match="PLD accountant needs Poisson"):
        PrivacyLedger(5.0, 1e-5, "without_replacement", calibrate_with="pld")


@pytest.mark.parametrize("calibrate_with", ["rdp", "pld"])
def test_calibration_and_budget_stop_use_the_same_accountant(calibrate_with):
    """A sigma calibrated for T steps is allowed at least T steps by the ledger's stop (never stopped
    early by another accountant), and the T steps stay within the target under that accountant."""
    led = PrivacyLedger(4.0, 1e-5, calibrate_with=calibrate_with)
    beta = 1e-9
    sigma = led.calibrate(0.01, 3000, delta_per_step=beta)
    n = led.allowance(sigma, 0.01, beta)
    assert 3000 <= n <= 3000 * 1.02
    led.record(sigma, 0.01, n, delta_per_step=beta)
    assert led.epsilon() <= 4.0
    led.record(sigma, 0.01, 1, delta_per_step=beta)
    assert led.epsilon() > 4.0


def test_pld_calibration_needs_less_noise_than_rdp():
    sig_pld = PrivacyLedger(10.0, 1e-5, calibrate_with="pld").calibrate(256 / 60000, 6000)
    sig_rdp = PrivacyLedger(10.0, 1e-5, calibrate_with="rdp").calibrate(256 / 60000, 6000)
    assert sig_pld < 0.97 * sig_rdp
    # and the PLD sigma is NOT within budget under RDP: the stop must use the calibrating accountant
    assert RDPAccountant().epsilon_of([Release(sig_pld, 256 / 60000, 6000)], 1e-5) > 10.0
    assert PLDAccountant().epsilon_of([Release(sig_pld, 256 / 60000, 6000)], 1e-5) <= 10.0


def _reference_allowance(led: PrivacyLedger, sigma: float, q: float) -> int:
    """The exponential-then-binary search the ledger used before (independent reference)."""
    acct = RDPAccountant() if led.calibrating_accountant == "rdp" else PLDAccountant()
    base = [Release(e.noise_multiplier, e.sample_rate, e.steps) for e in led.entries]

    def ok(s):
        return acct.epsilon_of(base + [Release(sigma, q, s)], led.delta) <= led.target_epsilon

    if not ok(1):
        return 0
    lo, hi = 1, 2
    while ok(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


@settings(max_examples=6, deadline=None)
@pytest.mark.slow  # long: `make test-all` runs it
@given(eps=st.floats(0.5, 8.0), sigma=st.floats(0.6, 3.0), q=st.floats(0.002, 0.1), spent=st.integers(0, 300),
       guess=st.integers(1, 10**5), acct=st.sampled_from(["rdp", "pld"]))
def test_allowance_search_matches_a_plain_binary_search(eps, sigma, q, spent, guess, acct):
    led = PrivacyLedger(eps, 1e-5, calibrate_with=acct)
    if spent:
        led.record(1.5, 0.01, spent)
    assert led.allowance(sigma, q, guess=guess) == _reference_allowance(led, sigma, q)


def test_resume_refuses_another_calibrating_accountant():
    led = PrivacyLedger(8.0, 1e-5, calibrate_with="rdp")
    with pytest.raises(ValueError, match="calibrate_with"):
        PrivacyLedger(8.0, 1e-5, calibrate_with="pld").load_state_dict(led.state_dict())
    assert PrivacyLedger.from_state_dict(led.state_dict()).calibrating_accountant == "rdp"


def test_ledger_refuses_to_compose_releases_under_different_relations():
    """Composition holds under ONE neighbouring relation: a replace-one release after add/remove
    releases (or the reverse) must be refused, not reported as 'mixed'."""
    led = PrivacyLedger(10.0, 1e-5, "poisson")
    led.record(1.0, 0.01, steps=5)  # add/remove (the Poisson relation)
    led.record(2.0, 1.0, steps=1, relation="add_remove")  # same relation: fine
    with pytest.raises(ValueError, match="cannot be composed"):
        led.record(2.0, 1.0, steps=1, relation="replace_one")
    assert led.relation == "add_remove"
    other = PrivacyLedger(10.0, 1e-5, "poisson")
    other.record(2.0, 1.0, steps=1, relation="replace_one")
    with pytest.raises(ValueError, match="cannot be composed"):
        other.record(1.0, 0.01, steps=5)
