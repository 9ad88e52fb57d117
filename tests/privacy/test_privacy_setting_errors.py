"""The privacy core speaks its own words; the config layer names the Hydra key."""

from __future__ import annotations

import pytest

from dpgen.config import privacy_setting_error
from dpgen.errors import ConfigError
from dpgen.privacy import PrivacyLedger, ProjectionDP
from dpgen.privacy.accountants import calibrating_accountant
from dpgen.privacy.delta import check_delta
from dpgen.privacy.errors import PrivacySettingError
from dpgen.privacy.sampler import PrivateSampler


@pytest.mark.parametrize("make, setting, key", [
    (lambda: ProjectionDP(5, bound="nope"), "bound", "model.dp.bound"),
    (lambda: ProjectionDP(5, bound="bernstein", sensitivity_fraction=1.5), "sensitivity_fraction", "model.dp.sensitivity_fraction"),
    (lambda: calibrating_accountant("poisson", "nope"), "calibrate_with", "accountant.calibrate_with"),
    (lambda: PrivacyLedger(None, 1e-5).calibrate(0.1, 10), "target_epsilon", "accountant.epsilon"),
    (lambda: PrivateSampler(range(5), 6, "poisson"), "batch_size", "model.batch_size"),
    (lambda: check_delta(0.01, 1347, bound=True), "delta", "accountant.delta"),
    (lambda: PrivacyLedger(5.0, 1e-5).load_state_dict(PrivacyLedger(4.0, 1e-5).state_dict()), "target_epsilon",
     "accountant.epsilon"),
    (lambda: PrivacyLedger(5.0, 1e-5).load_state_dict(PrivacyLedger(5.0, 1e-5, calibrate_with="rdp").state_dict()),
     "calibrate_with", "accountant.calibrate_with"),
])
def test_the_core_raises_its_own_error_and_the_config_layer_names_the_key(make, setting, key):
    with pytest.raises(PrivacySettingError) as e:
        make()
    assert e.value.setting == setting and isinstance(e.value, ValueError)
    assert not any(w in str(e.value) for w in ("model.", "accountant.", "privacy.", "dataset.")), str(e.value)
    err = privacy_setting_error(e.value)
    assert isinstance(err, ConfigError) and str(err).startswith(f"{key}: ")
