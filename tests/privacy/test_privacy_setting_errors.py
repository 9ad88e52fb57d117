"""The privacy core speaks its own words; the config layer names the Hydra key."""

from __future__ import annotations

import pytest

from dpgen.config import privacy_setting_error
from dpgen.errors import ConfigError
from dpgen.privacy import PrivacyLedger, ProjectionDP
from dpgen.privacy.accountants import calibrating_accountant
from dpgen.privacy.errors import PrivacySettingError


@pytest.mark.parametrize("make, setting, key", [
    (lambda: ProjectionDP(5, bound="nope"), "bound", "model.dp.bound"),
    (lambda: ProjectionDP(5, sensitivity_fraction=1.5), "sensitivity_fraction", "model.dp.sensitivity_fraction"),
    (lambda: calibrating_accountant("poisson", "nope"), "calibrate_with", "accountant.calibrate_with"),
    (lambda: PrivacyLedger(None, 1e-5).calibrate(0.1, 10), "target_epsilon", "accountant.epsilon"),
])
def test_the_core_raises_its_own_error_and_the_config_layer_names_the_key(make, setting, key):
    with pytest.raises(PrivacySettingError) as e:
        make()
    assert e.value.setting == setting and isinstance(e.value, ValueError)
    assert not any(w in str(e.value) for w in ("model.", "accountant.", "privacy.")), str(e.value)
    err = privacy_setting_error(e.value)
    assert isinstance(err, ConfigError) and str(err).startswith(f"{key}: ")
