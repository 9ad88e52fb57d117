"""The privacy ledger: recording, delta reservation, the budget stop, persistence."""

from __future__ import annotations

import math

import pytest

from dpgen.privacy import PrivacyLedger, RDPAccountant, Release
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
    assert led.epsilon() == pytest.approx(expected)
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


@pytest.mark.parametrize("eps,delta,match", [(-1.0, 1e-5, "accountant.epsilon"), (0.0, 1e-5, "accountant.epsilon"),
                                             (1.0, 2.0, "accountant.delta"), (1.0, 0.0, "accountant.delta")])
def test_bad_epsilon_or_delta_raise_naming_the_setting(eps, delta, match):
    with pytest.raises(ValueError, match=match):
        PrivacyLedger(eps, delta)
