#!/usr/bin/env bash
# Step 1 of 4: train a policy from a config: SAC on Pendulum under the conditions steps 3 and 4 deploy it in
# (one tick of actuator delay, a 1 N m per tick rate limit, sensor noise; configs/sac_pendulum_deploy.yaml),
# about four minutes on 2 CPU cores. Prints the run directory; the next steps take it as their argument
# (default: the latest run of this config). The training log is kept in the run directory as train.log.
set -euo pipefail
cd "$(dirname "$0")/.."
make .venv/.installed >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT
.venv/bin/robopt train configs/sac_pendulum_deploy.yaml --no-progress | tee "$log"
RUN_DIR=$(grep -o 'run directory: .*' "$log" | cut -d' ' -f3)
cp "$log" "$RUN_DIR/train.log"
echo "in-process return (deterministic, under the deploy conditions): $(scripts/run_info.sh return "$RUN_DIR")"
echo "next: scripts/02_export.sh $RUN_DIR"
