"""Release mechanisms (privacy/mechanisms.py): noise added = noise calibrated = noise recorded, the
neighbouring relation and its sensitivity, the noise generator's state; guarantee labels (defects 6, 7)."""

from __future__ import annotations

import math

import pytest
import torch

from dpgen.privacy import PrivacyLedger, dpswd_noise, l2_sensitivity
from dpgen.privacy.guarantee import CLT, NON_PRIVATE, RIGOROUS, combine, guarantee_label
from dpgen.privacy.mechanisms import (
    GaussianProjectionRelease,
    ImageGradientSanitiser,
    Mechanism,
    OneShotProjectionRelease,
    sum_sensitivity,
)
from dpgen.privacy.noise import Calibrated, FixedStd, NotPrivate


def _proj(ledger, **kw):
    base = dict(dim=20, num_projections=10, steps=50, sample_rate=0.1, n_private=100, bound="chernoff", seed=0,
                noise=Calibrated())
    return GaussianProjectionRelease(ledger, **{**base, **kw})


def test_projection_noise_std_matches_the_calibration_over_many_releases():
    led = PrivacyLedger(5.0, 1e-4)
    m = _proj(led)
    ref = dpswd_noise(5.0, 1e-4, d=20, k=10, sample_rate=0.1, steps=50, bound="chernoff", partners=101)
    assert m.noise_std == pytest.approx(ref.noise_std, rel=1e-9)
    assert m.noise_multiplier == pytest.approx(ref.noise_multiplier, rel=1e-12)
    rows, u = torch.zeros(400, 20), torch.nn.functional.normalize(torch.randn(20, 10), dim=0)
    noise = torch.cat([m.release(rows, u) for _ in range(50)])  # rows 0: the output is the noise
    # std of 200,000 N(0, s^2) draws: relative standard error ~ 1/sqrt(2 n) = 0.16 %
    assert noise.std().item() == pytest.approx(m.noise_std, rel=0.01)
    assert abs(noise.mean().item()) < 5 * m.noise_std / math.sqrt(noise.numel())


def test_each_release_records_exactly_one_entry_with_its_relation_and_multiplier():
    for sampling, relation in (("poisson", "add_remove"), ("without_replacement", "replace_one")):
        led = PrivacyLedger(5.0, 1e-4, sampling)
        m = _proj(led)
        rows, u = torch.rand(8, 20) * 0.1, torch.nn.functional.normalize(torch.randn(20, 10), dim=0)
        for i in range(3):
            m.release(rows, u)
            assert led.steps == i + 1
        (e,) = led.entries
        assert (e.relation, e.mechanism, e.steps) == (relation, "gaussian_projection", 3)
        assert e.noise_multiplier == m.noise_multiplier and e.delta_per_step == m.beta == 0.5e-4 / 50
        assert m.sensitivity == pytest.approx(l2_sensitivity(10, 20, m.beta / m.partners(relation), "chernoff"))


class _Sum(Mechanism):
    """A sum of per-record contributions of norm <= C (the DP-SGD shape): C add/remove, 2C replace-one."""

    kind = "test_sum"

    def __init__(self, ledger, c, noise):
        self.c = c  # before the base class: the policy is applied with the sensitivity it fixes
        super().__init__(ledger, sample_rate=0.1, noise=noise, seed=0)

    def sensitivity_under(self, relation):
        return sum_sensitivity(self.c, relation)

    def release(self, s):
        out = s + self.noise(s.shape, s)
        self._record()
        return out


def test_replace_one_doubles_the_sensitivity_of_a_sum_and_the_accounted_multiplier_halves():
    """Defect 1's lesson: under sampling without replacement the same noise std is worth half the multiplier."""
    std = 3.0
    ar = _Sum(PrivacyLedger(5.0, 1e-4, "poisson"), 1.5, FixedStd(std))
    ro = _Sum(PrivacyLedger(5.0, 1e-4, "without_replacement"), 1.5, FixedStd(std))
    for m in (ar, ro):
        m.release(torch.zeros(3))
    assert ar.relation == "add_remove" and ar.sensitivity == 1.5 and ar.ledger.entries[0].noise_multiplier == 2.0
    assert ro.relation == "replace_one" and ro.sensitivity == 3.0 and ro.ledger.entries[0].noise_multiplier == 1.0


def test_the_relation_comes_from_the_ledger_and_a_subsampled_release_cannot_claim_another():
    led = PrivacyLedger(5.0, 1e-4, "poisson")
    with pytest.raises(ValueError, match="add_remove"):
        led.record(1.0, 0.1, 1, relation="replace_one")
    led.record(1.0, 1.0, 1, relation="replace_one")  # a full-set release (q = 1, N public) may


def test_generator_state_round_trips_so_a_resumed_mechanism_draws_the_same_noise():
    led = PrivacyLedger(5.0, 1e-4)
    a = _proj(led, seed=None)  # secret seed
    rows, u = torch.zeros(4, 20), torch.nn.functional.normalize(torch.randn(20, 10), dim=0)
    a.release(rows, u)
    state = a.state_dict()
    expected = a.release(rows, u)
    b = _proj(PrivacyLedger(5.0, 1e-4), seed=None)
    b.load_state_dict(state)
    assert torch.equal(b.release(rows, u), expected) and b.releases == 2
    c = _proj(PrivacyLedger(5.0, 1e-4), num_projections=11, seed=None)
    with pytest.raises(ValueError, match="cannot resume"):
        c.load_state_dict(state)


def test_image_gradient_sanitiser_clips_noises_and_accounts_sigma_or_sigma_over_sqrt_n():
    led = PrivacyLedger(5.0, 1e-4)
    s = ImageGradientSanitiser(led, clip_norm=0.5, n_rows=16, sample_rate=0.05, clip="whole", seed=0,
                               noise=FixedStd(2 * 0.5 * 1.1))  # the paper's sigma 1.1: std 2 C sigma
    assert s.noise_std == pytest.approx(1.1) and s.noise_multiplier == pytest.approx(1.1) and s.sensitivity == 1.0
    g = torch.full((16, 64), float("nan"))  # a non-finite private gradient is released as noise only
    out = s.release(g)
    assert torch.isfinite(out).all() and out.std().item() == pytest.approx(1.1, rel=0.05)
    r = ImageGradientSanitiser(PrivacyLedger(5.0, 1e-4), clip_norm=0.5, n_rows=16, sample_rate=0.05, clip="per_row",
                               noise=FixedStd(2 * 0.5 * 4.0))  # sigma 4 per row: multiplier sigma / sqrt(n) = 1
    assert r.noise_multiplier == pytest.approx(1.0) and r.sensitivity == pytest.approx(4.0) and r.sigma == 4.0
    nonpriv = ImageGradientSanitiser(PrivacyLedger(None, 1e-4), clip_norm=0.5, n_rows=4, sample_rate=0.5,
                                     noise=NotPrivate())
    x = torch.randn(4, 3)
    assert torch.equal(nonpriv.release(x), x) and nonpriv.ledger.epsilon() == math.inf


def test_one_shot_release_is_replace_one_with_sample_rate_one_under_a_poisson_ledger():
    """Defect 7: DPSWflow's one-shot release (whole set, N public) was labelled poisson."""
    led = PrivacyLedger(10.0, 1e-5, "poisson")
    m = OneShotProjectionRelease(led, dim=8, num_projections=31, bound="chernoff", seed=0, noise=Calibrated())
    m.release(torch.zeros(50, 8), torch.nn.functional.normalize(torch.randn(8, 31), dim=0))
    (e,) = led.entries
    assert (e.relation, e.sample_rate, e.mechanism) == ("replace_one", 1.0, "one_shot_projection")
    s = led.summary()
    # calibrated and certified by the ledger's calibrating accountant (PLD for a Poisson ledger)
    assert s["neighbouring_relation"] == "replace_one" and 9.9 <= s["epsilon"] <= 10.0


def test_guarantee_labels_have_one_spelling_and_combine_to_the_weakest():
    assert guarantee_label(True, "chernoff") == RIGOROUS and guarantee_label(True, "clt") == CLT
    assert guarantee_label(False) == NON_PRIVATE and combine([RIGOROUS, CLT]) == CLT
    led = PrivacyLedger(5.0, 1e-4)
    with pytest.warns(UserWarning, match="clt"):
        m = _proj(led, bound="clt")
    m.release(torch.zeros(8, 20), torch.nn.functional.normalize(torch.randn(20, 10), dim=0))
    assert led.summary()["guarantee"] == CLT and m.describe()["guarantee_note"]


def test_opacus_rdp_accountant_agrees_with_ours_for_the_poisson_subsampled_gaussian():
    """Independent cross-check of the ledger's RDP accountant (autodp) with opacus' RDP analysis
    (Mironov et al. 2019) for the Poisson-subsampled Gaussian of DP-SGD / DP-SWD steps.

    With the same (classic) RDP -> DP conversion both must agree closely; opacus' default conversion
    (Balle et al. 2020) is tighter, so the ledger's epsilon must never be below it.
    """
    import numpy as np
    from opacus.accountants import RDPAccountant as OpacusRDP
    from opacus.accountants.analysis.rdp import compute_rdp

    delta = 1e-5
    orders = np.array([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 257)), dtype=float)
    for sigma, q, steps in ((1.1, 0.01, 1000), (0.8, 0.05, 200), (2.0, 0.004, 5000)):
        led = PrivacyLedger(100.0, delta)
        led.record(sigma, q, steps)
        ours = led.epsilon(accountant="rdp")
        rdp = compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)
        classic = float(np.min(rdp + np.log(1 / delta) / (orders - 1)))
        assert ours == pytest.approx(classic, rel=0.02), (sigma, q, steps, ours, classic)
        acct = OpacusRDP()
        acct.history = [(sigma, q, steps)]
        assert ours >= acct.get_epsilon(delta) * (1 - 1e-3)


def test_a_spent_one_shot_mechanism_keeps_no_noise_generator_state_in_its_checkpoint():
    """After its one release the noise generator is never drawn from again; its state would recompute the noise
    (and so the exact class counts and sums): the checkpoint keeps none, and a restore never replays it."""
    from dpgen.privacy import PrivacyLedger
    from dpgen.privacy.moments import ClassMomentRelease
    from dpgen.privacy.noise import Calibrated

    def mech():
        return ClassMomentRelease(PrivacyLedger(5.0, 1e-5), n_classes=2, radius=1.0, seed=0, noise=Calibrated())

    m = mech()
    assert m.state_dict()["generator"] is not None  # before the release: a resume needs it
    z = torch.full((6, 3), 0.1, dtype=torch.float64)
    m.release(z, torch.arange(6) % 2)
    state = m.state_dict()
    assert state["generator"] is None and state["releases"] == 1
    a, b = mech(), mech()
    a.load_state_dict(state)
    b.load_state_dict(state)
    assert a.releases == 1 and not torch.equal(a.noise((8,), z), b.noise((8,), z))  # fresh secret noise each time
