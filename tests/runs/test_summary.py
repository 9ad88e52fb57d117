"""Run summary: privacy | utility | provenance groups, guarantee label beside ε."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from dpgen.logging.summary import (
    LABELS,
    group_results,
    guarantee_label,
    metric_family,
    print_summary,
)

PRIVATE = {"experiment": "digits_dpswd", "dataset": "digits", "n_private": 1347, "device": "cpu",
           "metrics": {"acc_logreg": 0.21, "acc_mlp": 0.18, "fid": 219.8, "fid_extractor": "domain",
                       "fid_n_generated": 2000, "fid_n_reference": 225, "eval_time_s": 41.0,
                       "fid_extractor_cache": "/cache/x.pt", "fid_extractor_accuracy": 0.92},
           "privacy": {"epsilon": 8.28, "calibrating_accountant": "pld", "epsilon_rdp": 9.99, "epsilon_pld": 8.28,
                       "target_epsilon": 10.0, "delta": 1e-4, "private_steps": 8600, "sampling": "poisson"},
           "train": {"guarantee": "rigorous", "noise_std": 3.1, "train_steps": 8600}, "runtime_s": 88.0,
           "overrides": ["logger=local"]}
NON_PRIVATE = {"experiment": "mnist_swd", "metrics": {"acc_logreg": 0.8},
               "privacy": {"epsilon_rdp": "inf", "epsilon_pld": None, "target_epsilon": None, "delta": 1e-5},
               "train": {"guarantee": "none (non-private)"}, "runtime_s": 5.0}


@pytest.mark.parametrize("raw,label", [
    ("rigorous", LABELS["rigorous"]), ("rigorous (RDP/PLD)", LABELS["rigorous"]),
    ("asymptotic CLT bound: NOT a rigorous DP guarantee", LABELS["clt"]),
    ("none (non-private)", LABELS["none"]), ("paper convention (published delta split)", LABELS["paper"]),
])
def test_guarantee_label_from_the_methods_train_field(raw, label):
    assert guarantee_label({"privacy": {"epsilon_rdp": 1.0}, "train": {"guarantee": raw}}) == label


def test_guarantee_label_prefers_the_privacy_block_and_defaults_non_private_for_infinite_epsilon():
    res = {"privacy": {"guarantee": "paper convention", "epsilon_rdp": 1.0}, "train": {"guarantee": "rigorous"}}
    assert guarantee_label(res) == LABELS["paper"]
    assert guarantee_label({"privacy": {"epsilon_rdp": "inf", "target_epsilon": None}}) == LABELS["none"]


def test_groups_separate_utility_from_provenance():
    g = group_results(PRIVATE)
    assert set(g["utility"]) == {"acc_logreg", "acc_mlp", "fid"}
    assert {"fid_extractor", "fid_n_generated", "fid_extractor_cache", "eval_time_s", "fid_extractor_accuracy",
            "train_steps"} <= set(g["provenance"])
    assert "runtime_s" not in g["provenance"]  # wall-clock time: private (private_timings.json)
    assert g["privacy"]["guarantee"] == "rigorous" and g["privacy"]["target_epsilon"] == 10.0
    assert metric_family("acc_target") == "target accuracy (DA)" and metric_family("swd_to_test") == \
        "sliced Wasserstein" and metric_family("test_accuracy") == "accuracy" and metric_family("n_test") is None


def _printed(results) -> str:
    buf = io.StringIO()
    print_summary(results, Console(file=buf, width=200))
    return buf.getvalue()


def test_console_table_shows_the_label_beside_epsilon_in_three_groups():
    out = _printed(PRIVATE)
    line = next(ln for ln in out.splitlines() if "epsilon spent" in ln)  # one ε: the calibrating accountant's
    assert "PLD: calibrates and stops" in line and "8.2800" in line and "(rigorous)" in line
    other = next(ln for ln in out.splitlines() if "9.9900" in ln)
    assert "RDP, another accountant" in other and "not the run's ε" in other
    assert sum("8.2800" in ln for ln in out.splitlines()) == 1  # no second PLD row
    assert "private_timings.json" in out and "88" not in out  # the run time is private: never printed
    for group in ("privacy", "utility", "provenance"):
        assert group in out
    assert "target epsilon" in out and "acc_logreg" in out


def test_non_private_run_prints_no_target_epsilon_none():
    out = _printed(NON_PRIVATE)
    line = next(ln for ln in out.splitlines() if "epsilon spent" in ln)
    assert "∞" in line and "non-private" in line
    assert "target epsilon" not in out and "None" not in out


def test_reported_only_accountants_are_marked_as_not_a_guarantee():
    res = {**PRIVATE, "privacy": {**PRIVATE["privacy"], "epsilon_wa": 0.3, "reported_accountants": {"wa": "WDP"},
                                  "reported_accountants_note": "reported for comparison only"}}
    assert group_results(res)["privacy"]["epsilon_wa_reported_only"] == 0.3
    line = next(ln for ln in _printed(res).splitlines() if "WA, reported only" in ln)
    assert "0.3000" in line and "not a DP guarantee" in line


def test_data_dependent_reports_make_the_guarantee_not_dp():
    res = {**PRIVATE, "privacy": {**PRIVATE["privacy"], "guarantee": "rigorous", "data_dependent_reports": True}}
    assert guarantee_label(res) == LABELS["data_dependent"] == "not DP: data-dependent reports"


def test_the_title_prints_a_list_override_as_typed():
    out = _printed({**PRIVATE, "overrides": ["evaluator.classifiers=[logreg]", "logger=local"]})
    assert "evaluator.classifiers=[logreg]" in out and "classifiers=," not in out


def test_a_warm_started_run_shows_each_phase_epsilon_and_noise():
    phases = [{"mechanism": "class_moments", "releases": 1, "noise_multiplier": 0.7959, "epsilon": 5.0},
              {"mechanism": "gaussian_projection", "releases": 20, "noise_multiplier": 1.7673, "epsilon": 0.7557}]
    res = {**PRIVATE, "privacy": {**PRIVATE["privacy"], "by_mechanism": phases},
           "train": {**PRIVATE["train"], "warm_start": {"epsilon_share": 0.5}}}
    assert group_results(res)["privacy"]["by_mechanism"] == phases
    out = _printed(res).splitlines()
    one = next(ln for ln in out if "phase 1 (warm start): class_moments" in ln)
    two = next(ln for ln in out if "phase 2: gaussian_projection" in ln)
    assert "ε 5.0000 alone (PLD)" in one and "noise multiplier 0.7959" in one and "1 release" in one
    assert "ε 0.7557 alone (PLD)" in two and "noise multiplier 1.7673" in two and "20 releases" in two
