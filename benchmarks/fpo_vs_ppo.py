"""FPO (flow policy) next to Gaussian PPO on one task, same budget and seeds, run one after the other.

    .venv/bin/python benchmarks/fpo_vs_ppo.py                                   # HalfCheetah, 1M steps, seed 0
    .venv/bin/python benchmarks/fpo_vs_ppo.py --steps 200000 --seeds 0 1 2
    .venv/bin/python benchmarks/fpo_vs_ppo.py --ppo configs/ppo_multimodal.yaml --fpo configs/fpo_multimodal.yaml
    .venv/bin/python benchmarks/fpo_vs_ppo.py --smoke    # CI: one 64-step iteration each, 1 evaluation episode

Each run trains from its config with ``total_steps`` and ``seed`` overridden, then evaluates the deterministic
policy on fresh envs (``log.eval_episodes`` episodes, seed + 10000). Printed per run and as mean +- std over
seeds: the deterministic return, the last training episodes' (stochastic) return, training wall time and env
steps per second, and FPO's steps/s as a fraction of PPO's measured in the same invocation. Run nothing else
on the machine meanwhile: the speed figures are only comparable between runs that had the cores to themselves.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.build import resolve_torch_threads
from robopt.config import ConfigError
from robopt.experiment import load_config
from robopt.runner import train


def run_one(path: str, steps: int, seed: int, root: str, overrides: list[str]) -> dict:
    config = load_config(
        path, [*overrides, f"total_steps={steps}", f"seed={seed}", f"log.run_root={root}", "log.progress=false"]
    )
    start = time.perf_counter()
    result = train(config)
    elapsed = time.perf_counter() - start
    rows = list(csv.DictReader((result.run_dir / "progress.csv").open()))
    train_time = float(rows[-1]["wall_time"])
    evaluation = json.loads((result.run_dir / "eval.json").read_text())
    return {
        "config": path,
        "seed": seed,
        "deterministic_return": evaluation["mean_return"],
        "deterministic_std": evaluation["std_return"],
        "last_training_return": result.last_return,
        "train_seconds": train_time,
        "total_seconds": elapsed,
        "steps_per_second": result.env_steps / train_time,
        "threads": resolve_torch_threads(config)[0],
    }


def summary(values: list[float]) -> str:
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:9.1f} +- {std:7.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ppo", default="configs/ppo_halfcheetah_fast.yaml")
    parser.add_argument("--fpo", default="configs/fpo_halfcheetah.yaml")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--override", nargs="*", default=[], help="key=value applied to both configs")
    parser.add_argument("--out", default="", help="write the per-run figures to this JSON file")
    tiny = [
        "env.num_envs=8",
        "rollout.num_steps=8",
        "algo.minibatch_size=32",
        "policy.hidden=[32,32]",
        "critic.hidden=[32,32]",
        "log.eval_episodes=1",
    ]
    args = parse_smoke_args(parser, smoke={"steps": 64, "override": tiny})
    print(
        f"fpo_vs_ppo {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"{' '.join(sys.argv[1:]) or '(defaults)'} | ppo: {args.ppo} | fpo: {args.fpo} | {args.steps} steps",
        flush=True,
    )
    runs: dict[str, list[dict]] = {"ppo": [], "fpo": []}
    with tempfile.TemporaryDirectory() as root:
        for seed in args.seeds:
            for name, path in (("ppo", args.ppo), ("fpo", args.fpo)):
                try:
                    run = run_one(path, args.steps, seed, root, args.override)
                except ConfigError as error:
                    print(f"fpo_vs_ppo: error: {error}", file=sys.stderr)
                    return 2
                runs[name].append(run)
                print(
                    f"  seed {seed} {name}: deterministic {run['deterministic_return']:.1f} +- "
                    f"{run['deterministic_std']:.1f}, last training return {run['last_training_return']}, "
                    f"{run['train_seconds']:.1f} s, {run['steps_per_second']:.0f} steps/s",
                    flush=True,
                )
    print(f"\n{'algo':5} {'deterministic return':>22} {'train s':>20} {'steps/s':>20}")
    for name, values in runs.items():
        returns, seconds = [r["deterministic_return"] for r in values], [r["train_seconds"] for r in values]
        speed = [r["steps_per_second"] for r in values]
        print(f"{name:5} {summary(returns):>22} {summary(seconds):>20} {summary(speed):>20}")
    ratio = statistics.fmean(r["steps_per_second"] for r in runs["fpo"]) / statistics.fmean(
        r["steps_per_second"] for r in runs["ppo"]
    )
    print(f"FPO env steps/s = {ratio:.2f}x PPO's (same invocation, one run at a time)")
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
