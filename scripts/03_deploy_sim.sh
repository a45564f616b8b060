#!/usr/bin/env bash
# Step 3 of 4: run the exported policy through the torch-free deploy runtime on a simulated robot in real time,
# with sensor noise, 10 ms sensor latency, one tick of actuator delay and 1 % dropped observations, under the
# deploy config's safety limits (a 1 N m per tick rate limit among them). Step 1 trained under the same delay,
# rate limit and noise, so the deployed return should be near the in-process one printed next to it.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPORT_DIR="${1:-$(scripts/run_info.sh latest)/export}"
RUN_DIR=$(dirname "$EXPORT_DIR")
.venv/bin/robopt deploy "$EXPORT_DIR" --robot "sim:Pendulum-v1?noise=0.01&latency_ms=10&delay_ticks=1&drop=0.01" \
    --duration 60 --config configs/deploy/pendulum.yaml --log "$RUN_DIR/ticks.npy"
echo "in-process return (robopt train's deterministic evaluation): $(scripts/run_info.sh return "$RUN_DIR")"
echo "tick log: $RUN_DIR/ticks.npy (numpy structured array: tick, time, obs_age, compute_us, flags, action)"
