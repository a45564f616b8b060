#!/usr/bin/env bash
# The GPU check, one line per figure, in under 10 minutes on one GPU:
#   1. tests/gpu (MuJoCo Warp on CUDA: contract at 4096 envs, parity with the CPU backend);
#   2. PPO env steps per second on MuJoCo Warp: Ant and Humanoid at 1024 and 4096 envs, then at 4096 envs with the
#      substeps replayed from a CUDA graph (env.kwargs.graph=true);
#   3. env steps per second of the many-env SAC config (configs/sac_halfcheetah_fast.yaml) on MuJoCo Warp, and of
#      Isaac Lab's cart-pole at 4096 envs where the Python has Isaac Lab (benchmarks/isaac_throughput.py);
#   4. time to a deterministic return of 3000 on HalfCheetah with the GPU PPO config (configs/ppo_halfcheetah_gpu.yaml:
#      1024 envs, CUDA graph);
#   5. the quadruped (a robot from its description, configs/ppo_quadruped_velocity_gpu.yaml) on MuJoCo Warp at 4096
#      envs: the task's env steps per second alone (CUDA graph), PPO's end to end, and the tracking errors after 5
#      minutes of training (benchmarks/quadruped_tracking.py: velocity error, yaw-rate error, falls).
# Without CUDA the CUDA lines are skipped (one line says so) and their CPU twins run instead, small.
# It installs nothing unless ROBOPT_WHEELS names a folder of wheels to install first (a GPU machine with no
# package registry: carry mujoco, mujoco-warp, warp-lang, gymnasium wheels there), and imports robopt from
# this tree. Python: $PYTHON, else .venv/bin/python, else python3.
# GPU_CHECK_LOG_DIR=DIR keeps every step's whole output in DIR/<step>.log (the printed line is its last line);
# GPU_CHECK_DEADLINE_S=N runs each step under the seconds left of N and skips, with a line, what no longer fits,
# so a leased machine's time limit cuts the check short without losing the figures already printed.
# GPU_CHECK_STEPS="name ..." runs only the named steps (the names of the log files, e.g. tests_gpu
# physics_HalfCheetah_4096_graph time_to_3000), for a second lease that reruns what the first one missed.
#
#   benchmarks/gpu_check.sh                           # here, or on a GPU machine with the deps installed
#   ROBOPT_WHEELS=.whl PYTHON=python3 GPU_CHECK_LOG_DIR=logs GPU_CHECK_DEADLINE_S=540 benchmarks/gpu_check.sh
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
SECONDS_PER_LINE=$([ "$QUICK" = 1 ] && echo 2 || echo "${GPU_CHECK_SECONDS:-20}")
LOG_DIR="${GPU_CHECK_LOG_DIR:-}"
DEADLINE="${GPU_CHECK_DEADLINE_S:-0}"
[[ "$DEADLINE" =~ ^[0-9]+$ ]] || { say "GPU_CHECK_DEADLINE_S must be a whole number of seconds, got '$DEADLINE'"; exit 2; }
ONLY="${GPU_CHECK_STEPS:-}"
if [ -n "$LOG_DIR" ]; then mkdir -p "$LOG_DIR" || { say "cannot create GPU_CHECK_LOG_DIR $LOG_DIR"; exit 2; }; fi

info=$("$PY" -c 'import sys, torch
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print(int(torch.cuda.is_available()), f"python {sys.version.split()[0]}, torch {torch.__version__}, CUDA device: {name}")' 2>&1) \
  || { say "$PY cannot import torch: ${info##*$'\n'}"; exit 2; }
cuda="${info%% *}"
say "${info#* }"
start=$SECONDS

# step NAME FILTER COMMAND...: runs COMMAND (under the time left when there is a deadline), keeps its output in
# $LOG_DIR/NAME.log, and prints what FILTER (a grep -E pattern; empty: the last line) picks from it; a failed or
# stopped step prints its exit status and last line instead, and the check goes on.
step() {
  local name="$1" filter="$2" log rc left
  shift 2
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then return; fi
  log=$(mktemp)
  if [ "$DEADLINE" -gt 0 ]; then
    left=$((DEADLINE - (SECONDS - start)))
    if [ "$left" -lt 30 ]; then say "$name: skipped, ${left} s left of GPU_CHECK_DEADLINE_S=$DEADLINE"; return; fi
    timeout -k 10 "$left" "$@" >"$log" 2>&1
  else
    "$@" >"$log" 2>&1
  fi
  rc=$?
  if [ -n "$LOG_DIR" ]; then cp "$log" "$LOG_DIR/$name.log"; fi
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    say "$name: stopped at the deadline (GPU_CHECK_DEADLINE_S=$DEADLINE); last line: $(tail -n 1 "$log")"
  elif [ "$rc" != 0 ] && [ "$name" != tests_gpu ]; then
    say "$name: failed (exit $rc): $(grep -v '^\s*$' "$log" | tail -n 1)"
  elif [ -n "$filter" ]; then
    grep -E "$filter" "$log" | sed 's/^/gpu_check: /'
  else
    tail -n 1 "$log" | sed 's/^/gpu_check: /'
  fi
  rm -f "$log"
}

# 1. the GPU tests (they skip without CUDA); the project's pytest options are not needed here
step tests_gpu "" bash -c "\"$PY\" -m pytest -q -o addopts='' -p no:cacheprovider tests/gpu 2>&1 | sed '\$s/^/tests\/gpu: /'"

throughput() {  # name, label, config, overrides...
  local name="$1" label="$2" config="$3"
  shift 3
  step "$name" "" "$PY" benchmarks/train_throughput.py "$config" --seconds "$SECONDS_PER_LINE" --label "$label" \
    --override "$@"
}

if [ "$cuda" = 1 ]; then
  # 2a. physics alone (random actions), HalfCheetah at 4096 envs, eager launches and then replayed from a CUDA graph
  for graph in "" --graph; do
    step "physics_HalfCheetah_4096${graph:+_graph}" "^backend=|^HalfCheetah" "$PY" benchmarks/env_throughput.py \
      --tasks HalfCheetah --num-envs 4096 --backend mujoco_warp --device cuda --no-peers --env-steps 409600 \
      --repeats 2 $graph
  done
  # 2b. PPO on MuJoCo Warp: 32 steps per env per rollout, 4 minibatches per epoch (the rollout grows with N)
  for task in Ant Humanoid; do
    for n in 1024 4096; do
      throughput "ppo_${task}_$n" "PPO mujoco_warp mujoco/$task $n envs" configs/ppo_halfcheetah_fast.yaml \
        env.id="mujoco/$task" env.backend=mujoco_warp device=cuda env.num_envs="$n" algo.minibatch_size=$((n * 32 / 4))
    done
  done
  for task in Ant Humanoid; do
    throughput "ppo_${task}_4096_graph" "PPO mujoco_warp mujoco/$task 4096 envs, CUDA graph" \
      configs/ppo_halfcheetah_fast.yaml env.id="mujoco/$task" env.backend=mujoco_warp device=cuda env.num_envs=4096 \
      algo.minibatch_size=32768 env.kwargs.graph=true
  done
  # 3. the many-env SAC config on MuJoCo Warp, scaled to the GPU (1024 envs, 8192-sample batches)
  throughput sac_halfcheetah_1024 "SAC mujoco_warp mujoco/HalfCheetah 1024 envs" configs/sac_halfcheetah_fast.yaml \
    env.backend=mujoco_warp device=cuda env.num_envs=1024 algo.loop.batch_size=8192 algo.loop.gradient_steps=8 \
    algo.loop.learning_starts=10240 algo.loop.iteration_steps=10240
  # 3b. Isaac Lab's cart-pole on CUDA at 4096 envs beside MuJoCo Warp's InvertedPendulum (where $PY has Isaac Lab)
  if "$PY" -c "import isaaclab" >/dev/null 2>&1; then
    step isaac_cartpole_4096 "^ +4096" "$PY" benchmarks/isaac_throughput.py --device cuda \
      --native-backend mujoco_warp --num-envs 4096 --steps 100
  else
    say "isaac_cartpole_4096: skipped, $PY has no Isaac Lab (make isaac builds a venv with it; docs/isaac.md)"
  fi
  # 4. time to 3000 with the GPU PPO config (ppo_halfcheetah_gpu.yaml: 1024 envs, CUDA graph), capped at 2 minutes
  step time_to_3000 "^seed 0" "$PY" benchmarks/time_to_return.py --contestants ppo-gpu --seeds 0 --levels 3000 \
    --budget-s 120 --max-steps 40000000 --eval-every 524288
  # 5. the quadruped on MuJoCo Warp at 4096 envs: the task alone (CUDA graph), PPO end to end, 5 minutes of training
  step quadruped_task_4096_graph "^quadruped" "$PY" benchmarks/robot_throughput.py --backend mujoco_warp \
    --device cuda --envs 4096 --steps 200 --graph
  throughput ppo_quadruped_4096_graph "PPO mujoco_warp quadruped 4096 envs, CUDA graph" \
    configs/ppo_quadruped_velocity_gpu.yaml device=cuda
  step quadruped_tracking_5min "^runs|^  " "$PY" benchmarks/quadruped_tracking.py --train \
    --config configs/ppo_quadruped_velocity_gpu.yaml --seeds 0 --total-steps 400000000 --budget-s 300 \
    --root /tmp/robopt-gpu-quadruped --episodes 256
else
  say "no CUDA device: skipped tests/gpu's CUDA tests, PPO and SAC on MuJoCo Warp, and the GPU time to return;" \
    "their CPU twins follow"
  throughput ppo_cpu "PPO mujoco (CPU threads) mujoco/HalfCheetah 64 envs" configs/ppo_halfcheetah_fast.yaml
  if [ "$QUICK" = 1 ]; then  # no compile, a short warm-up: the path, not the figure
    throughput sac_cpu "SAC mujoco (CPU threads) mujoco/HalfCheetah 16 envs, eager" configs/sac_halfcheetah_fast.yaml \
      algo.compile=false algo.loop.learning_starts=512
  else
    throughput sac_cpu "SAC mujoco (CPU threads) mujoco/HalfCheetah 16 envs" configs/sac_halfcheetah_fast.yaml
  fi
fi
say "done in $((SECONDS - start)) s"
