"""Hopper: offline RL on the medium dataset, then online fine-tuning in the same run (IQL, FQL, QGF, EXPO).

    .venv/bin/python benchmarks/offline_hopper.py --seeds 0 1 2 --offline-updates 20000 --online 25000 50000

Per seed and algorithm (``configs/{iql,fql,qgf,expo}_hopper.yaml``): ``--offline-updates`` gradient updates on
the dataset alone, evaluated; then the same run continues online (one update per env step, offline and online
data in one replay) and is evaluated after each ``--online`` env-step count. Each evaluation is ``--episodes`` fresh
episodes, deterministic and stochastic (``finetune_common.evaluate``). The dataset must exist under
``--dataset-root`` (``robopt collect <TRPO Hopper run> --episodes 100 --action-noise 0.7 --out hopper/medium``,
as for ``finetune_hopper.py``). Runs go one at a time; wall seconds include nothing but training. ``--smoke``
records a two-episode stand-in (``finetune_common.smoke_hopper_dataset``) unless ``--dataset-root`` is given:

    .venv/bin/python benchmarks/offline_hopper.py --smoke    # CI: every algorithm, 10 updates, 10 online steps
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import evaluate, mean_std, return_figures, smoke_hopper_dataset  # noqa: E402
from smoke import parse_smoke_args  # noqa: E402

from robopt.experiment import load_config  # noqa: E402
from robopt.runner import train  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def quiet(config, **kwargs) -> tuple[Path, float]:
    import contextlib
    import io

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        result = train(config, progress=False, **kwargs)
    return result.run_dir, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--algos", nargs="+", default=["iql", "fql"], choices=["iql", "fql", "qgf", "expo"])
    parser.add_argument("--offline-updates", type=int, default=20_000)
    parser.add_argument("--online", type=int, nargs="*", default=[25_000, 50_000], help="env steps to evaluate at")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--dataset-root", type=Path, help="directory holding hopper/medium-v0 (required)")
    parser.add_argument("--root", type=Path, help="run directories go here (required)")
    parser.add_argument("--out", type=Path, default=None, help="write the records as JSON")
    parser.add_argument("--set", nargs="*", default=[], help="extra config overrides for every run")
    tiny = ["algo.loop.iteration_steps=10", "algo.loop.batch_size=32", "policy.hidden=[32,32]"]
    smoke = {
        "seeds": [0],
        "algos": ["iql", "fql", "qgf", "expo"],
        "offline_updates": 10,
        "online": [10],
        "episodes": 1,
        "set": tiny,
    }
    args = parse_smoke_args(parser, smoke=smoke)
    if not args.smoke and (args.dataset_root is None or args.root is None):
        parser.error("the following arguments are required: --dataset-root, --root")
    print(
        f"offline_hopper {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"{' '.join(sys.argv[1:])}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as temporary:  # --smoke: the stand-in dataset and the runs, unless given
        args.root = args.root or Path(temporary) / "runs"
        args.dataset_root = args.dataset_root or smoke_hopper_dataset(Path(temporary))
        records = run_all(args)
    print_table(args, records)
    return 0


def run_all(args) -> list[dict]:
    """Every (seed, algorithm) run: offline updates, then online to each ``--online`` count, evaluated at each."""
    online = sorted(args.online)
    records = []
    for seed in args.seeds:
        for algo in args.algos:
            overrides = [f"seed={seed}", f"total_steps={online[-1] if online else 0}",
                         f"algo.loop.offline_updates={args.offline_updates}",
                         f"algo.loop.dataset_root={args.dataset_root}", f"log.run_root={args.root}",
                         "log.progress=false", "log.eval_episodes=0", *args.set]  # fmt: skip
            config = load_config(str(CONFIGS / f"{algo}_hopper.yaml"), overrides)
            per_iteration = config.algo.loop.iteration_steps  # on one env: updates (offline) or env steps (online)
            offline_iterations = math.ceil(args.offline_updates / per_iteration)
            run_dir, seconds = quiet(config, stop_at_iteration=offline_iterations)
            eval_seed = 10_000 + seed
            stages = {"offline": evaluate(run_dir, args.episodes, eval_seed, return_figures)}
            walls = {"offline": seconds}
            for steps in online:
                stop = offline_iterations + steps // per_iteration
                _, seconds = quiet(config, resume_dir=run_dir, stop_at_iteration=stop)
                stages[str(steps)] = evaluate(run_dir, args.episodes, eval_seed, return_figures)
                walls[str(steps)] = seconds
            record = {"algo": algo, "seed": seed, "stages": stages, "seconds": walls, "run_dir": str(run_dir)}
            records.append(record)
            line = " | ".join(
                f"{stage} det {figures['deterministic']['return']:7.1f} sto {figures['stochastic']['return']:7.1f} "
                f"({walls[stage]:.0f} s)"
                for stage, figures in stages.items()
            )
            print(f"  seed {seed} {algo}: {line}", flush=True)
            if args.out:
                args.out.write_text(json.dumps(records, indent=1))
    return records


def print_table(args, records: list[dict]) -> None:
    """Mean +- std over seeds of the returns per algorithm and stage."""
    print(f"\n{'algo':5} {'stage':8} {'deterministic':>20} {'stochastic':>20}")
    for algo in args.algos:
        rows = [r for r in records if r["algo"] == algo]
        for stage in ["offline", *map(str, sorted(args.online))]:
            cells = [
                mean_std([r["stages"][stage][mode]["return"] for r in rows]) for mode in ("deterministic", "stochastic")
            ]
            print(f"{algo:5} {stage:8} {cells[0]:>20} {cells[1]:>20}")


if __name__ == "__main__":
    sys.exit(main())
