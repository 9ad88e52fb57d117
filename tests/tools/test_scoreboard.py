"""The scoreboard (dpgen/reproduce/ registry, evidence, render): the committed pages are a render of the store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from dpgen.reproduce import evidence, registry, render
from dpgen.reproduce import store as evidence_store


# ------------------------------------------------------------------ the doc and the store agree
def test_committed_scoreboard_is_a_render_of_the_committed_evidence_store():
    assert render.stale_pages() == [], (
        "docs/reproduction/ and evidence/ disagree: run `make reproduce` (or re-collect the run)")
    for page in render.rendered_pages([]):
        assert render.START in page.read_text() and render.END in page.read_text(), page


def test_editing_a_stored_number_without_rendering_is_caught(tmp_path):
    store = tmp_path / "runs"
    shutil.copytree(evidence_store.STORE, store)
    files = sorted(store.glob("*.json"))
    assert files, "the committed evidence store is empty"
    for f in files:  # every stored number moves by 0.05 (5 points / 0.05 FID): some cell must change
        ev = json.loads(f.read_text())
        ev["metrics"] = {k: v - 0.05 if isinstance(v, float) else v for k, v in ev["metrics"].items()}
        f.write_text(json.dumps(ev))
    assert render.stale_pages(store=store), "a changed number left every page as it was"


def test_each_paper_page_holds_its_own_tables_only():
    stored = evidence_store.load_store()
    sinkhorn = render.render_page("dp-sinkhorn", stored)
    assert "DP-Sinkhorn (Cao et al.), Table 1" in sinkhorn and "DPSWflow (Sebag et al.)" not in sinkhorn
    assert "[r1]" in sinkhorn or "[r1," in sinkhorn  # run ids start at r1 on every page
    assert {r.table for slug in registry.PAGES for r in registry.page_registry(slug)} == {t.id for t in registry.TABLES}


def test_evidence_paths_are_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert evidence.portable_path(tmp_path / "outputs" / "run") == "outputs/run"
    assert evidence.portable_override(f"model.autoencoder_cache={tmp_path}/ae") == "model.autoencoder_cache=ae"
    assert evidence.portable_override("seed=3") == "seed=3"
    assert evidence.portable_path(tmp_path.parent / "elsewhere" / "run") == "run"  # no trace of the machine
    for ev in evidence_store.load_store():
        assert not Path(ev["run_dir"]).is_absolute() and ".." not in Path(ev["run_dir"]).parts, ev["run_dir"]
        assert all("=/" not in o for o in ev["overrides"]), ev["overrides"]


def test_every_stored_run_matches_a_registry_cell():
    for ev in evidence_store.load_store():
        assert evidence.matching_cells(ev) or evidence.matching_claims(ev), (
            f"{ev['run_dir']} matches no cell and no utility claim: remove it or fix the registry / claims")
        assert ev["schema"] == evidence.SCHEMA


# ------------------------------------------------------------------ verdicts
CELL = registry.Cell("toy_method", vary=("model.steps",))
NP_CELL = registry.Cell("toy_method", ("model.private=false",))


def _row(private: bool, explained=None, metrics=None):
    return registry.Row("toy-row", "dpswd-t1", "toy", metrics or (registry.Metric("acc_target", 90.0, "acc", tolerance=3.0),),
                  "spec", private, CELL if private else "—", "—", NP_CELL, explained=explained)


def _ev(acc: float, *overrides: str, seed: int = 0, **metrics) -> dict:
    return {"experiment": "toy_method", "overrides": ["experiment=toy_method", f"seed={seed}", "logger=local",
                                                      *overrides],
            "seed": seed, "config": {}, "metrics": {"acc_target": acc, **metrics}, "privacy": {}, "runtime_s": 1.0}


@pytest.mark.parametrize("acc, status", [(0.875, "reproduced (within tolerance)"), (0.905, "reproduced (within tolerance)"),
                                         (0.869, "open")])
def test_verdict_is_within_or_outside_the_tolerance(acc, status):
    assert render.verdict(_row(True), [_ev(acc)])[0] == status


def test_verdict_uses_the_mean_over_seeds():
    row = _row(True)
    assert render.verdict(row, [_ev(0.87, seed=0), _ev(0.86, seed=1)])[0] == "open"  # mean 86.5 < 90 - 3
    assert render.verdict(row, [_ev(0.89, seed=0), _ev(0.86, seed=1)])[0] == "reproduced (within tolerance)"


def test_an_honest_run_is_named_but_does_not_decide():
    row = registry.Row("toy-row", "dpswd-t1", "toy", (registry.Metric("acc_target", 90.0, "acc"),), "spec", True,
                 registry.Cell("toy_method_paper"), CELL, NP_CELL)
    status, detail = render.verdict(row, [_ev(0.91)])
    assert status == "open" and "honest run is within the tolerance (91.0" in detail
    assert "honest" not in render.verdict(row, [_ev(0.80)])[1]


def test_without_a_paper_recipe_a_rigorous_honest_run_decides():
    row = registry.Row("toy-row", "dpswd-t1", "toy", (registry.Metric("acc_target", 90.0, "acc"),), "spec", True,
                 "the paper's recipe is not implemented", CELL, NP_CELL)
    status, detail = render.verdict(row, [_ev(0.91)])
    assert status == "reproduced (within tolerance)" and detail.startswith("honest (ours): 91.0")
    assert render.verdict(row, [_ev(0.80)])[0] == "open"
    assert render.verdict(row, [_ev(0.95, "model.private=false")])[0] == "open"  # non-private still never counts


def _flow_row(paper: float = 70.0, paper_ref: float = 21.0):
    ref = registry.Cell("toy_method", ("model.private=false",), vary=("model.ae_*", "evaluator.*"))
    return registry.Row("toy-flow", "dpswflow-t1", "toy", (registry._fid(paper, 10.0),), "spec", True,
                  registry.Cell("toy_method", ("privacy.convention=paper",), vary=("model.ae_*", "evaluator.*")), "—", ref,
                  ratio=registry.FidRatio(ref, paper_ref, "toy ε = ∞"))


@pytest.mark.parametrize("fid, status", [(90.0, "reproduced (within tolerance)"),   # 90 / 25 = 3.6 <= 80 / 21
                                         (96.0, "open")])                           # 3.84 > 3.81
def test_a_domain_fid_row_with_a_ratio_is_judged_by_the_ratio_to_its_paired_reference(fid, status):
    row = _flow_row()
    runs = [_ev(0.0, "privacy.convention=paper", "model.ae_steps=1200", fid=fid, fid_extractor="domain"),
            _ev(0.0, "model.private=false", "model.ae_steps=1200", fid=25.0, fid_extractor="domain")]
    got, detail = render.verdict(row, runs)
    assert got == status and "ratio" in detail and f"= {fid / 25:.2f}" in detail


def test_a_fid_ratio_needs_a_reference_with_the_same_autoencoder():
    row = _flow_row()
    runs = [_ev(0.0, "privacy.convention=paper", "model.ae_steps=1200", fid=30.0, fid_extractor="domain"),
            _ev(0.0, "model.private=false", "model.ae_steps=5000", fid=25.0, fid_extractor="domain")]
    status, detail = render.verdict(row, runs)
    assert status == "open" and "no paired run of the ratio's reference" in detail


def test_a_fid_ratio_pairs_fids_of_the_same_sample_size():
    row = _flow_row()
    # a 25-image private FID against a 10,000-image reference would be a ratio of small-sample biases
    runs = [_ev(0.0, "privacy.convention=paper", "evaluator.fid.n_fid=25", fid=300.0, fid_extractor="domain"),
            _ev(0.0, "model.private=false", fid=25.0, fid_extractor="domain")]
    status, detail = render.verdict(row, runs)
    assert status == "open" and "no paired run of the ratio's reference" in detail
    runs.append(_ev(0.0, "model.private=false", "evaluator.fid.n_fid=25", fid=250.0, fid_extractor="domain"))
    status, detail = render.verdict(row, runs)
    assert status == "reproduced (within tolerance)" and "= 1.20" in detail and "n_fid=25` on both sides" in detail


def test_a_ratio_row_is_reproduced_when_any_paired_group_is_within_the_tolerance():
    row = _flow_row()  # allows <= 80 / 21 = 3.81
    runs = [_ev(0.0, "privacy.convention=paper", "evaluator.fid.n_fid=25", fid=500.0, fid_extractor="domain"),
            _ev(0.0, "model.private=false", "evaluator.fid.n_fid=25", fid=100.0, fid_extractor="domain"),  # 5.0
            _ev(0.0, "privacy.convention=paper", fid=90.0, fid_extractor="domain"),
            _ev(0.0, "model.private=false", fid=25.0, fid_extractor="domain")]                               # 3.6
    status, detail = render.verdict(row, runs)
    assert status == "reproduced (within tolerance)" and "= 3.60" in detail
    status, detail = render.verdict(row, runs[:2])
    assert status == "open" and "= 5.00" in detail


def test_a_non_private_run_never_reproduces_a_private_number():
    row = _row(True)
    assert render.verdict(row, [_ev(0.95, "model.private=false")])[0] == "open"
    assert render.verdict(_row(False), [_ev(0.95, "model.private=false")])[0] == "reproduced (within tolerance)"


def test_explained_needs_a_measured_number_and_is_used_only_outside_the_tolerance():
    note = registry.Explained("the layout costs 17 points (75.2 vs 92.2)", "python scripts/x.py")
    row = _row(True, explained=note)
    assert render.verdict(row, [_ev(0.5)])[0] == "explained by measurement"
    assert render.verdict(row, [_ev(0.9)])[0] == "reproduced (within tolerance)"
    with pytest.raises(ValueError, match="measured number"):
        registry.validate_registry((_row(True, explained=registry.Explained("the layout, probably", "python x.py")),), registry.TABLES)


def test_domain_fid_is_shown_but_never_judged():
    metrics = (registry._fid(50.0, 10.0),)
    row = _row(True, metrics=metrics)
    assert render.verdict(row, [_ev(0.0, fid=45.0, fid_extractor="domain")]) == (
        "open", "no comparable measurement (domain-extractor FID: another scale than the paper's Inception FID)")
    assert render.verdict(row, [_ev(0.0, fid=45.0, fid_extractor="inception")])[0] == "reproduced (within tolerance)"
    assert render.verdict(row, [_ev(0.0, fid=61.0, fid_extractor="inception")])[0] == "open"
    assert "not comparable" in render._values(row, [_ev(0.0, fid=45.0, fid_extractor="domain")])


def test_cell_matching_ignores_bookkeeping_and_rejects_other_settings():
    assert evidence.match_reason(CELL, _ev(0.9, "trainer.progress=false", "hydra.run.dir=/x", "model.steps=10")) is None
    assert "not part of this cell" in evidence.match_reason(CELL, _ev(0.9, "model.lr=1"))
    assert evidence.match_reason(NP_CELL, _ev(0.9)).startswith("missing overrides")
    boxed = registry.Cell("toy_method", config=(("dataset.target.layout", "mnist_box"),))
    assert "layout" in evidence.match_reason(boxed, _ev(0.9))


# ------------------------------------------------------------------ collect from a run folder
def _run_folder(path: Path, overrides: list[str], layout: str | None, acc: float, seed: int = 0) -> Path:
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    target = {"layout": layout} if layout else {}
    (path / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "dataset": {"target": target}}))
    (path / "results.json").write_text(json.dumps({
        "experiment": "mnist_usps_swd", "metrics": {"acc_target": acc, "acc_target_class_0": 1.0},
        "privacy": {"epsilon_rdp": "inf", "target_epsilon": None}, "runtime_s": 12.5,
        "train": {"train_steps": 5700}, "overrides": overrides}))
    return path


def test_collect_stores_matching_runs_and_skips_the_rest_with_a_reason(tmp_path):
    ok = _run_folder(tmp_path / "box", ["experiment=mnist_usps_swd", "seed=0", "logger=local"], "mnist_box", 0.93)
    old = _run_folder(tmp_path / "resize", ["experiment=mnist_usps_swd", "seed=0"], None, 0.75)
    smoke = _run_folder(tmp_path / "smoke", ["experiment=mnist_usps_swd", "trainer.max_steps=20"], "mnist_box", 0.3)
    (tmp_path / "queue.log").write_text("a shell glob also passes log files")
    written, skipped = evidence.collect([ok, old, smoke, tmp_path / "missing", tmp_path / "queue.log"],
                                  store=tmp_path / "store", commit="abc123")
    assert [p.name.split("__")[0] for p in written] == ["mnist_usps_swd"]
    ev = json.loads(written[0].read_text())
    assert ev["metrics"] == {"acc_target": 0.93} and ev["steps"] == 5700 and ev["git_commit"] == "abc123"
    assert ev["privacy"]["guarantee"] == "non-private"
    assert ("dpswd-t1-mu-swd", "nonprivate") in evidence.matching_cells(ev)
    assert len(skipped) == 3 and any("layout" in s for s in skipped) and any("max_steps" in s for s in skipped)
    assert any("no results.json" in s for s in skipped)
    table = render.render_tables(evidence_store.load_store(tmp_path / "store"))
    assert "**93.0** — non-private; 5,700 steps; one run, seed 0; 12 s" in table


def test_collect_skips_a_run_stopped_before_the_end(tmp_path):
    rd = _run_folder(tmp_path / "stopped", ["experiment=mnist_usps_swd", "seed=0"], "mnist_box", 0.93)
    res = json.loads((rd / "results.json").read_text())
    (rd / "results.json").write_text(json.dumps({**res, "metrics": {}, "incomplete": {
        "stopped_by": "SIGTERM", "during": "training", "note": "run the same command again"}}))
    written, skipped = evidence.collect([rd], store=tmp_path / "store")
    assert not written and len(skipped) == 1
    assert "incomplete (stopped by SIGTERM during training)" in skipped[0] and "again" in skipped[0]


def test_the_registry_is_valid_and_declares_every_paper_table():
    registry.validate_registry()
    assert {r.table for r in registry.REGISTRY} == {t.id for t in registry.TABLES}


def test_collect_finds_the_runs_below_a_parent_folder(tmp_path):
    _run_folder(tmp_path / "queue" / "a" / "seed0", ["experiment=mnist_usps_swd", "seed=0"], "mnist_box", 0.9)
    _run_folder(tmp_path / "queue" / "b" / "seed1", ["experiment=mnist_usps_swd"], "mnist_box", 0.8, seed=1)
    written, skipped = evidence.collect([tmp_path / "queue"], store=tmp_path / "store")
    assert len(written) == 2 and not skipped
    table = render.render_tables(evidence_store.load_store(tmp_path / "store"))
    assert "**85.0 ± 7.1** — non-private; 5,700 steps; 2 runs, seeds 0, 1; 12 s + 12 s" in table


def test_a_paper_convention_run_shows_its_label_and_every_epsilon_it_states(tmp_path):
    rd = _run_folder(tmp_path / "paper", ["experiment=mnist_usps_dpswd_paper", "seed=0"], "mnist_box", 0.94)
    res = json.loads((rd / "results.json").read_text())
    res["experiment"] = "mnist_usps_dpswd_paper"
    res["privacy"] = {"guarantee": "paper convention — not (ε, δ)-DP at the stated ε", "epsilon_rdp": 10.0,
                      "epsilon_pld": 8.1, "epsilon_real_sensitivity": 412.0, "target_epsilon": 10.0,
                      "epsilon_true": "inf", "epsilon_true_rdp": "inf", "convention": "paper"}
    (rd / "results.json").write_text(json.dumps(res))
    written, _ = evidence.collect([rd], store=tmp_path / "store")
    ev = json.loads(written[0].read_text())
    text = render._privacy(ev)
    assert "paper convention" in text and "412.00 (real sensitivity)" in text and "∞ (true)" in text
    assert "true rdp" not in text and ev["privacy"]["convention"] == "paper"
    row = next(r for r in registry.REGISTRY if r.id == "dpswd-t1-mu-dpswd")
    assert render.verdict(row, [ev])[0] == "reproduced (within tolerance)"
