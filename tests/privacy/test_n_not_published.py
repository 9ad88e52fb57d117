"""Under add/remove neighbours the number N of private records is private: no exact N (nor N + 1) in
results.json, the release's card or an error line; what does reveal it is stated in the card and the guides."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hydra.core.global_hydra import GlobalHydra

from dpgen.config import privacy_setting_error
from dpgen.privacy.delta import check_delta, example_delta
from tests.helpers import ROOT
from tests.helpers.configs import compose_cfg

N_TOTAL = 47  # records in dataset.path: 12 held out as the test split (test_fraction 0.25), N = 35 private


def _ints(obj) -> set[int]:
    if isinstance(obj, bool):
        return set()
    if isinstance(obj, int):
        return {obj}
    if isinstance(obj, dict):
        return set().union(*(_ints(v) for v in obj.values())) if obj else set()
    if isinstance(obj, (list, tuple)):
        return set().union(*(_ints(v) for v in obj)) if obj else set()
    return set()


def test_a_poisson_run_publishes_no_exact_record_count_and_its_card_says_what_reveals_it(tmp_path):
    from dpgen.pipeline import run

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "own.npz", x=rng.integers(0, 256, (N_TOTAL, 8, 8)).astype(np.uint8), y=np.arange(N_TOTAL) % 3)
    GlobalHydra.instance().clear()
    cfg = compose_cfg(["experiment=mnist_dpswd", "dataset=arrays", f"dataset.path={tmp_path / 'own.npz'}",
                       "dataset.test_fraction=0.25", "dataset.image_size=8", "dataset.channels=1", "dataset.classes=3",
                       "dataset.pixel_range=[0,255]", "model.batch_size=8", "trainer.max_steps=1",
                       "accountant.delta=1e-3", "logger=local", "evaluator=none", "trainer.progress=false"],
                      out_dir=tmp_path / "run")
    results = run(cfg)
    n = N_TOTAL - 12
    assert results["privacy"]["neighbouring_relation"] == "add_remove"
    card = json.loads((tmp_path / "run" / "privacy_card.json").read_text())
    for name, published in (("results.json", json.loads((tmp_path / "run" / "results.json").read_text())),
                            ("privacy_card.json", card)):
        assert not {n, n + 1} & _ints(published), name  # e.g. the union bound's partners = N + 1
    partners = results["train"]["mechanisms"]["projection"]["partners"]
    assert partners == "N + 1"  # the formula, not the number
    notes = " ".join(card["does_not_cover"])
    assert "the dataset's test_fraction, 0.25" in notes and "reveals the number of records" in notes
    assert "sample rate" in notes  # q = B / N is published and reveals N: said so


def test_delta_refusals_print_no_private_count_and_the_docs_quote_them_as_the_code_writes_them():
    troubleshooting = (ROOT / "docs" / "guides" / "troubleshooting.md").read_text()
    with pytest.raises(ValueError) as public:
        check_delta(0.01, 1347, bound=True)  # the digits' public bound
    assert f"`{privacy_setting_error(public.value)}`" in troubleshooting  # the line the user sees
    with pytest.raises(ValueError) as refused:
        check_delta(0.05, 35)  # the exact private N: never printed
    private = str(privacy_setting_error(refused.value))
    assert "35" not in private and str(1 / 35)[:5] not in private and f"{example_delta(35):g}" not in private
    quoted = re.search(r"`(accountant\.delta: delta=… is not below 1/N for this private set[^`]*)…`", troubleshooting)
    assert quoted and private.replace("0.05", "…", 1).startswith(quoted.group(1).rstrip())
    own = (ROOT / "docs" / "guides" / "own-data.md").read_text()
    assert "warns" not in own and "refuses" in own  # dpgen refuses δ >= 1/N; it never only warns


def test_a_public_split_cut_from_own_data_is_listed_under_what_the_card_does_not_cover(tmp_path):
    """Its size and the public fraction pin the private count: the card says so (and still prints no N)."""
    from dpgen.pipeline import run

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "own.npz", x=rng.integers(0, 256, (N_TOTAL, 8, 8)).astype(np.uint8), y=np.arange(N_TOTAL) % 3)
    GlobalHydra.instance().clear()
    cfg = compose_cfg(["dataset=arrays", f"dataset.path={tmp_path / 'own.npz'}", "dataset.test_fraction=0.25",
                       "dataset.public_fraction=0.2", "dataset.image_size=8", "dataset.channels=1", "dataset.classes=3",
                       "dataset.pixel_range=[0,255]", "accountant.delta=1e-3", "logger=local", "evaluator=none",
                       "trainer.progress=false"], out_dir=tmp_path / "run")
    run(cfg)
    card = json.loads((tmp_path / "run" / "privacy_card.json").read_text())
    item = next(i for i in card["does_not_cover"] if i.startswith("The size of the public split"))
    assert "public_fraction, 0.2" in item and "reveals the number of private records" in item
