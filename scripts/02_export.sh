#!/usr/bin/env bash
# Step 2 of 4: export the run's deterministic policy (ONNX + TorchScript, normalizer and bounds folded in),
# with policy.json (sizes, bounds, control period, hashes) and parity.npz; export fails unless ONNX Runtime and
# TorchScript reproduce torch within 1e-5.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN_DIR="${1:-$(scripts/run_info.sh latest)}"
.venv/bin/robopt export "$RUN_DIR" --format both --out "$RUN_DIR/export" --force
echo "next: scripts/03_deploy_sim.sh $RUN_DIR/export"
