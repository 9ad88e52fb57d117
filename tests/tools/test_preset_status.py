"""The presets guide states what has been run of each preset, from the recorded runs, and nothing else."""

from __future__ import annotations

from dpgen import preset_runs
from dpgen.presets import presets
from tests.e2e.test_presets_e2e import SLOW

GUIDE, BEGIN, END = preset_runs.GUIDE, preset_runs.BEGIN, preset_runs.END


def test_every_preset_has_its_fast_suite_smoke_run_recorded_and_no_other():
    runs = preset_runs.load()["runs"]
    assert not set(runs) - set(presets()), f"records for presets that do not exist: {sorted(set(runs) - set(presets()))}"
    smoke = {p for p, r in runs.items() if (r or {}).get("smoke")}
    assert smoke == set(presets()) - SLOW, f"smoke records differ from the fast suite: {sorted(smoke ^ (set(presets()) - SLOW))}"


def test_the_guide_shows_the_table_generated_from_the_records():
    text = GUIDE.read_text()
    assert BEGIN in text and END in text, f"{GUIDE.name} lost its status table markers"
    table = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"
    assert table == preset_runs.markdown(presets(), preset_runs.load()), (
        "docs/guides/presets.md is out of date: run `dpgen presets status --write`")


def test_a_preset_without_records_reads_not_run():
    md = preset_runs.markdown(["a", "b"], {"runs": {"a": {"smoke": {"data": "fixture", "cpu_s": 1.25}}}}, evidence={})
    assert "| `a` | fixture, 1.2 s CPU | not run | not run |" in md
    assert "| `b` | not run | not run | not run |" in md and "Fast suite: 1 of 2 presets" in md


def test_evidence_runs_are_full_or_shortened_by_their_schedule_overrides():
    store = [{"experiment": "mnist_x", "overrides": ["experiment=mnist_x", "seed=0"], "runtime_s": 60.0},
             {"experiment": "mnist_x", "overrides": ["experiment=mnist_x", "seed=1"], "runtime_s": 180.0},
             {"experiment": "mnist_x", "overrides": ["experiment=mnist_x", "model.epochs=2"], "runtime_s": 30.0}]
    ev = preset_runs.evidence_runs(store)
    assert ev["mnist_x"]["full"]["wall_s"] == 180.0 and "2 runs" in ev["mnist_x"]["full"]["note"]
    assert ev["mnist_x"]["shortened"]["wall_s"] == 30.0
    md = preset_runs.markdown(["mnist_x"], {"runs": {}}, evidence=ev)
    assert "| `mnist_x` | not run | real, 30 s wall; 1 run in the reproduction evidence | real, 3.0 min wall;" in md


def test_a_run_of_a_preset_on_another_dataset_is_not_counted_as_a_run_of_it():
    store = [{"experiment": "mnist_x", "overrides": ["experiment=mnist_x"], "runtime_s": 60.0},
             {"experiment": "mnist_x", "overrides": ["experiment=mnist_x", "dataset=fashion_mnist"], "runtime_s": 9.0}]
    assert preset_runs.evidence_runs(store)["mnist_x"]["full"]["note"] == "1 run in the reproduction evidence"


def test_status_write_puts_the_generated_table_between_the_guides_markers(tmp_path, monkeypatch, capsys):
    from dpgen.presets import main

    page = tmp_path / "presets.md"
    page.write_text(f"# Presets\n\n{BEGIN}\nan old table\n{END}\n\nafter\n")
    monkeypatch.setattr(preset_runs, "GUIDE", page)
    assert main(["status", "--write"]) == 0
    text = page.read_text()
    assert "an old table" not in text and text.endswith(f"{END}\n\nafter\n")
    assert text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n" == capsys.readouterr().out


def test_a_preset_the_docs_quote_a_measured_accuracy_for_has_a_recorded_run():
    """configs.md's preset table gives some presets a measured accuracy ("LogReg 77.6 ± 0.3 % over 3 runs"): the
    status table must not call them "not run"."""
    import re

    from dpgen.paths import DOCS

    status = {r[0].strip("`"): r[2:] for r in preset_runs.rows(presets(), preset_runs.load())}
    quoted = []
    for line in (DOCS / "guides" / "configs.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        name = cells[0].strip("`") if cells else ""
        if name in status and re.search(r"(LogReg|accuracy)[^|]*\d %", line):
            quoted.append(name)
    assert quoted, "the configs guide's preset table was not read"
    unrun = [p for p in quoted if all(c == preset_runs.NOT_RUN for c in status[p])]
    assert not unrun, f"docs quote a measured accuracy of {unrun} but `dpgen presets status` says not run"
