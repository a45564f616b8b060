#!/usr/bin/env bash
# The GPU check, one line per figure, in under 10 minutes on one GPU:
#   1. tests/gpu (MuJoCo Warp on CUDA: contract at 4096 envs, parity with the CPU backend);
#   2. PPO env steps per second on MuJoCo Warp: Ant and Humanoid at 1024 and 4096 envs;
#   3. env steps per second of the many-env SAC config (configs/sac_halfcheetah_fast.yaml) on MuJoCo Warp;
#   4. time to a deterministic return of 3000 on HalfCheetah with the GPU PPO config.
# Without CUDA the CUDA lines are skipped (one line says so) and their CPU twins run instead, small.
# It installs nothing unless ROBOPT_WHEELS names a folder of wheels to install first (a GPU machine with no
# package registry: carry mujoco, mujoco-warp, warp-lang, gymnasium wheels there), and imports robopt from
# this tree. Python: $PYTHON, else .venv/bin/python, else python3.
#
#   benchmarks/gpu_check.sh                           # here, or on a GPU machine with the deps installed
#   ROBOPT_WHEELS=.whl PYTHON=python3 benchmarks/gpu_check.sh
#   GPU_CHECK_QUICK=1 benchmarks/gpu_check.sh         # shortest timings (what tests/unit/test_gpu_check.py runs)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
say() { echo "gpu_check: $*"; }

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ -n "${ROBOPT_WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/robopt-site \
    "$ROBOPT_WHEELS"/*.whl || { say "could not install the wheels in $ROBOPT_WHEELS"; exit 2; }
  export PYTHONPATH="/tmp/robopt-site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
QUICK="${GPU_CHECK_QUICK:-0}"
SECONDS_PER_LINE=$([ "$QUICK" = 1 ] && echo 2 || echo 30)

info=$("$PY" -c 'import sys, torch
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(int(torch.cuda.is_available()), f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA device: {name}")' 2>&1) \
  || { say "$PY cannot import torch: ${info##*$'\n'}"; exit 2; }
cuda="${info%% *}"
say "${info#* }"
start=$SECONDS

# 1. the GPU tests (they skip without CUDA); the project's pytest options are not needed here
result=$("$PY" -m pytest -q -o addopts="" -p no:cacheprovider tests/gpu 2>&1 | tail -n 1)
say "tests/gpu: $result"

throughput() {  # label, config, overrides...
  local label="$1" config="$2"
  shift 2
  "$PY" benchmarks/train_throughput.py "$config" --seconds "$SECONDS_PER_LINE" --label "$label" --override "$@" 2>&1 \
    | tail -n 1 | sed 's/^/gpu_check: /'
}

if [ "$cuda" = 1 ]; then
  # 2. PPO on MuJoCo Warp: 32 steps per env per rollout, 4 minibatches per epoch (the rollout grows with N)
  for task in Ant Humanoid; do
    for n in 1024 4096; do
      throughput "PPO mujoco_warp mujoco/$task $n envs" configs/ppo_halfcheetah_fast.yaml env.id="mujoco/$task" \
        env.backend=mujoco_warp device=cuda env.num_envs="$n" algo.minibatch_size=$((n * 32 / 4))
    done
  done
  # 3. the many-env SAC config on MuJoCo Warp, scaled to the GPU (1024 envs, 8192-sample batches)
  throughput "SAC mujoco_warp mujoco/HalfCheetah 1024 envs" configs/sac_halfcheetah_fast.yaml \
    env.backend=mujoco_warp device=cuda env.num_envs=1024 algo.loop.batch_size=8192 algo.loop.gradient_steps=8 \
    algo.loop.learning_starts=10240 algo.loop.iteration_steps=10240
  # 4. time to 3000 with the GPU PPO config (4096 envs), capped at 3 minutes of training
  "$PY" benchmarks/time_to_return.py --contestants ppo --seeds 0 --levels 3000 --budget-s 180 --eval-every 131072 \
    --override env.backend=mujoco_warp device=cuda env.num_envs=4096 algo.minibatch_size=32768 2>&1 \
    | grep -E "^seed 0" | sed 's/^/gpu_check: time to return, GPU PPO config, /'
else
  say "no CUDA device: skipped tests/gpu's CUDA tests, PPO and SAC on MuJoCo Warp, and the GPU time to return;" \
    "their CPU twins follow"
  throughput "PPO mujoco (CPU threads) mujoco/HalfCheetah 64 envs" configs/ppo_halfcheetah_fast.yaml
  if [ "$QUICK" = 1 ]; then  # no compile, a short warm-up: the path, not the figure
    throughput "SAC mujoco (CPU threads) mujoco/HalfCheetah 16 envs, eager" configs/sac_halfcheetah_fast.yaml \
      algo.compile=false algo.loop.learning_starts=512
  else
    throughput "SAC mujoco (CPU threads) mujoco/HalfCheetah 16 envs" configs/sac_halfcheetah_fast.yaml
  fi
fi
say "done in $((SECONDS - start)) s"
