"""Accountants and calibration (DP-SWD paper, σ calibration)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpgen.privacy import (
    PLDAccountant,
    RDPAccountant,
    Release,
    calibrate,
    dpswd_noise,
)
from dpgen.privacy.accountants import analytic_gaussian_epsilon, make_accountant
from dpgen.privacy.calibration import largest_steps_within
from dpgen.privacy.dpswd import dpswd_epsilon

# Table 4 (eps = 10): name, delta, d, k, N, epochs, B, sigma (paper), bound
TABLE4 = [
    ("U-M", 1e-5, 784, 200, 10000, 100, 128, 4.74, "bernstein_code"),
    ("M-U", 1e-5, 784, 200, 7438, 100, 128, 5.34, "bernstein_code"),
    ("VisDA", 1e-6, 100, 1000, 55387, 50, 128, 6.40, "bernstein_code"),
    ("Office", 1e-3, 50, 100, 497, 50, 32, 8.05, "bernstein_code"),
    ("MNIST-b", 1e-5, 784, 1000, 60000, 100, 100, 2.94, "bernstein_code"),
    ("MNIST-c", 1e-5, 784, 1000, 60000, 100, 100, 0.84, "clt"),
    ("CelebA-b", 1e-6, 8192, 2000, 162770, 100, 256, 2.392, "bernstein_code"),
    ("CelebA-c", 1e-6, 8192, 2000, 162770, 100, 256, 0.37, "clt"),
]


def _paper_steps(n: int, b: int, epochs: int) -> int:
    return (n // b + 1) * epochs  # what da_dp_analysis.py composes


@pytest.mark.parametrize("row", TABLE4, ids=[r[0] for r in TABLE4])
def test_calibrated_sigma_reproduces_table4_with_paper_preset(row):
    name, delta, d, k, n, epochs, b, sigma_paper, bound = row
    noise = dpswd_noise(10.0, delta, d=d, k=k, sample_rate=b / n, steps=_paper_steps(n, b, epochs),
                            bound=bound, sampling="without_replacement", delta_split="published")
    assert noise.noise_std == pytest.approx(sigma_paper, rel=0.02)


# 2023 "correction of noise level" commit (delta/2 for the bound + delta/2 for the conversion)
CORRECTED = [("U-M", 10000, 4.80, 0.915), ("M-U", 7468, 5.43, 1.035)]


@pytest.mark.parametrize("name,n,s_bern,s_clt", CORRECTED, ids=[c[0] for c in CORRECTED])
def test_prop2_split_reproduces_2023_corrected_sigmas(name, n, s_bern, s_clt):
    for bound, target in (("bernstein_code", s_bern), ("clt", s_clt)):
        noise = dpswd_noise(10.0, 1e-5, d=784, k=200, sample_rate=128 / n, steps=_paper_steps(n, 128, 100),
                                bound=bound, sampling="without_replacement", delta_split="prop2")
        assert noise.noise_std == pytest.approx(target, rel=0.01)


@settings(max_examples=12, deadline=None)
@given(eps=st.floats(0.3, 20.0), q=st.floats(0.001, 0.2), steps=st.integers(1, 3000),
       scheme=st.sampled_from([("poisson", "rdp"), ("poisson", "pld"), ("without_replacement", "rdp")]))
def test_calibration_never_exceeds_target_epsilon(eps, q, steps, scheme):
    sampling, name = scheme
    acct = make_accountant(name, sampling)
    sigma = calibrate(eps, 1e-5, q, steps, sampling, accountant=name)
    assert acct.epsilon_of([Release(sigma, q, steps)], 1e-5) <= eps
    # and it is tight: 0.5 % less noise would exceed the target (the search stops within 0.1 %)
    assert acct.epsilon_of([Release(sigma * 0.995, q, steps)], 1e-5) > eps


def test_auto_calibrates_with_pld_for_poisson_and_rdp_without_replacement():
    q, steps = 0.01, 2000
    assert calibrate(5.0, 1e-5, q, steps, "poisson") == calibrate(5.0, 1e-5, q, steps, "poisson", accountant="pld")
    assert calibrate(5.0, 1e-5, q, steps, "without_replacement") == \
        calibrate(5.0, 1e-5, q, steps, "without_replacement", accountant="rdp")
    with pytest.raises(ValueError, match="PLD accountant needs Poisson sampling"):
        calibrate(5.0, 1e-5, q, steps, "without_replacement", accountant="pld")


@settings(max_examples=300, deadline=None)
@given(p=st.floats(0.3, 8.0), c=st.floats(1e-3, 1e3), target=st.floats(0.01, 100.0),
       kink=st.floats(0.05, 20.0), guess=st.one_of(st.none(), st.floats(1e-3, 1e3)),
       rel_tol=st.sampled_from([1e-3, 1e-2]))
def test_root_search_never_returns_a_sigma_above_target(p, c, target, kink, guess, rel_tol):
    """Pure property of the search on monotone curves (a power law with a kink and a flat infinite
    part below sigma = 1e-3): the result is within budget and within rel_tol of the true root."""
    def eps(sig):
        if sig < 1e-3:
            return math.inf
        return c * sig ** -p * (1.0 if sig > kink else (kink / sig) ** 0.5)

    if eps(1e6) > target:  # unreachable: a clear error instead
        with pytest.raises(ValueError, match="cannot be reached"):
            calibrate(target, 1e-5, accountant=eps, sigma_max=1e6)
        return
    sig = calibrate(target, 1e-5, accountant=eps, rel_tol=rel_tol, sigma_max=1e6, sigma_guess=guess)
    assert eps(sig) <= target
    # the true root sits in [sig / (1 + 2 rel_tol), sig]: slightly less noise is above the target
    assert eps(sig / (1 + 2 * rel_tol)) > target or sig <= 1e-3 * (1 + 2 * rel_tol)


@settings(max_examples=300, deadline=None)
@given(root=st.integers(0, 10**7), p=st.floats(0.2, 3.0), guess=st.integers(1, 10**7))
def test_integer_step_search_finds_the_last_step_within_budget(root, p, guess):
    target = 1.0

    def eps(s):
        return ((s + 0.5) / (root + 1)) ** p  # <= 1 exactly for s <= root

    assert largest_steps_within(eps, target, guess=guess) == root


def test_dpswd_forward_epsilon_matches_calibration_target():
    kw = dict(d=794, k=1000, sample_rate=100 / 60000, steps=60000, bound="bernstein")
    noise = dpswd_noise(5.0, 1e-5, **kw)
    assert dpswd_epsilon(noise.noise_std, 1e-5, **kw) <= 5.0
    assert noise.delta_sensitivity_per_step * 60000 + noise.delta_conversion == pytest.approx(1e-5)


@pytest.mark.parametrize("sigma,q,steps", [(1.0, 0.01, 1000), (0.8, 0.004, 5000), (2.0, 0.05, 200)])
def test_rdp_epsilon_is_at_least_pld_epsilon(sigma, q, steps):
    hist = [Release(sigma, q, steps)]
    eps_rdp = RDPAccountant("poisson").epsilon_of(hist, 1e-5)
    eps_pld = PLDAccountant("poisson").epsilon_of(hist, 1e-5)
    assert 0 < eps_pld <= eps_rdp


def test_epsilon_grows_with_steps_and_shrinks_with_noise():
    acct = RDPAccountant("poisson")
    e = lambda s, t: acct.epsilon_of([Release(s, 0.01, t)], 1e-5)  # noqa: E731
    assert e(1.0, 100) < e(1.0, 1000) < e(1.0, 10000)
    assert e(2.0, 1000) < e(1.0, 1000) < e(0.7, 1000)


def test_accountant_spend_merges_and_answers_epsilon():
    acct = RDPAccountant("poisson")
    acct.spend(1.0, 0.01, 10)
    acct.spend(1.0, 0.01, 5)
    assert acct.history == [Release(1.0, 0.01, 15)]
    assert acct.epsilon(1e-5) == pytest.approx(acct.epsilon_of([Release(1.0, 0.01, 15)], 1e-5))


def test_pld_accountant_refuses_sampling_without_replacement():
    with pytest.raises(ValueError, match="Poisson"):
        PLDAccountant("without_replacement")


def test_zero_noise_has_infinite_epsilon():
    assert RDPAccountant().epsilon_of([Release(0.0, 0.1, 1)], 1e-5) == float("inf")


def test_unknown_sampling_scheme_is_rejected():
    with pytest.raises(ValueError, match="sampling"):
        RDPAccountant("shuffle")


def test_unreachable_target_raises_clear_error():
    with pytest.raises(ValueError, match="cannot be reached"):
        calibrate(1e-4, 1e-5, 1.0, 10**6, accountant="rdp", sigma_max=10.0)


def test_one_gaussian_calibrations_are_exact_or_the_classic_formula_and_refuse_a_subsampled_run():
    sig = calibrate(1.0, 1e-5, accountant="analytic", rel_tol=1e-6)
    assert analytic_gaussian_epsilon(sig, 1e-5) <= 1.0 < analytic_gaussian_epsilon(sig * (1 - 2e-6), 1e-5)
    assert calibrate(0.5, 1e-5, accountant="classic") == pytest.approx(math.sqrt(2 * math.log(1.25e5)) / 0.5)
    assert calibrate(1.0, 1e-5, accountant="analytic") < calibrate(1.0, 1e-5, accountant="classic")
    for name in ("analytic", "classic"):
        with pytest.raises(ValueError, match="one Gaussian release"):
            calibrate(1.0, 1e-5, 0.01, 100, accountant=name)


@pytest.mark.parametrize("sampling,name", [("poisson", "pld"), ("without_replacement", "rdp")])
@pytest.mark.parametrize("eps,delta", [(10.0, 1e-4), (1.0, 1e-5), (0.2, 1e-6)])
def test_one_release_calibration_starts_at_the_exact_multiplier(monkeypatch, sampling, name, eps, delta):
    """One un-subsampled release (the class-Gaussian default): the search starts at the exact Gaussian
    multiplier, a lower bound on every accountant's, and a multiplier whose exact epsilon is above the target is
    above it for the accountant too: PLD accepts the exact multiplier at these sizes and needs ONE evaluation
    (5-6 from sigma = 1); the answer is still the accountant's own: within the target, and 0.5 % less noise
    exceeds it."""
    import dpgen.privacy.accountants as accountants

    acct = make_accountant(name, sampling)
    calls = []
    original = type(acct)._epsilon
    monkeypatch.setattr(type(acct), "_epsilon", lambda self, h, d: calls.append(h) or original(self, h, d))
    monkeypatch.setattr(accountants, "_EPS_CACHE", type(accountants._EPS_CACHE)())
    sigma = calibrate(eps, delta, 1.0, 1, sampling, accountant=name)
    assert sigma >= calibrate(eps, delta, accountant="analytic") / (1 + 1e-3)
    if name == "pld":
        assert len(calls) == 1
    assert acct.epsilon_of([Release(sigma, 1.0, 1)], delta) <= eps < acct.epsilon_of([Release(sigma * 0.995, 1.0, 1)], delta)


def test_the_accountants_print_nothing_of_autodps_source_when_it_is_compiled_afresh(tmp_path):
    """autodp's source compares with ``is 0``: Python warns (SyntaxWarning, 4 lines) each time it compiles it, which
    is every run under PYTHONDONTWRITEBYTECODE=1 (an empty bytecode cache here forces the compilation)."""
    import os
    import subprocess
    import sys

    code = ("from dpgen.privacy.accountants import RDPAccountant, Release, analytic_gaussian_epsilon\n"
            "print(RDPAccountant('poisson').epsilon_of([Release(1.0, 0.01, 100)], 1e-5), "
            "analytic_gaussian_epsilon(1.0, 1e-5))")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(tmp_path), "PYTHONWARNINGS": ""}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "SyntaxWarning" not in r.stderr, r.stderr
