"""docs/benchmark.md is rendered from the DPImageBench evidence store (dpgen reproduce dpimagebench)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from dpgen.reproduce import dpimagebench as page
from dpgen.reproduce.evidence import collect
from tests.helpers import ROOT


def test_the_committed_page_matches_the_store():
    assert not page.stale(), "docs/benchmark.md differs from the store: run `dpgen reproduce dpimagebench render`"


def test_every_family_preset_exists():
    for family in page.FAMILIES:
        for experiment, _ in family.presets.values():
            assert (ROOT / "configs" / "experiment" / f"{experiment}.yaml").is_file(), experiment


def _run_folder(root: Path, evaluator: str, eps: float, protocol: str, experiment: str = "mnist_moments",
                extra: tuple[str, ...] = ()) -> Path:
    run = root / f"run_{evaluator}_{eps:g}_{experiment}_{len(extra)}"
    (run / ".hydra").mkdir(parents=True)
    overrides = [f"experiment={experiment}", "dataset=fashion_mnist", "evaluator=dpimagebench",
                 "dataset.validation_size=5000", f"accountant.epsilon={eps:g}", "evaluator.epochs=2", "logger=local",
                 *extra]
    (run / "results.json").write_text(json.dumps({
        "experiment": experiment, "overrides": overrides, "runtime_s": 1800.0,
        "metrics": {"acc_dpimagebench_val_mean": 0.8123, "acc_dpimagebench_val_std": 0.01,
                    "acc_dpimagebench_syn_mean": 0.8011, "acc_dpimagebench_syn_std": 0.02, "fid": 41.25,
                    "dpimagebench_protocol": protocol},
        "privacy": {"guarantee": "rigorous", "target_epsilon": eps, "delta": 1e-5, "epsilon": eps}}))
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({
        "seed": 0, "dataset": {"_target_": "dpgen.data.datasets.fashion_mnist", "validation_size": 5000},
        "evaluator": {"_target_": evaluator}}))
    return run


def test_a_collected_run_fills_its_cell_with_its_label_and_command(tmp_path, monkeypatch):
    doc = tmp_path / "benchmark.md"
    shutil.copy(page.PAGE, doc)
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    shortened = _run_folder(tmp_path, page.TARGET, 10.0, "shortened protocol: 2 epoch(s) (benchmark: 50)")
    other = _run_folder(tmp_path, "dpgen.eval.GenerativeEvaluator", 1.0, "")
    written, skipped = collect([shortened, other], store=store, skip_reason=page.skip_reason)
    assert len(written) == 1 and len(skipped) == 1 and "not a DPImageBench cell" in skipped[0]
    assert page.render(doc, store) and not page.stale(doc, store)
    text = doc.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| DP class-Gaussian"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == "not run"  # F-MNIST ε = 1: the generative-evaluator run is no cell
    assert cells[5] == "81.2 ± 1.0 / 80.1 ± 2.0; FID 41.2† (shortened, [b1])"  # stored before the floor
    assert "schedule: shortened protocol: 2 epoch(s) (benchmark: 50)" in text and "run time 30 min" in text
    assert "overrides beyond the cell's command: `evaluator.epochs=2`" in text
    fill = page.FAMILIES[0].command("fashion_mnist", 10.0)
    text = " ".join(text.split())  # a long command is wrapped over lines of the page
    assert f"`{fill}`" not in text and f"`{page.FAMILIES[0].command('fashion_mnist', 1.0)}`" in text


def test_a_warm_started_run_fills_the_warm_row_and_a_plain_run_of_its_preset_fills_none(tmp_path):
    doc = tmp_path / "benchmark.md"
    shutil.copy(page.PAGE, doc)
    store = tmp_path / "store"
    warm = _run_folder(tmp_path, page.TARGET, 1.0, "shortened protocol: 2 epoch(s) (benchmark: 50)",
                       "mnist_dpswd_partition", page.WARM_DPSWD)
    plain = _run_folder(tmp_path, page.TARGET, 1.0, "shortened protocol: 2 epoch(s) (benchmark: 50)",
                        "mnist_dpswd_partition", page.WARM_DPSWD[:-1])  # one of the warm settings missing
    written, skipped = collect([warm, plain], store=store, skip_reason=page.skip_reason)
    assert len(written) == 1 and len(skipped) == 1
    page.render(doc, store)
    row = next(line for line in doc.read_text().splitlines() if line.startswith("| DP-SWD generator, warm-started"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4].startswith("81.2 ± 1.0 / 80.1 ± 2.0") and cells[2] == cells[3] == cells[5] == "not run"
    assert "overrides beyond the cell's command: `evaluator.epochs=2`" in doc.read_text()


def test_a_gpu_cell_names_its_gpu_and_its_fid_floor():
    ev = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3",
          "metrics": {"acc_dpimagebench_val_mean": 0.9, "acc_dpimagebench_val_std": 0.01,
                      "acc_dpimagebench_syn_mean": 0.89, "acc_dpimagebench_syn_std": 0.02, "fid": 20.04,
                      "fid_real_vs_real": 0.52, "dpimagebench_protocol": "DPImageBench (Gong, Li, Lin, Wang; CCS 2025), "
                                                                         "full protocol"}}
    assert page._cell_text(ev, "b3") == "90.0 ± 1.0 / 89.0 ± 2.0; FID 20.0 (floor 0.5) (full, NVIDIA H100 80GB HBM3, [b3])"


def test_make_gpu_bench_dry_run_lists_the_first_cells_and_their_budget():
    from dpgen.reproduce import gpu_bench

    lines = gpu_bench.plan(list(gpu_bench.FIRST_CELLS), 12, full=True)
    assert lines[0].startswith("class_gaussian:mnist:10: DP class-Gaussian") and "at most 12 min" in lines[0]
    assert "full protocol, the benchmark's numerics (fp32)" in lines[0] and "evaluator.classifiers" not in lines[0]
    assert "experiment=mnist_dpswd_partition model/warm_start=class_gaussian" in lines[1]
    assert "trainer.device=cuda" in lines[1] and "evaluator.precision=fp32" in lines[1]
    assert lines[2].startswith("estimate, not a measurement")
    with pytest.raises(ValueError, match="family one of"):
        gpu_bench.parse_cell("moments:mnist:10")


def test_make_gpu_bench_sizes_a_cell_to_its_lease_by_the_estimate():
    """A 10-minute lease runs what the pessimistic estimate fits, labelled shortened; a long one the full protocol."""
    from dpgen.reproduce import gpu_bench

    def total(chosen) -> float:
        return sum(gpu_bench.part_seconds(p, False) for p in ("set-up", "fid", *chosen)) / 60

    chosen = gpu_bench.size(10)
    assert chosen and chosen == gpu_bench.ORDER[:len(chosen)] and total(chosen) <= 10
    assert len(chosen) == 3 or total(gpu_bench.ORDER[:len(chosen) + 1]) > 10  # the next classifier does not fit
    lines = gpu_bench.plan(["class_gaussian:mnist:10"], 10)
    assert "shortened protocol: classifiers resnet" in lines[0] and "evaluator.precision=fp32" in lines[0]
    assert f"evaluator.classifiers=[{','.join(chosen)}]" in lines[0]
    assert "ResNeXt-29" in lines[1] and "(not run)" in lines[1] and "--full --budget-min" in lines[2]
    assert gpu_bench.size(total(gpu_bench.ORDER) + 1) == gpu_bench.ORDER  # a lease as long as the estimate
    # ResNeXt-29 dominates: its counted training FLOPs are the largest part of the estimate
    assert max(gpu_bench.ORDER, key=lambda p: gpu_bench.part_seconds(p, False)) == "resnext"
    with pytest.raises(ValueError, match="not even ResNet-110 fits"):
        gpu_bench.plan(["class_gaussian:mnist:10"], 1)


def test_a_cells_spread_is_said_to_be_over_one_runs_classifiers_not_over_runs():
    # a shortened run whose two classifiers disagree (89.0 / 74.2 %) reads 81.6 +- 7.4: the page must say that
    # this is the spread of one run's classifiers, or a reader takes it for a spread over runs
    text = " ".join(page.PAGE.read_text().split())
    assert "Each cell: ONE run" in text and "not over runs" in text
