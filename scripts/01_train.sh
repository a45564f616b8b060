#!/usr/bin/env bash
# Step 1 of 4: train a policy from a config (SAC on Pendulum, about two minutes on 2 CPU cores).
# Prints the run directory; the next steps take it as their argument.
set -euo pipefail
cd "$(dirname "$0")/.."
make .venv/.installed >/dev/null
.venv/bin/robopt train configs/sac_pendulum.yaml total_steps=8000 --no-progress | tee /tmp/robopt_train.log
grep -o 'run directory: .*' /tmp/robopt_train.log | cut -d' ' -f3 > /tmp/robopt_last_run
echo "next: scripts/02_export.sh $(cat /tmp/robopt_last_run)"
