"""dpgen's own utility numbers are re-measured whenever a default they depend on changes
(dpgen/reproduce/claims.py): a stored run's recorded configuration must equal what its preset composes now,
and the pages print what the stored runs give."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dpgen.reproduce.claims import CLAIMS, Claim, config_drift, text
from dpgen.reproduce.evidence import _flatten, match_reason
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
