# `make train` and `make test` each bootstrap .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/ppo_halfcheetah_fast.yaml

.PHONY: train test test-fast bench lint format clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# torch first, pinned: the CPU wheel; an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install torch==2.13.0
	$(BIN)/pip install -e '.[dev]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/robopt train $(CONFIG) $(ARGS)

test: $(STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -p no:cacheprovider tests $(ARGS)

test-fast: $(STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -m "not slow" tests $(ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/ppo_vs_sb3.py

lint: $(STAMP)
	$(BIN)/ruff check robopt tests benchmarks scripts
	$(BIN)/ruff format --check robopt tests benchmarks scripts

format: $(STAMP)
	$(BIN)/ruff format robopt tests benchmarks scripts
	$(BIN)/ruff check --fix robopt tests benchmarks scripts

clean:
	rm -rf $(VENV) build *.egg-info
