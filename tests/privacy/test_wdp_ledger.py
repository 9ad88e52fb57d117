"""Reported-only accountants (BA, WA, MA) in the privacy ledger: summary, persistence, never calibrating."""

from __future__ import annotations

import math

import pytest

from dpgen.privacy import PrivacyLedger
from dpgen.privacy.bayesian import BayesianAccountant, MomentsAccountant
from dpgen.privacy.wdp import WassersteinAccountant


def _ledger_with_reported(steps: int = 3) -> PrivacyLedger:
    led = PrivacyLedger(epsilon=5.0, delta=1e-5, data_dependent_reports=True)
    for a in (WassersteinAccountant(16, 32), BayesianAccountant(16, total_steps=10), MomentsAccountant(16)):
        led.add_reported(a)
    for _ in range(steps):
        led.record(1.1, 0.01)
        led.reported["wa"].step([0.2, 0.5, 0.9], 1.1, 0.01)
        led.reported["ba"].step([0.2, 0.5, 0.9], 1.1, 0.01)
        led.reported["ma"].step(1.0, 1.1, 0.01)
    return led


def test_summary_holds_four_epsilons_and_labels_reported_ones():
    s = _ledger_with_reported().summary()
    for key in ("epsilon_rdp", "epsilon_pld", "epsilon_wa", "epsilon_ba", "epsilon_ma"):
        assert math.isfinite(s[key]) and s[key] > 0, key
    assert set(s["reported_accountants"]) == {"wa", "ba", "ma"}
    assert "NOT a DP guarantee" in s["reported_accountants"]["wa"]
    assert "never used to calibrate" in s["reported_accountants_note"]
    assert s["guarantee"] == s["status"] == "not DP: data-dependent reports"  # never "rigorous" beside "not DP"


def test_ledger_without_reported_accountants_keeps_its_old_summary_and_state():
    led = PrivacyLedger(epsilon=5.0, delta=1e-5)
    led.record(1.1, 0.01, steps=4)
    assert "epsilon_wa" not in led.summary() and "reported" not in led.state_dict()


def test_reported_state_survives_a_checkpoint_in_either_attach_order():
    led = _ledger_with_reported(steps=4)
    state = led.state_dict()
    # attach first, then load
    a = PrivacyLedger(epsilon=5.0, delta=1e-5, data_dependent_reports=True)
    wa = WassersteinAccountant(16, 32)
    a.add_reported(wa)
    a.load_state_dict(state)
    assert wa.steps == 4 and wa.epsilon(1e-5) == pytest.approx(led.summary()["epsilon_wa"])
    # load first (pipeline order), attach later
    b = PrivacyLedger(epsilon=5.0, delta=1e-5, data_dependent_reports=True)
    b.load_state_dict(state)
    ba = BayesianAccountant(16, total_steps=10)
    b.add_reported(ba)
    assert ba.steps == 4 and ba.epsilon(1e-5) == pytest.approx(led.summary()["epsilon_ba"])


def test_reported_accountants_never_change_the_allowance_or_calibration():
    plain = PrivacyLedger(epsilon=5.0, delta=1e-5)
    for _ in range(3):
        plain.record(1.1, 0.01)
    rep = _ledger_with_reported(steps=3)
    assert rep.allowance(1.1, 0.01) == plain.allowance(1.1, 0.01)
    assert rep.calibrate(0.01, 500) == plain.calibrate(0.01, 500)


def test_calibrate_hits_the_target_and_accounts_for_the_history():
    led = PrivacyLedger(epsilon=3.0, delta=1e-5)
    sigma = led.calibrate(0.02, 200)
    led.record(sigma, 0.02, steps=200)
    assert led.epsilon() <= 3.0 and led.epsilon() > 2.9
    led2 = PrivacyLedger(epsilon=3.0, delta=1e-5)
    led2.record(1.0, 0.02, steps=100)
    assert led2.calibrate(0.02, 200) > sigma  # part of the budget is already spent
    with pytest.raises(ValueError, match="clashes"):
        led.add_reported(type("X", (), {"name": "rdp"})())


# ------------------------------------------------------------ data-dependent reports opt-in
def test_reported_accountants_need_the_explicit_opt_in_and_label_the_run_not_dp():
    led = PrivacyLedger(epsilon=5.0, delta=1e-5)
    with pytest.raises(ValueError, match="accountant.data_dependent_reports=true"):
        led.add_reported(WassersteinAccountant(16, 32))
    assert led.summary()["data_dependent_reports"] is False and "status" not in led.summary()
    s = _ledger_with_reported().summary()
    assert s["data_dependent_reports"] is True and s["status"] == "not DP: data-dependent reports"


def test_resume_cannot_switch_data_dependent_reports():
    state = _ledger_with_reported().state_dict()
    with pytest.raises(ValueError, match="accountant.data_dependent_reports=true"):
        PrivacyLedger(epsilon=5.0, delta=1e-5).load_state_dict(state)
    assert PrivacyLedger.from_state_dict(state).data_dependent_reports
