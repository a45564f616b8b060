#!/usr/bin/env bash
# The walk-through's shared lookups:
#   scripts/run_info.sh latest           the latest run directory of configs/sac_pendulum_deploy.yaml (step 1's)
#   scripts/run_info.sh return RUN_DIR   that run's in-process deterministic return (its eval.json)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  latest)
    latest=$(ls -1td runs/sac_pendulum_deploy/*/ 2>/dev/null | head -n 1)
    [ -n "$latest" ] || { echo "no run of configs/sac_pendulum_deploy.yaml under runs/: run scripts/01_train.sh first" >&2; exit 2; }
    echo "${latest%/}" ;;
  return)
    [ -f "${2:-}/eval.json" ] || { echo "no eval.json in ${2:-(no run directory given)}: a finished robopt train run is needed" >&2; exit 2; }
    .venv/bin/python -c 'import json, sys
e = json.load(open(sys.argv[1] + "/eval.json"))
print("%.1f +- %.1f over %d episodes" % (e["mean_return"], e["std_return"], len(e["returns"])))' "$2" ;;
  *) echo "usage: scripts/run_info.sh latest | return RUN_DIR" >&2; exit 2 ;;
esac
