"""ProjectionDP: the projection methods' DP settings, one validated object built from ``model.dp``."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from dpgen.config import privacy_setting_error
from dpgen.privacy import ProjectionDP
from dpgen.privacy.errors import PrivacySettingError
from dpgen.privacy.projection import as_projection_dp
from tests.helpers.configs import compose_cfg


@pytest.mark.parametrize("bad,match", [
    (dict(num_projections=0, bound="bernstein"), "model.dp.num_projections"),
    (dict(num_projections=10, bound="lemma3"), "model.dp.bound"),
    (dict(num_projections=10, bound="bernstein", directions="haar"), "model.dp.directions"),
    (dict(num_projections=10, bound="bernstein", sensitivity_fraction=1.0), "model.dp.sensitivity_fraction"),
])
def test_invalid_settings_are_refused_naming_the_key(bad, match):
    """The core names the setting in its own words; the config layer names the key."""
    with pytest.raises(PrivacySettingError) as e:
        ProjectionDP(**bad)
    assert str(privacy_setting_error(e.value)).startswith(match + ": ")


def test_a_mapping_or_nothing_gives_the_same_object():
    default = ProjectionDP(70, bound="chernoff")
    assert as_projection_dp(None, default) is default
    assert as_projection_dp({"_target_": "x", "num_projections": 70, "bound": "chernoff"}, default) == default
    assert default.release_settings() == {"num_projections": 70, "bound": "chernoff", "directions": "random",
                                          "sensitivity_fraction": 0.5}


@pytest.mark.parametrize("preset,k,bound,directions", [
    ("digits_dpswd", 200, "chernoff", "random"),
    ("mnist_dpswd_partition", 784, "bernstein", "orthogonal"),
    ("mnist_dpswflow", 31, "chernoff", "random"),
    ("mnist_dpswgen_paper", 70, "clt", "random"),
    ("digits_shift_dpswd", 200, "bernstein", "random"),
])
def test_presets_build_one_projection_dp_object(preset, k, bound, directions):
    cfg = compose_cfg([f"experiment={preset}"])
    model = cfg.model.alignment if "alignment" in cfg.model else cfg.model
    dp = instantiate(model.dp)
    assert dp == ProjectionDP(k, bound=bound, directions=directions)
