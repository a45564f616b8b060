#!/usr/bin/env bash
# Step 4 of 4: hardware in the loop. A simulated robot serves the UDP protocol from another process (10 ms added
# latency, 1 % packet loss, one step of actuator delay as in training); the deploy runtime cannot tell it from a
# real robot that speaks the same protocol.
set -euo pipefail
cd "$(dirname "$0")/.."
EXPORT_DIR="${1:-$(scripts/run_info.sh latest)/export}"
PORT="${PORT:-47800}"
# The server outlives deploy: it serves 72 s from when it is ready (about 1-3 s in), deploy ends by about 3 + 2 + 62 s,
# so deploy never sees the link go silent (that would be stale observations and a latched e-stop). Deploy ends with
# the safe action (zero torque) ramped in; the server then holds zero action after its command timeout (10 periods)
# and prints its summary when its 72 s are up.
.venv/bin/robopt sim-robot Pendulum-v1 --port "$PORT" --latency-ms 10 --loss 0.01 --delay-ticks 1 --duration 72 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
sleep 3  # the server imports torch and builds its env
.venv/bin/robopt deploy "$EXPORT_DIR" --robot "udp://127.0.0.1:$PORT" --duration 62 --config configs/deploy/pendulum.yaml
wait $SERVER || true
echo "in-process return (robopt train's deterministic evaluation): $(scripts/run_info.sh return "$(dirname "$EXPORT_DIR")")"
