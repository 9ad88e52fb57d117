"""privacy.convention=paper for the flows: the one noise decision (build_policy) hands the projection release the
paper's convention, and the release computes the released code's std at its own k, d and delta."""

from __future__ import annotations

import pytest

from dpgen.privacy import PrivacyLedger
from dpgen.privacy.dpswflow import paper_flow_noise_std, paper_one_shot_sigma
from dpgen.privacy.mechanisms import GaussianProjectionRelease, OneShotProjectionRelease
from dpgen.privacy.noise import NoiseSettings, PaperNoise, PaperProjectionNoise, build_policy


def _ledger() -> PrivacyLedger:
    return PrivacyLedger(epsilon=None, delta=1e-5, sampling="poisson")


@pytest.mark.parametrize("stated", [None, 1024])
def test_a_per_step_release_applies_the_released_code_s_std(stated):
    policy = build_policy(NoiseSettings(paper_projection=PaperProjectionNoise(sigma=0.7, stated_dim=stated)))
    assert isinstance(policy, PaperProjectionNoise)
    mech = GaussianProjectionRelease(_ledger(), dim=9, num_projections=50, steps=10, sample_rate=0.01,
                                     n_private=1000, noise=policy, row_diameter=2.0, bound="clt")
    assert isinstance(mech.noise_policy, PaperNoise) and mech.noise_policy.stated_dim == stated
    assert mech.noise_std == pytest.approx(paper_flow_noise_std(0.7, stated or 9, 50, 1e-5), rel=1e-12)


def test_the_one_shot_release_applies_the_released_code_s_std():
    policy = build_policy(NoiseSettings(paper_projection=PaperProjectionNoise(epsilon=2.0)))
    mech = OneShotProjectionRelease(_ledger(), dim=9, num_projections=50, noise=policy, bound="clt")
    assert mech.noise_std == pytest.approx(paper_one_shot_sigma(2.0, 1e-5, 9, 50), rel=1e-12)
