"""scripts/warm_start_table.py: the warm-start grid of the warm-start note is read from the evidence store."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from dpgen.reproduce.claims import CLAIMS
from dpgen.reproduce.markers import between
from dpgen.reproduce.store import load_store
from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "warm_start_table.py"
_spec = importlib.util.spec_from_file_location("warm_start_table", SCRIPT)
wst = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = wst  # its dataclass looks its module up there
_spec.loader.exec_module(wst)


def _run(claim_id: str, seed: int, metrics: dict, eps: float = 10.0) -> dict:
    cell = next(c for c in CLAIMS if c.id == claim_id).cell
    return {"experiment": cell.experiment, "seed": seed,
            "overrides": [f"experiment={cell.experiment}", *cell.overrides, f"seed={seed}"],
            "metrics": metrics, "privacy": {"epsilon_pld": eps}}


def test_every_row_names_a_claim():
    ids = {c.id for c in CLAIMS}
    for _, rows in wst.SECTIONS:
        for row in rows:
            assert row.claim in ids and (row.cnn is None or row.cnn in ids), row


def test_a_cell_is_the_mean_and_std_of_its_claims_runs_and_a_missing_claim_is_not_run():
    store = [_run("mnist-moments", 0, {"acc_logreg": 0.86, "acc_mlp": 0.87}),
             _run("mnist-moments", 1, {"acc_logreg": 0.88, "acc_mlp": 0.89}, eps=9.99),
             _run("mnist-moments-cnn", 0, {"acc_logreg": 0.5, "acc_cnn": 0.93}),
             _run("mnist-dpswd-ot-short", 2, {"acc_logreg": 0.69}),
             _run("mnist-moments", 2, {"acc_logreg": 0.10}) | {"overrides": ["experiment=mnist_moments", "seed=2"]}]
    rows = wst.table(store).splitlines()
    moments = next(r for r in rows if r.startswith("| w1 | (a) class-Gaussian alone | "))
    assert moments == "| w1 | (a) class-Gaussian alone | 2 (0, 1) | 10.00 | 87.0 ± 1.4 % | 88.0 ± 1.4 % | 93.0 % (1 run) |"
    assert "| w2 | (b) DP-SWD generator, OT alone (1 epoch) | 1 (2) | 10.00 | 69.0 % | — | — |" in rows
    assert "| w3 | (c) DP-SWD generator, warm-up + OT, share 0.25 | not run | | | | |" in rows


def test_the_page_shows_the_grid_of_the_stored_runs(tmp_path):
    assert between(wst.NOTE.read_text(), wst.BEGIN, wst.END) == wst.table(load_store()), \
        "the warm-start note: run `python scripts/warm_start_table.py`"
    doc = tmp_path / "page.md"
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        wst.write_block(doc, "x")


def test_a_cell_says_how_many_of_its_runs_ran_on_a_gpu():
    runs = [_run("mnist-moments", 0, {"acc_logreg": 0.86}) | {"device": "cuda"},
            _run("mnist-moments", 1, {"acc_logreg": 0.88}) | {"device": "cpu"},
            _run("mnist-moments", 2, {"acc_logreg": 0.87})]
    assert wst.on_gpu(runs) == "; 1 on a GPU" and wst.on_gpu(runs[:1]) == "; all on a GPU"
    assert wst.on_gpu(runs[1:]) == ""
    assert wst.cell(runs[:1], "acc_logreg", count=True) == "86.0 % (1 run; all on a GPU)"


def test_each_rows_command_is_listed_under_the_grid_on_short_lines():
    from dpgen.reproduce.markers import wrapped_command

    block = wst.table([])
    command = next(c for c in CLAIMS if c.id == "mnist-moments").cell.command()
    assert f"# w1: MNIST, ε = 10, (a) class-Gaussian alone\n{wrapped_command(command)}\n" in block
    assert wrapped_command(command).replace(" \\\n    ", " ") == command
    assert max(len(line) for line in block.splitlines()) <= 300


def test_the_utility_page_shows_the_summary_of_the_stored_runs():
    assert between(wst.SUMMARY_PAGE.read_text(), wst.SUMMARY_BEGIN, wst.SUMMARY_END) == wst.summary(load_store()), \
        "docs/utility.md: run `python scripts/warm_start_table.py`"
    rows = wst.summary([_run("mnist-moments", 0, {"acc_logreg": 0.86})]).splitlines()
    assert rows[2] == "| MNIST, ε = 10 | 86.0 % | not run | not run |" and len(rows) == 2 + len(wst.SECTIONS)
