# `make train` and `make test` each bootstrap .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/ppo_halfcheetah_fast.yaml
# Test processes (pytest-xdist): one per core, at most 4 (each holds torch, MuJoCo and the test data).
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --maxprocesses=4 --dist loadgroup

.PHONY: train test test-fast test-portability bench lint format clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# torch first, pinned, with pip (it honours this machine's pip configuration, which holds the CPU wheel): an
	# unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/pip install torch==2.13.0
	# The rest with uv (about 8 s against pip's 50 s here); uv keeps the torch installed above, which satisfies
	# the pin.
	$(BIN)/pip install 'uv>=0.5'
	$(BIN)/uv pip install --python $(BIN)/python -e '.[dev]'
	touch $(STAMP)

train: $(STAMP)
	$(BIN)/robopt train $(CONFIG) $(ARGS)

test: $(STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) tests $(ARGS)

test-fast: $(STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) -m "not slow" tests $(ARGS)

# The float-sensitive tests under SSE4_2, AVX2 and AVX512 kernels, with 1 and 2 torch threads (.ci/portability).
test-portability: $(STAMP)
	bash .ci/portability $(BIN)/python $(XDIST) $(ARGS)

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
