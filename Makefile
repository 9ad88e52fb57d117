# dpgen — the two commands: `make train` (default experiment on the embedded digits) and `make test`.
# Both create .venv and install the package with its dev extra when the venv is missing or
# pyproject.toml changed.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
PYTEST_ARGS ?=

.PHONY: install train test test-all bench gpu-check gpu-bench lint docs reproduce reproduce-calibration clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --no-compile -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## make train ARGS="experiment=mnist_dpswd accountant.epsilon=5"
train: $(STAMP)
	$(BIN)/python train.py $(ARGS)

## fast unit, property and shrunk end-to-end tests (CPU, < 10 min on 2 cores from a fresh clone);
## caches go to pytest's tmp folder; fails when no test runs (pytest exit 5 is an error);
## one worker per core, each test file on one worker (its module fixtures, e.g. a shared run, are made once)
test: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadscope -q -m "not slow" $(PYTEST_ARGS)

## every test, including the long end-to-end runs marked `slow`
test-all: $(STAMP)
	$(BIN)/python -m pytest -n auto --dist loadscope -q $(PYTEST_ARGS)

## benchmarks: writes docs/benchmarks.md
bench: $(STAMP)
	$(BIN)/dpgen bench --out docs/benchmarks.md

## the prepared GPU check (no new part starts after 7 min): CUDA-marked tests, every private family on cuda in fp32
## and bf16 beside the CPU, the default demo, 2-process NCCL with two GPUs -> docs/benchmarks-gpu.md;
## `make gpu-check ARGS=--dry-run` lists what it would run (any machine)
gpu-check: $(STAMP)
	$(BIN)/python -m dpgen.bench.gpu_check $(ARGS)

## one DPImageBench cell, full protocol, on a GPU within a time budget -> the evidence store and docs/benchmark.md:
## `make gpu-bench CELL=class_gaussian:mnist:10`; `make gpu-bench ARGS=--dry-run` lists what it would run (any machine)
gpu-bench: $(STAMP)
	$(BIN)/python -m dpgen.reproduce.gpu_bench $(if $(CELL),--cell $(CELL)) $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check dpgen scripts tests train.py

## the documentation site (mkdocs-material) into site/; strict: a broken link or anchor fails the build
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

## the reproduction scoreboard of docs/reproduction/, rendered from evidence/ (re-runs nothing);
## add a finished run folder with `dpgen reproduce collect <run folder>...`
reproduce: $(STAMP)
	$(BIN)/dpgen reproduce render

## DP-SWD Table 4 noise calibration table of docs/reproduction/dp-swd.md (computes σ, ~150 s)
reproduce-calibration: $(STAMP)
	$(BIN)/dpgen reproduce calibration --out docs/reproduction/dp-swd.md

clean:
	rm -rf outputs multirun wandb .pytest_cache site
