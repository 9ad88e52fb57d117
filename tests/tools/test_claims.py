"""dpgen's own utility numbers are re-measured whenever a default they depend on changes
(dpgen/reproduce/claims.py): a stored run's recorded configuration must equal what its preset composes now,
and the pages print what the stored runs give."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dpgen.reproduce.claims import (
    CLAIMS,
    COMPARISONS,
    Claim,
    Comparison,
    Result,
    check_text,
    compare,
    config_drift,
    device_kind,
    paired,
    region,
    summary,
    text,
    welch,
)
from dpgen.reproduce.evidence import _flatten, claim_runs, match_reason
from dpgen.reproduce.store import load_store, neutral
from tests.helpers.configs import compose_cfg

ROOT = Path(__file__).resolve().parents[2]


def composed(claim: Claim) -> dict:
    """The configuration the claim's command composes now, as the evidence store records it."""
    cfg = compose_cfg([f"experiment={claim.cell.experiment}", *claim.cell.overrides])
    flat = _flatten(OmegaConf.to_container(cfg, resolve=False))
    return {k: v for k, v in flat.items() if not neutral(k) and isinstance(v, (str, int, float, bool, type(None)))}


@pytest.fixture(scope="module")
def store():
    return load_store()


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.id)
def test_a_claims_runs_were_measured_with_the_presets_current_configuration(claim, store):
    runs = [ev for ev in store if match_reason(claim.cell, ev) is None]
    assert len(runs) >= claim.min_runs, (f"{claim.id}: {len(runs)} stored run(s), {claim.min_runs} needed: run "
                                         f"`{claim.cell.command()} seed=<k>` and `dpgen reproduce collect <run folder>`")
    now = composed(claim)
    for ev in runs:
        drift = config_drift(claim, ev["config"], now)
        assert not drift, (f"{claim.id}: the run of seed {ev['seed']} was measured with another configuration than "
                           f"{claim.cell.experiment} composes now ({drift}); re-measure the number and re-collect it")


@pytest.mark.parametrize("claim", [c for c in CLAIMS if c.docs], ids=lambda c: c.id)
def test_the_pages_print_what_the_stored_runs_give(claim, store):
    number = text([ev for ev in store if match_reason(claim.cell, ev) is None], claim.metric)
    for page in claim.docs:
        assert number in (ROOT / page).read_text(), f"{page} does not state {claim.id} as {number}"


def test_a_warm_preset_trains_the_command_its_claim_measured():
    """A ``*_warm`` preset stands for stored runs of another preset's command: it must compose the same training."""
    presets = {p.stem for p in (ROOT / "configs" / "experiment").glob("*_warm.yaml")}
    claimed = {c.preset: c for c in CLAIMS if c.preset}
    assert presets == set(claimed), "every *_warm preset is named by the claim whose runs measured it"
    for preset, claim in claimed.items():
        cell = compose_cfg([f"experiment={claim.cell.experiment}", *claim.cell.overrides])
        own = compose_cfg([f"experiment={preset}"])
        a, b = ({k: v for k, v in _flatten(OmegaConf.to_container(c, resolve=False)).items()
                 if not k.startswith("evaluator.") and k != "experiment_name"} for c in (cell, own))
        assert a == b, f"{preset} differs from {claim.id}'s command: {set(a.items()) ^ set(b.items())}"


def test_a_changed_default_is_caught():
    """The check can fail: a recorded run of the old estimator against the preset as it composes now."""
    claim = CLAIMS[0]
    now = composed(claim)
    old = {**now, "model.shrinkage": "pooled_prior"}
    assert config_drift(claim, old, now) == {"model.shrinkage": ("pooled_prior", now["model.shrinkage"])}
    assert now["model.shrinkage"] == "auto"
    assert config_drift(claim, now, {**now, "model.new_setting": 1}) == {"model.new_setting": ("<absent>", 1)}
    assert config_drift(claim, now, {**now, "model.new_off_setting": None}) == {}
    assert config_drift(claim, now, {**now, "trainer.new_switch": "off"}) == {}  # a new switch, off by default
    assert config_drift(claim, now, {**now, "trainer.new_switch": "on"}) == {"trainer.new_switch": ("<absent>", "on")}
    # where a fit runs is not what it computes: a run recorded before evaluator.workers existed still counts
    assert "evaluator.workers" not in now and config_drift(claim, now, {**now, "evaluator.workers": 2}) == {}
    assert config_drift(claim, now, {**now, "evaluator.n_synthetic": 60000}) == {
        "evaluator.n_synthetic": (now["evaluator.n_synthetic"], 60000)}


# ------------------------------------------------------------------ comparisons ("A beats B", "no measurable gain")
@pytest.mark.parametrize("cmp", COMPARISONS, ids=lambda c: c.id)
def test_a_comparison_says_no_more_than_the_test_over_every_stored_run(cmp, store):
    result = compare(cmp, claim_runs(store))
    for page in cmp.docs:
        problems = check_text(region((ROOT / page).read_text(), cmp.id), result)
        assert not problems, f"{page}, {cmp.id}: " + "; ".join(problems)


# the README's Fashion-MNIST sentence before the comparison was recomputed from every stored run
OLD_FMNIST_SENTENCE = (
    "On Fashion-MNIST at ε = 10, `fmnist_dpswd_warm` (share 0.75) reaches 77.6 ± 0.3 % against the\n"
    "class-Gaussian's 76.4 ± 0.1 % (3 fresh runs; its warm-ups continued by their OT steps gave 76.6 ± 0.8 %, a gap\n"
    "not yet explained)")


def test_the_old_fashion_mnist_sentence_fails_the_check(store):
    cmp = COMPARISONS[0]
    assert cmp.a == "fmnist-dpswd-warm75-fit2000-lr1e-4-eps10-cnn" and cmp.metric == "acc_logreg"
    page = f"<!-- compare:{cmp.id} -->{OLD_FMNIST_SENTENCE}<!-- /compare -->"
    problems = check_text(region(page, cmp.id), compare(cmp, claim_runs(store)))
    assert problems and "does not print the test over every stored run" in problems[0]


def _result(p: float, diff: float) -> Result:
    cmp = Comparison("x", "a", "b")
    return Result(cmp, [77.0, 77.5, 76.5], [76.0, 76.5, 75.5], "Welch t-test", p, diff, 0)


def test_words_beyond_the_test_are_caught():
    weak, strong = _result(0.2, 1.0), _result(0.01, 1.0)
    said = f"the warm start beats the class-Gaussian: {summary(weak)}"
    assert any("'beats'" in m for m in check_text(said, weak))  # a direction the test does not give
    assert check_text(f"the warm start beats the class-Gaussian: {summary(strong)}", strong) == []
    assert any("adds nothing" in m for m in check_text(f"the OT phase adds nothing: {summary(weak)}", weak))
    assert check_text(f"no measurable gain: {summary(weak)}", weak) == []
    assert check_text(None, weak) and check_text("LogReg 77.0 vs 76.0 %", weak)  # no region; no test printed
    assert "no significant difference" in summary(weak) and "significant at the 5 % level" in summary(strong)


def test_the_tests_match_scipy():
    from scipy import stats

    a, b = [77.3, 77.6, 77.8, 76.1, 76.9], [76.4, 76.5, 76.4, 77.4, 76.8, 76.2]
    assert welch(a, b)[1] == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-9)
    c = [76.5, 77.1, 76.2, 75.9, 77.0]
    assert paired(a, c)[1] == pytest.approx(stats.ttest_rel(a, c).pvalue, rel=1e-9)


def test_runs_on_another_device_are_not_pooled_and_pairs_match_by_seed():
    claim_a, claim_b = (next(c for c in CLAIMS if c.id == i) for i in ("mnist-moments", "mnist-moments-eps5"))

    def run(claim, seed, acc, device=None):
        overrides = [f"experiment={claim.cell.experiment}", *claim.cell.overrides, f"seed={seed}"]
        return {"overrides": overrides, "seed": seed, "config": {}, "metrics": {"acc_logreg": acc},
                **({"device": device} if device else {})}

    store = [run(claim_a, s, 0.80 + 0.01 * s, "cpu") for s in range(3)] + [run(claim_a, 9, 0.99, "cuda")]
    store += [run(claim_b, s, 0.79 + 0.01 * s, "cpu") for s in (2, 1, 0)] + [run(claim_b, 5, 0.5)]
    assert [device_kind(e) for e in store[3:4] + store[-1:]] == ["cuda", "not recorded"]
    runs_of = claim_runs(store)
    welch_result = compare(Comparison("w", claim_a.id, claim_b.id), runs_of)
    assert welch_result.excluded == 2 and len(welch_result.a) == len(welch_result.b) == 3
    pair = compare(Comparison("p", claim_a.id, claim_b.id, design="paired"), runs_of)
    assert pair.diff == pytest.approx(1.0) and pair.p == 0.0  # +1 point on every seed, matched by seed
    with pytest.raises(ValueError, match="6 a side needed"):
        compare(Comparison("w6", claim_a.id, claim_b.id, min_runs=6), runs_of)
