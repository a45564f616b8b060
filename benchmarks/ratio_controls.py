"""PPO ratio controls side by side on HalfCheetah-v5: final return and how far the ratio drifts from 1.

Each control trains from its config (``clip``: configs/ppo_halfcheetah.yaml, others:
configs/ppo_<control>_halfcheetah.yaml; all share rl-zoo's tuned HalfCheetah PPO settings) for the same
number of env steps and the same seeds. Printed per control (mean +- std over seeds):

- ``eval``: 5-episode deterministic evaluation return at the end of training;
- ``train``: mean return of the episodes that ended in the last 5 iterations;
- ``mean|r-1|``: after each update, mean |r - 1| over the whole rollout, averaged over updates;
- ``max r``: after each update, max r over the rollout, averaged over updates; ``peak r`` is the largest.

The seeds' claim under test: SPO's penalty keeps r inside the trust region better than clipping.

    .venv/bin/python benchmarks/ratio_controls.py --steps 50000 --seeds 0 1 2
    .venv/bin/python benchmarks/ratio_controls.py --steps 50000 --override algo.learning_rate=3e-4
    .venv/bin/python benchmarks/ratio_controls.py --smoke    # CI: 4 iterations of 2 envs x 8 steps, 1 episode
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def config_path(control: str) -> Path:
    return CONFIGS / ("ppo_halfcheetah.yaml" if control == "clip" else f"ppo_{control}_halfcheetah.yaml")


def drift_columns(rows: list[dict[str, str]]) -> tuple[str, str]:
    """After-update whole-batch drift columns if the PPO logs them, else the last epoch's minibatch means."""
    if rows and "batch_ratio_mean_abs_dev" in rows[0]:
        return "batch_ratio_mean_abs_dev", "batch_ratio_max"
    return "ratio_mean_abs_dev", "ratio_max"


def run_one(control: str, seed: int, steps: int, overrides: list[str], episodes: int = 5) -> dict[str, float]:
    from robopt.evaluation import evaluate_run
    from robopt.experiment import load_config
    from robopt.runner import train

    with tempfile.TemporaryDirectory() as run_root:
        config = load_config(
            config_path(control),
            [f"total_steps={steps}", f"seed={seed}", f"log.run_root={run_root}", "log.progress=false", *overrides],
        )
        start = time.perf_counter()
        result = train(config)
        wall = time.perf_counter() - start
        evaluation = evaluate_run(result.run_dir, episodes=episodes)
        with (result.run_dir / "progress.csv").open() as handle:
            rows = list(csv.DictReader(handle))
    mean_column, max_column = drift_columns(rows)
    mean_dev = [float(row[mean_column]) for row in rows if row.get(mean_column)]
    max_ratio = [float(row[max_column]) for row in rows if row.get(max_column)]
    returns = [float(row["episode_return"]) for row in rows if row.get("episode_return")]
    return {
        "eval": evaluation.mean_return,
        "train": float(np.mean(returns[-5:])) if returns else float("nan"),
        "mean_dev": float(np.mean(mean_dev)),
        "max_r": float(np.mean(max_ratio)),
        "peak_r": float(np.max(max_ratio)),
        "steps_per_s": result.env_steps / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--controls", nargs="+", default=["clip", "spo_penalty", "sigmoid_gate"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=50_000, help="env steps per run")
    parser.add_argument("--override", nargs="*", default=[], help="key=value applied to every run")
    parser.add_argument("--episodes", type=int, default=5, help="deterministic evaluation episodes at the end")
    tiny = ["env.num_envs=2", "rollout.num_steps=8", "log.eval_episodes=0"]
    args = parse_smoke_args(parser, smoke={"seeds": [0], "steps": 64, "override": tiny, "episodes": 1})

    results: dict[str, list[dict[str, float]]] = {}
    for control in args.controls:
        for seed in args.seeds:
            row = run_one(control, seed, args.steps, args.override, args.episodes)
            results.setdefault(control, []).append(row)
            print(f"{control:16s} seed {seed}: " + "  ".join(f"{k} {v:.4g}" for k, v in row.items()), flush=True)

    print(f"\nHalfCheetah-v5, {args.steps} steps, seeds {args.seeds}, overrides {args.override or 'none'}")
    print(f"{'control':16s} {'eval':>16s} {'train':>16s} {'mean|r-1|':>16s} {'max r':>14s} {'peak r':>7s}")
    for control, rows in results.items():
        cells = []
        for key, width, fmt in (
            ("eval", 16, ".0f"),
            ("train", 16, ".0f"),
            ("mean_dev", 16, ".4f"),
            ("max_r", 14, ".3f"),
        ):
            values = np.array([row[key] for row in rows])
            cells.append(f"{values.mean():{fmt}} +- {values.std():{fmt}}".rjust(width))
        peak = max(row["peak_r"] for row in rows)
        print(f"{control:16s} " + " ".join(cells) + f" {peak:7.3f}")


if __name__ == "__main__":
    main()
