# `make train` and `make test` each bootstrap .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= configs/ppo_halfcheetah_fast.yaml
# Test processes (pytest-xdist): one per core, at most 4 (each holds torch, MuJoCo and the test data).
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --maxprocesses=4 --dist loadgroup

.PHONY: train test test-fast test-portability test-isaac isaac metaworld bench lint format clean

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

test: $(STAMP) $(MW_STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) tests $(ARGS)

test-fast: $(STAMP) $(MW_STAMP)
	MUJOCO_GL=egl $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) -m "not slow" tests $(ARGS)

# The float-sensitive tests under SSE4_2, AVX2 and AVX512 kernels, with 1 and 2 torch threads (.ci/portability).
test-portability: $(STAMP)
	bash .ci/portability $(BIN)/python $(XDIST) $(ARGS)

# Isaac Lab 3.0 (kit-less, Newton physics on the MuJoCo Warp solver) in its own venv: its pins (mujoco 3.12,
# warp-lang 1.17, torch 2.11) conflict with .venv's. isaaclab 3.0.0 declares Python >= 3.12 but imports and runs on
# 3.11, so it alone goes in with --no-deps --ignore-requires-python, and its imports' needs are listed by hand
# (docs/isaac.md). torch stays the CPU 2.13.0 (Isaac Lab's code runs on it; its 2.11 pin would pull CUDA).
ISAAC_VENV := .venv-isaac
ISAAC_BIN := $(ISAAC_VENV)/bin
ISAAC_STAMP := $(ISAAC_VENV)/.installed
ISAAC_DEPS := warp-lang==1.17.0 'newton[sim]==1.6.1' lazy_loader pyyaml hydra-core prettytable rich trimesh \
	omniverseclient==2.74.0 usd-exchange==3.0.1 mujoco-usd-converter==0.6.1 'pytest>=8.0,<9' pytest-timeout \
	'onnx>=1.16' 'onnxscript>=0.2' 'onnxruntime>=1.18'

$(ISAAC_STAMP): pyproject.toml
	test -x $(ISAAC_BIN)/python || $(PYTHON) -m venv $(ISAAC_VENV)
	$(ISAAC_BIN)/pip install -q --upgrade pip
	$(ISAAC_BIN)/pip install -q torch==2.13.0
	$(ISAAC_BIN)/pip install -q 'uv>=0.5'
	$(ISAAC_BIN)/uv pip install -q --python $(ISAAC_BIN)/python -e . $(ISAAC_DEPS)
	$(ISAAC_BIN)/pip install -q --no-deps --ignore-requires-python isaaclab==3.0.0
	touch $(ISAAC_STAMP)

isaac: $(ISAAC_STAMP)

# The Isaac Lab tests (tests/isaac, skipped in .venv) in the Isaac venv.
test-isaac: $(ISAAC_STAMP)
	$(ISAAC_BIN)/python -m pytest -q -p no:cacheprovider --timeout 900 tests/isaac $(ARGS)

# Meta-World 3.1.1 in its own venv: it pins mujoco==3.3.0, and on .venv's MuJoCo 4 its mocap weld data has the wrong
# length. robopt never imports it: its envs run in worker processes of this venv's Python
# (robopt/envs/metaworld_worker.py: numpy and Meta-World only), so this venv holds no torch and no robopt (about
# 150 MB, seconds with uv). packaging: Gymnasium's MuJoCo module imports it, and Meta-World does not list it.
MW_VENV := .venv-metaworld
MW_STAMP := $(MW_VENV)/.installed

$(MW_STAMP): $(STAMP) Makefile
	test -x $(MW_VENV)/bin/python || $(PYTHON) -m venv --without-pip $(MW_VENV)
	$(BIN)/uv pip install -q --python $(MW_VENV)/bin/python metaworld==3.1.1 mujoco==3.3.0 gymnasium==1.4.0 \
		'numpy>=2,<3' packaging
	touch $(MW_STAMP)

metaworld: $(MW_STAMP)

bench: $(STAMP)
	$(BIN)/python benchmarks/ppo_vs_sb3.py

lint: $(STAMP)
	$(BIN)/ruff check robopt tests benchmarks scripts
	$(BIN)/ruff format --check robopt tests benchmarks scripts

format: $(STAMP)
	$(BIN)/ruff format robopt tests benchmarks scripts
	$(BIN)/ruff check --fix robopt tests benchmarks scripts

clean:
	rm -rf $(VENV) $(ISAAC_VENV) $(MW_VENV) build *.egg-info
