"""What offline and offline-to-online training cost per algorithm: updates and online env steps per second.

    .venv/bin/python benchmarks/offline_cost.py --dataset-root ~/.minari/datasets --root /tmp/cost

Each of ``configs/{iql,fql,qgf,expo}_hopper.yaml`` runs ``--offline-updates`` updates on the medium Hopper
dataset and then ``--online-steps`` env steps with one update each, on one env and one torch thread, one run at a time.
Printed per algorithm: offline updates per second (the offline iterations after the first, so start-up is
excluded) and online env steps per second (each includes its update). Batch-1 latency of the exported
policies is ``flow_latency.py --policies flow fql qgf``.

``--algos ogpo`` (``configs/ogpo_hopper.yaml``, fine-tuning from ``--init-from``, a BC diffusion run) has no
offline phase: it runs its critic-only warm-up (``algo.policy_starts`` updates) and then ``--online-steps`` env
steps, and prints the env steps per second after the warm-up (one update per decision of 4 env steps).

``--smoke`` records a two-episode stand-in dataset (``finetune_common.smoke_hopper_dataset``) unless
``--dataset-root`` is given, and runs the four offline algorithms for two 10-update iterations in each phase:

    .venv/bin/python benchmarks/offline_cost.py --smoke
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import sys
import tempfile
from pathlib import Path

from finetune_common import smoke_hopper_dataset  # benchmarks/ is the script's directory, so its sibling imports
from smoke import parse_smoke_args

from robopt.experiment import load_config
from robopt.runner import train

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "progress.csv") as handle:
        return list(csv.DictReader(handle))


def ogpo_rate(args) -> float:
    """Env steps per second of OGPO's Hopper fine-tuning once its critic-only warm-up is over."""
    if args.init_from is None:
        raise SystemExit("--algos ogpo needs --init-from RUN (a BC diffusion Hopper run, bc_diffusion_hopper.yaml)")
    config = load_config(str(CONFIGS / "ogpo_hopper.yaml"), [f"init_from={args.init_from}", *args.set])
    warmup = config.algo.policy_starts // config.algo.loop.gradient_steps * 4  # env steps: 4 per decision
    overrides = [f"init_from={args.init_from}", f"total_steps={warmup + args.online_steps}",
                 f"log.run_root={args.root}", "log.progress=false", "log.eval_episodes=0",
                 "torch_threads=1", *args.set]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):
        result = train(load_config(str(CONFIGS / "ogpo_hopper.yaml"), overrides), progress=False)
    online = [row for row in rows(result.run_dir) if float(row["env_steps"]) >= warmup]
    return (float(online[-1]["env_steps"]) - float(online[0]["env_steps"])) / (
        float(online[-1]["wall_time"]) - float(online[0]["wall_time"])
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--algos", nargs="+", default=["iql", "fql", "qgf", "expo"], choices=["iql", "fql", "qgf", "expo", "ogpo"]
    )
    parser.add_argument("--init-from", type=Path, default=None, help="a BC diffusion Hopper run (for ogpo)")
    parser.add_argument("--offline-updates", type=int, default=3000)
    parser.add_argument("--online-steps", type=int, default=3000)
    parser.add_argument("--dataset-root", type=Path, help="directory holding hopper/medium-v0 (required)")
    parser.add_argument("--root", type=Path, help="run directories go here (required)")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra overrides of every run")
    tiny = ["algo.loop.iteration_steps=10", "algo.loop.batch_size=32", "policy.hidden=[32,32]"]
    args = parse_smoke_args(parser, smoke={"offline_updates": 20, "online_steps": 20, "set": tiny})
    if not args.smoke and (args.dataset_root is None or args.root is None):
        parser.error("the following arguments are required: --dataset-root, --root")
    per_iteration = load_config(str(CONFIGS / "iql_hopper.yaml"), args.set).algo.loop.iteration_steps  # all four's
    if args.offline_updates < 2 * per_iteration or args.online_steps < 2 * per_iteration:
        least = f">= {2 * per_iteration} (two iterations of {per_iteration} each)"
        parser.error(f"--offline-updates and --online-steps must be {least}")
    with tempfile.TemporaryDirectory() as temporary:  # --smoke: the stand-in dataset and the runs, unless given
        args.root = args.root or Path(temporary) / "runs"
        args.dataset_root = args.dataset_root or smoke_hopper_dataset(Path(temporary))
        print(f"{'algo':5} {'offline updates/s':>18} {'online env steps/s':>19}")
        for algo in args.algos:
            if algo == "ogpo":
                print(f"{'ogpo':5} {'n/a':>18} {ogpo_rate(args):>19.1f}", flush=True)
                continue
            offline_rate, online_rate = rates(algo, args)
            print(f"{algo:5} {offline_rate:>18.1f} {online_rate:>19.1f}", flush=True)
    return 0


def rates(algo: str, args) -> tuple[float, float]:
    """Offline updates per second and online env steps per second of one run of ``algo`` (iterations after the
    first of each phase)."""
    overrides = [f"algo.loop.offline_updates={args.offline_updates}", f"total_steps={args.online_steps}",
                 f"algo.loop.dataset_root={args.dataset_root}", f"log.run_root={args.root}", "log.progress=false",
                 "log.eval_episodes=0", "torch_threads=1", *args.set]  # fmt: skip
    config = load_config(str(CONFIGS / f"{algo}_hopper.yaml"), overrides)
    per_iteration = config.algo.loop.iteration_steps  # on one env: updates (offline) or env steps with updates
    with contextlib.redirect_stdout(io.StringIO()):
        result = train(config, progress=False)
    table = rows(result.run_dir)
    offline = [row for row in table if float(row["env_steps"] or 0) == 0]
    online = table[len(offline) :]
    offline_rate = (
        per_iteration * (len(offline) - 1) / (float(offline[-1]["wall_time"]) - float(offline[0]["wall_time"]))
    )
    online_rate = per_iteration * (len(online) - 1) / (float(online[-1]["wall_time"]) - float(online[0]["wall_time"]))
    return offline_rate, online_rate


if __name__ == "__main__":
    sys.exit(main())
