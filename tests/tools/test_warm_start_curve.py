"""scripts/warm_start_curve.py: the warm-start curve of the warm-start note is read from the evidence store."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from dpgen.reproduce.claims import CLAIMS
from dpgen.reproduce.markers import between
from dpgen.reproduce.store import load_store
from tests.helpers import ROOT

SCRIPT = ROOT / "scripts" / "warm_start_curve.py"
_spec = importlib.util.spec_from_file_location("warm_start_curve", SCRIPT)
wsc = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = wsc  # its dataclass looks its module up there
_spec.loader.exec_module(wsc)


def _run(claim_id: str, seed: int, logreg: float, mlp: float | None = None, eps: float = 5.0) -> dict:
    """A stored run of ``claim_id`` as the evidence store records it (the fields the script reads)."""
    cell = next(c for c in CLAIMS if c.id == claim_id).cell
    return {"experiment": cell.experiment, "seed": seed,
            "overrides": [f"experiment={cell.experiment}", *cell.overrides, f"seed={seed}"],
            "metrics": {"acc_logreg": logreg, **({} if mlp is None else {"acc_mlp": mlp})},
            "privacy": {"epsilon_pld": eps, "epsilon_rdp": eps + 1}, "mechanism": {"noise_multiplier": 0.445}}


@pytest.fixture
def store():
    c = wsc.CURVES[0].claim
    return [_run(f"{c}-ot0", 4, 0.80, 0.81), _run(f"{c}-ot120", 4, 0.70, 0.72, 9.99), _run(f"{c}-ot30", 4, 0.75, 0.76, 7.0),
            _run(f"{c}-ot60", 5, 0.60, 0.61, 8.0),  # no warm-up stored for seed 5: not a paired curve
            _run(f"{c}-ot0", 6, 0.82, 0.83),  # a warm-up alone, nothing continued: no curve
            _run(wsc.REFERENCE, 0, 0.86, 0.87, 10.0), _run(wsc.REFERENCE, 1, 0.88, 0.89, 10.0)]


def test_a_seeds_points_are_its_warm_up_and_its_resumed_copies_in_step_order(store):
    pts = wsc.points(wsc.CURVES[0], store)
    assert list(pts) == [4]
    assert [(n, ev["metrics"]["acc_logreg"]) for n, ev in pts[4]] == [(0, 0.80), (30, 0.75), (120, 0.70)]
    assert wsc.points(wsc.CURVES[1], store) == {}
    assert wsc.reference(store)["acc_logreg"] == pytest.approx((87.0, 2))


def test_the_table_states_the_epsilon_each_point_spent(store):
    rows = wsc.table(store).splitlines()
    assert "| DP-SWD generator | 4 | 30 of 120 | 7.000 / 8.00 | 0.445 | 75.0 % | 76.0 % |" in rows
    assert rows[-1] == "| class-Gaussian alone (`mnist_moments`), mean of 2 runs | — | — | full ε | — | 87.0 % | 88.0 % |"


def test_the_figure_and_the_page_block_are_written_between_the_markers(store, tmp_path):
    fig = tmp_path / "curve.png"
    wsc.plot(store, fig)
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = tmp_path / "page.md"
    doc.write_text(f"before\n{wsc.BEGIN}\nOLD\n{wsc.END}\nafter\n")
    wsc.write_block(doc, wsc.block(store))
    text = doc.read_text()
    assert "OLD" not in text and text.startswith("before\n") and text.endswith("after\n") and "75.0 %" in text
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        wsc.write_block(doc, wsc.block(store))


def test_the_page_shows_the_curve_of_the_stored_runs():
    """The warm-start note prints exactly what the store gives (re-run the script after collecting a run)."""
    assert between(wsc.NOTE.read_text(), wsc.BEGIN, wsc.END) == wsc.block(load_store()), \
        "the warm-start note: run `python scripts/warm_start_curve.py`"
