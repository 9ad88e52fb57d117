"""The prepared GPU check (``make gpu-check``, ``dpgen/bench/gpu_check.py``) without a GPU.

* ``--dry-run`` lists every private family in fp32 and bf16 beside the CPU, the CUDA-marked tests, the
  default demo and the NCCL run, and exits 0 without running anything;
* the report writer turns a measurement dict into the right table (a fake one here);
* the real measurement path (the pipeline, the step timer, the bf16 forward count) runs on the CPU for
  one family;
* asking for cuda where there is none is one ``error:`` line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dpgen.bench import gpu_check
from dpgen.bench.gpu_check import FAMILIES, main, render
from tests.helpers import ROOT


def test_dry_run_lists_every_family_in_fp32_and_bf16_and_runs_nothing(capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, "run_check", lambda args: pytest.fail("--dry-run ran the check"))
    assert main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    for name, (label, composition) in FAMILIES.items():
        lines = [ln for ln in out.splitlines() if f"{label} [{name}]" in ln]
        assert [ln.split(": ")[1].split(",")[0] for ln in lines] == ["cpu precision=32", "cuda precision=32",
                                                                     "cuda precision=bf16"], lines
        assert all(" ".join(composition) in ln for ln in lines)
    assert len(FAMILIES) == 8
    assert "pytest -m cuda" in out and "python train.py trainer.device=cuda" in out
    assert "torchrun --nproc-per-node 2 train.py" in out


def test_make_gpu_check_runs_the_module_with_its_args():
    make = (ROOT / "Makefile").read_text()
    target = make[make.index("\ngpu-check:"):].split("\n\n")[0]
    assert "-m dpgen.bench.gpu_check $(ARGS)" in target and "gpu-check" in make.split("\n.PHONY:")[1].splitlines()[0]


def _fake() -> dict:
    run = {"steps": 40, "timed_steps": 35, "epsilon": 1.25, "peak_mib": None, "bf16_forwards": 0}
    return {
        "meta": {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "n_devices": 1, "cpu": "x86_64, 16 threads",
                 "versions": {"Python": "3.11.7", "torch": "2.5.0", "CUDA": "12.4"}, "commit": "abc1234",
                 "date": "2026-01-01 00:00 UTC", "steps": 40, "warmup": 5, "wall_s": 301.0},
        "tests": {"command": "pytest -m cuda", "rc": 0, "summary": "12 passed in 40.1s"},
        "families": {
            "dpsgd_classifier": {"cpu/32": {**run, "steps_per_s": 20.0},
                                 "cuda/32": {**run, "steps_per_s": 500.0, "peak_mib": 41.5},
                                 "cuda/bf16": {**run, "steps_per_s": 510.0, "peak_mib": 41.5}},
            "dpswd_generator": {"cpu/32": {**run, "steps_per_s": 10.0},
                                "cuda/32": {**run, "steps_per_s": 250.0, "peak_mib": 100.25},
                                "cuda/bf16": {**run, "steps_per_s": 300.0, "peak_mib": 80.0, "bf16_forwards": 70}},
            "dpsinkhorn": {"cpu/32": {**run, "steps_per_s": 1.5}, "cuda/32": {"error": "RuntimeError: boom"},
                           "cuda/bf16": {**run, "steps_per_s": 90.0, "peak_mib": 300.0, "bf16_forwards": 5}},
        },
        "demo": {"command": "python train.py trainer.device=cuda", "wall_s": 31.5, "epsilon": 9.9973, "steps": 1,
                 "device": "cuda", "metrics": {"acc_logreg": 0.917}},
        "nccl": {"skipped": "1 CUDA device visible; the 2-process NCCL run needs 2"},
    }


def test_the_report_writer_puts_every_figure_in_its_cell():
    md = render(_fake())
    rows = {ln.split(" | ")[0].lstrip("| "): [c.strip() for c in ln.strip("|").split("|")[1:]]
            for ln in md.splitlines() if ln.startswith("| ") and not ln.startswith("| family")}
    # family | CPU fp32 | cuda fp32 | cuda bf16 | cuda fp32 / CPU | peak fp32 | peak bf16 | eps
    assert rows["DP-SGD classifier"] == ["20.0", "500.0", "no bf16 forward †", "×25.0", "41.5", "—",
                                         "1.2500 / 1.2500 / 1.2500"]
    assert rows["DP-SWD generator"] == ["10.0", "250.0", "300.0", "×25.0", "100.2", "80.0", "1.2500 / 1.2500 / 1.2500"]
    assert rows["DP-Sinkhorn"] == ["1.5", "failed", "90.0", "—", "—", "300.0", "1.2500 / — / 1.2500"]
    flat = " ".join(md.split())  # the page's paragraphs are wrapped over lines
    assert "**NVIDIA H100 80GB HBM3** (1 visible)" in flat and "torch 2.5.0, CUDA 12.4" in flat
    assert "`pytest -m cuda`: 12 passed in 40.1s" in md
    assert "† `trainer.precision=bf16` ran, but no module forward produced bfloat16 in: DP-SGD classifier." in md
    assert "* DP-Sinkhorn, cuda/32: RuntimeError: boom" in md
    assert "finished on cuda in 31.5 s" in md and "acc_logreg 0.917" in md
    assert "Skipped: 1 CUDA device visible" in md
    assert gpu_check.failed(_fake()) and not gpu_check.failed({**_fake(), "families": {}})


def _measure_on_cpu(tmp_path, family: str, steps: int) -> tuple[dict, str]:
    out, raw = tmp_path / "report.md", tmp_path / "raw.json"
    rc = main(["--device", "cpu", "--steps", str(steps), "--warmup", "1", "--families", family, "--skip-tests",
               "--skip-demo", "--out", str(out), "--json", str(raw)])
    assert rc == 0, out.read_text()
    runs = json.loads(raw.read_text())["families"][family]
    assert set(runs) == {"cpu/32", "cpu/bf16"}
    for key, m in runs.items():
        assert m["steps_per_s"] > 0 and 0 < m["epsilon"] <= 10 and m["peak_mib"] is None, key  # no device memory
    assert runs["cpu/32"]["epsilon"] == runs["cpu/bf16"]["epsilon"]
    assert f"| {FAMILIES[family][0]} | " in out.read_text()
    return runs, out.read_text()


def test_the_measurement_path_runs_on_cpu_for_the_one_release_family(tmp_path):
    runs, md = _measure_on_cpu(tmp_path, "class_gaussian", steps=3)
    assert all(m["steps"] == m["timed_steps"] == 1 for m in runs.values())  # one release, timed whole
    assert runs["cpu/bf16"]["bf16_forwards"] == 0 and "no bf16 forward †" in md  # said, not faked


@pytest.mark.slow
def test_the_measurement_path_runs_on_cpu_for_a_stepping_family(tmp_path):
    runs, _ = _measure_on_cpu(tmp_path, "dpswd_generator", steps=3)
    assert all(m["steps"] == 3 and m["timed_steps"] == 2 for m in runs.values())  # the warm-up step is not timed
    assert runs["cpu/32"]["bf16_forwards"] == 0 < runs["cpu/bf16"]["bf16_forwards"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_asking_for_cuda_without_one_is_one_error_line(capsys):
    assert main(["--skip-tests"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --device cuda but torch sees no CUDA device"), err


def test_the_nccl_section_shows_both_runs_and_a_differing_epsilon_fails_the_check(monkeypatch, tmp_path):
    runs = iter([{"steps_per_s": 100.0, "epsilon": 1.25}, {"steps_per_s": 180.0, "epsilon": 1.5}])
    monkeypatch.setattr(gpu_check, "_train", lambda cmd, run_dir, timeout_s: next(runs))
    n = gpu_check.nccl(tmp_path, 40, 60, n_devices=2)
    assert n["error"] == "ε differs: 1.25 on one process, 1.5 on two"
    md = render({**_fake(), "nccl": n})
    assert "| 1 | 100.0 | 1.250000 |  |" in md and "| 2 (NCCL) | 180.0 | 1.500000 |  |" in md
    assert "**Failed:** ε differs" in md and gpu_check.failed({**_fake(), "families": {}, "nccl": n})
    assert gpu_check.nccl(tmp_path, 40, 60, n_devices=1) == {
        "skipped": "1 CUDA device visible; the 2-process NCCL run needs 2"}


def test_the_mnist_check_lists_the_mnist_presets_with_fewer_cpu_steps_and_the_report_names_every_option(capsys):
    assert main(["--dry-run", "--data", "mnist", "--cpu-steps", "6", "--warmup", "3",
                 "--families", "dpsinkhorn,class_gaussian"]) == 0
    out = capsys.readouterr().out
    assert "DP-Sinkhorn [dpsinkhorn]: cpu precision=32, 6 steps (3 warm-up): experiment=mnist_dpsinkhorn" in out
    assert "DP-Sinkhorn [dpsinkhorn]: cuda precision=32, 40 steps (3 warm-up): experiment=mnist_dpsinkhorn" in out
    assert "experiment=mnist_moments" in out and "digits" not in out.split("default demo")[0]
    assert main(["--dry-run", "--cpu-steps", "3", "--warmup", "5"]) == 2  # the warm-up must leave a timed step
    assert "--cpu-steps 3" in capsys.readouterr().err
    args = gpu_check.parser().parse_args(["--data", "mnist", "--set", "model.scaling=0.5", "--set", "seed=1",
                                          "--out", "elsewhere.md", "--code-version", "abc"])
    assert gpu_check._non_default(args) == ["--data", "mnist", "--set", "model.scaling=0.5", "--set", "seed=1"]
    fake = _fake()
    fake["meta"].update(data="mnist", set=["model.scaling=0.5"], arguments="--data mnist --set model.scaling=0.5")
    md = render(fake)
    assert "`python -m dpgen.bench.gpu_check --data mnist --set model.scaling=0.5`" in md
    assert "* DP-Sinkhorn: `experiment=mnist_dpsinkhorn model.scaling=0.5`" in md and "MNIST presets" in md


def test_the_device_side_rows_syncs_floor_opacus_and_the_sinkhorn_projection():
    rep = _fake()
    rep["meta"]["data"] = "mnist"
    rep["families"]["dpsgd_classifier"]["cuda/32"]["syncs_per_step"] = 1.0
    rep["families"]["dpsinkhorn"]["cuda/32"] = {"steps": 40, "timed_steps": 35, "epsilon": 1.0, "steps_per_s": 118.0,
                                                "syncs_per_step": 0.0}
    rep["opacus"] = {"sigma": 1.0, "dpgen": {"steps_per_s": 150.0}, "opacus": {"steps_per_s": 90.0}}
    rep["families"]["dpsgd_classifier"]["cuda/32"]["sync_sites"] = {"dpgen/methods/dpsgd_classifier.py:250": 35}
    md = render(rep)
    assert "| DP-SGD classifier | 1.0 | 500.0 | 500 (est.) |" in md
    assert "* DP-SGD classifier: `dpgen/methods/dpsgd_classifier.py:250` ×35" in md
    assert "| DP-Sinkhorn | 0.0 | 118.0 | 2000 (est.) |" in md
    assert f"**{3.4e6 / 118.0 / 3600:.1f} h** projected, beside the authors' code's 8.2 h" in md
    assert "| dpgen DP-SGD | 150.0 |" in md and "| Opacus | 90.0 |" in md
    rep["opacus"]["opacus"] = {"error": "RuntimeError: x"}
    assert gpu_check.failed(rep)


def test_opacus_beside_dpsgd_runs_on_cpu(tmp_path):
    out = gpu_check.opacus_beside("cpu", steps=3, warmup=1, run_dir=tmp_path)
    assert out["dpgen"]["steps_per_s"] > 0 and out["opacus"]["steps_per_s"] > 0, out


def test_count_syncs_names_the_line_that_synchronised(monkeypatch):
    """On CUDA each synchronising call's warning is counted and its Python line recorded (here a simulated warning:
    the debug mode is switched by a stand-in, so the test runs without a GPU)."""
    import warnings

    import torch

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    rec: dict = {}
    with gpu_check.count_syncs(torch.device("cuda"), rec):
        for _ in range(2):
            warnings.warn("called a synchronizing CUDA operation", UserWarning)  # the line recorded
        warnings.warn("something else", UserWarning)
    line = next(ln for ln, text in enumerate(Path(__file__).read_text().splitlines(), 1) if "# the line recorded" in text)
    assert rec["syncs"] == 2 and rec["sync_sites"] == {f"tests/tools/test_gpu_check.py:{line}": 2}


def test_dry_run_lists_the_opacus_pair_at_mnist_sizes_and_the_kernel_profile(capsys, monkeypatch):
    monkeypatch.setattr(gpu_check, "run_check", lambda args: pytest.fail("--dry-run ran the check"))
    assert main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "DP-SGD beside Opacus at mnist_dpsgd sizes" in out and "peak device memory" in out
    assert "torch.profiler table of one DP-SGD step" in out


def test_the_report_shows_the_opacus_pair_with_memory_and_the_kernel_table():
    fake = {**_fake(),
            "opacus_mnist": {"dpgen": {"steps_per_s": 120.0, "peak_mib": 3000.0},
                             "dpgen_ghost": {"steps_per_s": 150.0, "peak_mib": 2000.0},
                             "opacus": {"steps_per_s": 80.0, "peak_mib": 5000.0}},
            "kernel_profile": {"table": "Name  Self CUDA\nvoid gemm_kernel  1.2ms"}}
    md = render(fake)
    assert "| dpgen DP-SGD | 120.0 | 3,000 |" in md and "| Opacus | 80.0 | 5,000 |" in md
    assert "| dpgen DP-SGD, `model.per_sample=ghost` | 150.0 | 2,000 |" in md
    assert "void gemm_kernel" in md and "CUDA kernels by time" in md
    ok = {"families": {}, "opacus_mnist": fake["opacus_mnist"], "kernel_profile": fake["kernel_profile"]}
    assert not gpu_check.failed(ok)
    assert gpu_check.failed({**ok, "kernel_profile": {"error": "RuntimeError: no CUDA"}})
    assert gpu_check.failed({**ok, "opacus_mnist": {"dpgen": {"error": "x"}, "opacus": {}}})


def test_the_dpsgd_bench_section_has_a_row_for_each_per_sample_path_and_opacus(monkeypatch):
    from dpgen.bench import dpsgd

    rows = {"dpgen": {"steps_per_s": 0.04, "peak_mib": 1000.0, "per_sample": "unfold", "microbatch": 64},
            "dpgen_ghost": {"steps_per_s": 0.05, "peak_mib": 900.0, "per_sample": "ghost", "microbatch": 64},
            "opacus": {"steps_per_s": 0.02, "peak_mib": 4000.0}}
    monkeypatch.setattr(dpsgd, "beside", lambda device: rows)
    text = dpsgd.section(torch.device("cpu"))
    assert "| dpgen (`model.per_sample=ghost`, chunks of 64) | 0.050 | 900 |" in text
    assert "| dpgen (`model.per_sample=unfold`, chunks of 64) | 0.040 | 1,000 |" in text
    assert "dpgen / Opacus steps/s: unfold ×2.00, ghost ×2.50." in text
    assert [name for name, *_ in dpsgd.SIDES] == ["dpgen", "dpgen_ghost", "opacus"]


def test_the_kernel_table_of_one_dpsgd_step_is_a_profiler_table_on_the_cpu():
    from dpgen.bench import dpsgd

    table = dpsgd.kernel_table("cpu", batch=8, rows=5)
    assert "aten::" in table and "Self CPU" in table


def test_the_dry_run_lists_trainer_graph_off_beside_on_for_every_family_and_the_report_shows_both(capsys):
    assert main(["--dry-run", "--data", "mnist"]) == 0
    out = capsys.readouterr().out
    for name, (label, _) in FAMILIES.items():
        assert f"trainer.graph=off beside on (auto), {label}: cuda precision=32" in out, name
    assert "DP-Sinkhorn's paper schedule" in out and "with trainer.graph on and off" in out
    fake = _fake()
    on = {"steps": 40, "timed_steps": 35, "timed_s": 0.1, "steps_per_s": 350.0, "epsilon": 1.25, "peak_mib": 1.0,
          "bf16_forwards": 0}
    off = {**on, "steps_per_s": 70.0}
    fake["meta"] = {**fake["meta"], "data": "mnist"}
    fake["families"] = {"dpsinkhorn": {"cuda/32": on}}
    md = render({**fake, "graph_off": {"dpsinkhorn": off}})
    assert "| DP-Sinkhorn | 70.0 | 350.0 | ×5.0 | 1.2500 / 1.2500 |" in md
    assert f"**{3.4e6 / 350 / 3600:.1f} h** projected; `off`: {3.4e6 / 70 / 3600:.1f} h" in md
