"""Gaussian PPO vs FPO (flow policy) on the multimodal point-mass task ``robopt/MultiGoal``.

The task (``robopt/envs/multigoal.py``) has K equally good goals with walls between them, so the best first
actions form K separated modes. ``configs/ppo_multimodal.yaml`` and ``configs/fpo_multimodal.yaml`` share the env,
rollout and budget. Each (seed, algo) run trains once to the largest of ``--budgets`` (that one run's learning-rate
schedule), stopping and checkpointing at each smaller budget (``train(stop_at_iteration=...)``, then continued
with ``resume_dir``): the policy at each budget is evaluated on ``--episodes`` fresh envs (seed 10000 + seed),
exactly one episode per env row, once with the deterministic action and once sampling. Runs go one at a time.

Figures per (algo, budget), mean +- sample std over seeds of the per-seed values:

- ``return``: mean episode return, deterministic and stochastic;
- ``success``: fraction of episodes that reached a goal;
- ``modes``: goals reached by at least 2% of the episodes (and as a fraction of K);
- ``entropy``: entropy of the reached-goal histogram (successful episodes only) over log K: 0 when every
  success is at one goal, 1 when uniform over the K goals; 0 when no episode succeeds. The start has +-0.05
  noise, so even the deterministic policy can reach several goals;
- ``train s``, ``steps/s``: training wall seconds of the loop (evaluation and checkpoint loading excluded) and
  env steps per second of them, cumulative up to that budget.

Budgets are rounded down to whole iterations (rollout.num_steps x env.num_envs env steps). ``--run-root``
defaults to a temporary directory, deleted at the end unless ``--keep``; a given ``--run-root`` is kept.

    .venv/bin/python benchmarks/multimodal.py --seeds 0 1 2 3 4 --budgets 50000 200000 --out multimodal.json
    .venv/bin/python benchmarks/multimodal.py --seeds 0 --budgets 4096 8192 --episodes 20
    .venv/bin/python benchmarks/multimodal.py --fpo-override policy.steps=8 --override env.kwargs.num_goals=6
    .venv/bin/python benchmarks/multimodal.py --smoke    # CI: 8 envs x 8 steps, budgets of 1 and 2 iterations
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import math
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CONFIG_FILES = {"ppo": CONFIGS / "ppo_multimodal.yaml", "fpo": CONFIGS / "fpo_multimodal.yaml"}
RESERVED = ("seed", "total_steps", "log.run_root", "log.progress", "log.eval_episodes")  # set by this script
MODE_SHARE = 0.02  # a goal counts as a covered mode when at least this share of the episodes reach it
EVAL_SEED_OFFSET = 10_000
MODES = ("deterministic", "stochastic")


@torch.no_grad()
def run_episodes(policy, env, seed: int, deterministic: bool) -> tuple[list[float], list[int]]:
    """One episode per env row: (return per row, goal index reached at that episode's end or -1 per row)."""
    obs = env.reset(seed=seed)  # [N, D]
    torch.manual_seed(seed)  # the stochastic policy's draws
    returns = torch.full((env.num_envs,), float("nan"))  # [N]
    reached = torch.full((env.num_envs,), -1, dtype=torch.int64)  # [N]
    finished = torch.zeros(env.num_envs, dtype=torch.bool)  # [N]
    while not bool(finished.all()):
        action, _ = policy.act(obs, deterministic=deterministic)  # [N, A]
        action = torch.maximum(torch.minimum(action, env.action_high), env.action_low)
        obs, _, terminated, truncated, info = env.step(action)
        first = (terminated | truncated).cpu() & ~finished  # [N]: rows whose first episode ends now
        returns[first] = info["episode_return"].cpu().float()[first]
        reached[first] = info["reached_goal"].cpu()[first]
        finished |= first
    return returns.tolist(), reached.tolist()


def goal_figures(returns: list[float], reached: list[int], num_goals: int) -> dict:
    """Mean return, success rate, covered modes, normalized goal entropy and the goal histogram [K]."""
    histogram = [sum(1 for goal in reached if goal == k) for k in range(num_goals)]
    successes = sum(histogram)
    shares = [count / successes for count in histogram if count > 0] if successes else []
    entropy = -sum(p * math.log(p) for p in shares) / math.log(num_goals)
    modes = sum(1 for count in histogram if count > 0 and count >= MODE_SHARE * len(reached))
    return {
        "return": statistics.mean(returns),
        "success": successes / len(reached),
        "modes": modes,
        "modes_fraction": modes / num_goals,
        "entropy": abs(entropy),  # -0.0 when one goal
        "histogram": histogram,
    }


def evaluate(run_dir: Path, episodes: int, seed: int) -> dict:
    """Both evaluation modes of the run's latest checkpoint: {mode: goal_figures(...)} plus K."""
    from robopt.build import build_env
    from robopt.evaluation import load_policy

    config, policy = load_policy(run_dir)
    env = build_env(config, num_envs=episodes)
    try:
        figures = {
            mode: goal_figures(*run_episodes(policy, env, seed, mode == "deterministic"), env.num_goals)
            for mode in MODES
        }
        return {"num_goals": env.num_goals, **figures}
    finally:
        env.close()


def train_segment(config, run_dir: Path | None, stop_at: int) -> tuple[Path, int, float]:
    """Train (or continue ``run_dir``) up to iteration ``stop_at``: (run dir, env steps, loop wall seconds so far)."""
    from robopt.checkpoint import LAST_CHECKPOINT, load_checkpoint
    from robopt.runner import train

    with contextlib.redirect_stdout(io.StringIO()):  # train's "robopt: training ..." line, once per segment
        result = train(config, resume_dir=run_dir, stop_at_iteration=stop_at)
    if result.iterations != stop_at:
        raise RuntimeError(f"training stopped at iteration {result.iterations}, expected {stop_at}")
    wall_time = float(load_checkpoint(result.run_dir / LAST_CHECKPOINT)["wall_time"])
    return result.run_dir, result.env_steps, wall_time


def run_one(algo: str, seed: int, args, overrides: list[str], run_root: Path) -> list[dict]:
    """Train one (algo, seed) run through every budget; one record per budget."""
    from robopt.experiment import load_config

    config = load_config(
        CONFIG_FILES[algo],
        [
            *overrides,
            f"total_steps={max(args.budgets)}",
            f"seed={seed}",
            f"log.run_root={run_root}",
            "log.progress=false",
            "log.eval_episodes=0",
        ],
    )
    per_iteration = config.rollout.num_steps * config.env.num_envs
    records, run_dir = [], None
    for budget in args.budgets:
        start = time.perf_counter()
        run_dir, env_steps, train_s = train_segment(config, run_dir, budget // per_iteration)
        call_s = time.perf_counter() - start
        figures = evaluate(run_dir, args.episodes, EVAL_SEED_OFFSET + seed)
        records.append(
            {
                "algo": algo,
                "seed": seed,
                "budget": budget,
                "env_steps": env_steps,
                "train_s": train_s,
                "steps_per_s": env_steps / train_s,
                "segment_call_s": call_s,
                **figures,
            }
        )
        print(f"  {seed_line(records[-1])}", flush=True)
    return records


def seed_line(record: dict) -> str:
    """One line of a run's figures at one budget."""
    parts = [f"seed {record['seed']} {record['algo']} @ {record['env_steps']}:"]
    for mode in MODES:
        f = record[mode]
        parts.append(
            f"{mode[:5]} return {f['return']:7.2f} success {f['success']:.2f} modes {f['modes']} "
            f"entropy {f['entropy']:.2f} goals {f['histogram']} |"
        )
    parts.append(f"train {record['train_s']:.1f} s, {record['steps_per_s']:.0f} steps/s")
    return " ".join(parts)


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample std over seeds (std 0 with one seed)."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(records: list[dict]) -> dict:
    """Mean and std over seeds of every figure, per mode and for training time."""
    summary: dict = {"seeds": [r["seed"] for r in records], "env_steps": records[0]["env_steps"]}
    for mode in MODES:
        summary[mode] = {
            key: mean_std([r[mode][key] for r in records])
            for key in ("return", "success", "modes", "modes_fraction", "entropy")
        }
    for key in ("train_s", "steps_per_s"):
        summary[key] = mean_std([r[key] for r in records])
    return summary


def summary_row(algo: str, mode: str, summary: dict) -> str:
    """One table row: the mode's figures; training time on the first mode's row only."""
    s = summary[mode]
    cells = [
        f"{s[key][0]:{width}.{digits}f} +- {s[key][1]:<{digits + 3}.{digits}f}"
        for key, width, digits in (("return", 7, 2), ("success", 4, 2), ("modes", 3, 1))
    ]
    row = (
        f"{algo:5s} {mode[:5]:6s} {' '.join(cells)} {s['modes_fraction'][0]:6.2f} "
        f"{s['entropy'][0]:5.2f} +- {s['entropy'][1]:<4.2f}"
    )
    if mode != MODES[0]:
        return row
    return f"{row} {summary['train_s'][0]:6.1f} +- {summary['train_s'][1]:<4.1f} {summary['steps_per_s'][0]:12.0f}"


def print_tables(records: list[dict], algos: list[str], budgets: list[int], episodes: int) -> dict:
    """A table per budget (summary row per algo and mode, then the per-seed lines); returns the summaries."""
    summaries: dict = {}
    for budget in budgets:
        num_goals = next(r["num_goals"] for r in records if r["budget"] == budget)
        print(
            f"\nbudget {budget} env steps: {episodes} episodes per mode, K = {num_goals} goals, mean +- std over seeds"
        )
        print(
            f"{'algo':5s} {'mode':6s} {'return':>16s} {'success':>13s} {'modes':>11s} {'of K':>6s} "
            f"{'entropy':>13s} {'train s':>14s} {'steps/s':>12s}"
        )
        for algo in algos:
            rows = [r for r in records if r["algo"] == algo and r["budget"] == budget]
            if not rows:
                continue
            summary = summaries.setdefault(algo, {})[budget] = summarize(rows)
            for mode in MODES:
                print(summary_row(algo, mode, summary))
        for record in (r for r in records if r["budget"] == budget):
            print(f"  {seed_line(record)}")
    return summaries


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--budgets", type=int, nargs="+", default=[50_000, 200_000], help="env steps to evaluate at")
    parser.add_argument("--episodes", type=int, default=200, help="evaluation episodes per mode")
    parser.add_argument("--algos", nargs="+", choices=tuple(CONFIG_FILES), default=list(CONFIG_FILES))
    parser.add_argument("--override", nargs="*", default=[], help="key=value overrides of both configs")
    parser.add_argument("--ppo-override", nargs="*", default=[], help="key=value overrides of the PPO config")
    parser.add_argument("--fpo-override", nargs="*", default=[], help="key=value overrides of the FPO config")
    parser.add_argument("--out", type=Path, default=None, help="JSON file for every figure")
    parser.add_argument("--run-root", type=Path, default=None, help="run directories (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary run directories")
    tiny = ["env.num_envs=8", "rollout.num_steps=8", "algo.minibatch_size=64"]
    args = parse_smoke_args(parser, smoke={"seeds": [0], "budgets": [64, 128], "episodes": 4, "override": tiny})
    if args.episodes < 1 or min(args.budgets) < 1:
        parser.error("--episodes and --budgets must be positive integers")
    args.budgets = sorted(set(args.budgets))
    for item in (*args.override, *args.ppo_override, *args.fpo_override):
        if item.split("=", 1)[0] in RESERVED:
            parser.error(f"override {item!r}: {', '.join(RESERVED)} are set by this script")
    return args


def check_budgets(args, overrides: dict[str, list[str]]) -> str:
    """Each algo's iteration size fits the budgets (one-line error otherwise); returns the header's threads part."""
    from robopt.build import resolve_torch_threads
    from robopt.config import ConfigError
    from robopt.experiment import load_config

    threads = []
    for algo in args.algos:
        config = load_config(CONFIG_FILES[algo], overrides[algo])
        per_iteration = config.rollout.num_steps * config.env.num_envs
        iterations = [budget // per_iteration for budget in args.budgets]
        if iterations[0] < 1 or len(set(iterations)) < len(iterations):
            raise ConfigError(
                f"{algo}: budgets {args.budgets} must each be at least one iteration of "
                f"{per_iteration} env steps (rollout.num_steps x env.num_envs) and round down to "
                "distinct iterations"
            )
        count, why = resolve_torch_threads(config)
        threads.append(f"{algo} {count} ({why}), device {config.device}")
    return "; ".join(threads)


def main() -> None:
    from robopt.config import ConfigError

    args = parse_args()
    overrides = {algo: [*args.override, *getattr(args, f"{algo}_override")] for algo in CONFIG_FILES}
    try:
        threads = check_budgets(args, overrides)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    command = shlex.join(["benchmarks/multimodal.py", *sys.argv[1:]])
    header = (
        f"robopt multimodal benchmark, {datetime.datetime.now().isoformat(timespec='seconds')} | torch "
        f"{torch.__version__}, threads: {threads} | command: {command} | "
        + " | ".join(f"{algo} overrides: {' '.join(overrides[algo]) or '-'}" for algo in args.algos)
    )
    print(header, flush=True)
    run_root = args.run_root or Path(tempfile.mkdtemp(prefix="robopt-multimodal-"))
    records: list[dict] = []
    try:
        for seed in args.seeds:
            for algo in args.algos:
                records += run_one(algo, seed, args, overrides[algo], run_root)
                if args.out:
                    args.out.write_text(json.dumps({"header": header, "records": records}, indent=1))
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
    finally:
        if args.run_root is None and not args.keep:
            shutil.rmtree(run_root, ignore_errors=True)
        elif records or args.keep:
            print(f"run directories kept under {run_root}")
    summaries = print_tables(records, args.algos, args.budgets, args.episodes)
    if args.out:
        args.out.write_text(json.dumps({"header": header, "summaries": summaries, "records": records}, indent=1))
        print(f"figures written to {args.out}")


if __name__ == "__main__":
    main()
