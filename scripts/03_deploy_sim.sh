#!/usr/bin/env bash
# Step 3 of 4: run the exported policy through the torch-free deploy runtime on a simulated robot in real time,
# with sensor noise, 10 ms sensor latency, one tick of actuator delay and 1 % dropped observations.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPORT_DIR="${1:-$(cat /tmp/robopt_last_run)/export}"
.venv/bin/robopt deploy "$EXPORT_DIR" --robot "sim:Pendulum-v1?noise=0.01&latency_ms=10&delay_ticks=1&drop=0.01" \
    --duration 20 --config configs/deploy/pendulum.yaml --log /tmp/robopt_ticks.npy
echo "tick log: /tmp/robopt_ticks.npy (numpy structured array: tick, time, obs_age, compute_us, flags, action)"
