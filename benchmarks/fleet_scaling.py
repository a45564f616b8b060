"""Fleet scaling: success on held-out robots after the same learner budget, for fleets of 1, 4 and 16 robots.

    .venv/bin/python benchmarks/fleet_scaling.py --fleets 1 4 16 --seeds 0 1 2 --out docs/images/fleet_scaling.png
    .venv/bin/python benchmarks/fleet_scaling.py --fleets 1 2 --seeds 0 --steps-per-robot 150 --heldout 1  # short
    .venv/bin/python benchmarks/fleet_scaling.py --smoke    # CI: one robot, 100 steps, 32-wide networks, 1 held-out

The claim under test (collective experience learning): with the collection time per robot held fixed, a larger
fleet gives a better common policy. Every run is ``--config`` (default ``configs/fleet_sac_reach.yaml``, SAC +
HER on the goal-conditioned reach task) with ``fleet.num_robots`` R, each robot collecting the same
``--steps-per-robot`` env steps with its own fixed dynamics drawn from ``--randomization`` (robot r: seed (seed, r),
``robopt.fleet.config.robot_randomization``). The learner budget is the same for every R: the fleet loop owes
``gradient_steps`` updates per R transitions pushed past ``learning_starts``, and ``learning_starts`` is
``--warmup-per-robot`` x R (each robot acts at random for its first steps, whatever R), so every run does
``--gradient-steps`` x (steps per robot - warm-up per robot) updates (printed from the loop's count). The defaults
(300 steps per robot, 16 updates per R transitions: 3200 updates) put the learner where data, not updates, is
short: one robot's 300 steps are six episodes.

Held-out robots: ``--heldout`` robots with ids 10000, 10001, ... draw their dynamics from the same ranges with the
run's seed: no training robot has them. The final policy runs ``--episodes`` deterministic episodes on each
(one env per robot, its fixed dynamics); the figure is the success rate over all of them. Runs go one at a time;
Ray runs embedded (each robot a quarter CPU at most, so every fleet size fits this machine). ``--set`` overrides
every run; ``--smoke`` without ``--out`` writes no plot.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import mean_std, quiet_train  # noqa: E402
from smoke import parse_smoke_args  # noqa: E402

from robopt.build import build_env  # noqa: E402
from robopt.evaluation import evaluate_policy, load_policy  # noqa: E402
from robopt.fleet.config import robot_randomization  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
HELDOUT_BASE = 10_000  # held-out robot ids start here: far above any training robot id


def heldout_success(run_dir: Path, robots: int, episodes: int, seed: int = 10_000) -> tuple[float, list[float]]:
    """Deterministic success rate of the run's final policy on ``robots`` unseen robots (module doc)."""
    config, policy = load_policy(run_dir)
    rates = []
    for index in range(robots):
        fixed = robot_randomization(config.fleet.randomization, config.seed, HELDOUT_BASE + index)
        env = build_env(config, num_envs=episodes, **{**config.env.kwargs, "randomization": fixed})
        try:
            rates.append(evaluate_policy(policy, env, episodes, seed + index).success_rate)
        finally:
            env.close()
    return sum(rates) / len(rates), rates


def fleet_overrides(
    robots: int, steps: int, warmup: int, randomization: str, seed: int, root: Path, gradient_steps: int
) -> list[str]:
    """The command-line overrides of one fleet run of ``robots`` robots."""
    return [
        f"seed={seed}",
        f"fleet.num_robots={robots}",
        f"fleet.steps_per_robot={steps}",
        f"algo.loop.gradient_steps={gradient_steps}",
        f"total_steps={robots * steps}",
        f"algo.loop.learning_starts={warmup * robots}",
        f"fleet.cpus_per_robot={min(0.25, 1.0 / robots)}",
        f"fleet.randomization={randomization}",
        f"log.run_root={root}",
        "log.progress=false",
        "log.eval_episodes=0",
        "log.checkpoint_every=1000",
    ]


def last_metrics(run_dir: Path) -> dict:
    """The last logged row of the run's progress.csv, as floats (empty cells skipped)."""
    import csv

    with open(run_dir / "progress.csv") as handle:
        rows = list(csv.DictReader(handle))
    return {key: float(value) for key, value in rows[-1].items() if value not in ("", None)}


def plot(records: list[dict], fleets: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 3.5))
    for record in records:
        axis.scatter(record["robots"], record["success"], color="0.6", s=12)
    means = [
        sum(r["success"] for r in records if r["robots"] == n) / max(1, sum(r["robots"] == n for r in records))
        for n in fleets
    ]
    axis.plot(fleets, means, marker="o", color="C0", label="mean over seeds")
    axis.set_xscale("log", base=2)
    axis.set_xticks(fleets, [str(n) for n in fleets])
    axis.set_xlabel("robots in the fleet (same steps per robot)")
    axis.set_ylabel("success on held-out robots")
    axis.set_ylim(-0.05, 1.05)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIGS / "fleet_sac_reach.yaml")
    parser.add_argument("--fleets", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps-per-robot", type=int, default=300)
    parser.add_argument("--warmup-per-robot", type=int, default=100, help="random-action steps per robot")
    parser.add_argument("--gradient-steps", type=int, default=16, help="updates per R transitions pushed")
    parser.add_argument("--randomization", default="{actuator_gain: [0.4, 1.6], body_mass: [0.5, 2.0]}")
    parser.add_argument("--heldout", type=int, default=8, help="unseen robots scored at the end")
    parser.add_argument("--episodes", type=int, default=10, help="deterministic episodes per held-out robot")
    parser.add_argument("--out", type=Path, default=None, help="plot (PNG); the JSON records go next to it")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more overrides of every run")
    tiny = ["policy.hidden=[32,32]", "algo.critic_hidden=[32,32]", "algo.loop.batch_size=32"]
    smoke = {
        "fleets": [1],
        "seeds": [0],
        "steps_per_robot": 100,
        "warmup_per_robot": 50,
        "gradient_steps": 1,
        "heldout": 1,
        "episodes": 2,
        "set": tiny,
    }
    args = parse_smoke_args(parser, smoke=smoke)
    print(
        f"fleet_scaling {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"{os.cpu_count()} cores | {' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    records = []
    with tempfile.TemporaryDirectory() as temporary:
        for seed in args.seeds:
            for robots in args.fleets:
                overrides = (
                    fleet_overrides(
                        robots,
                        args.steps_per_robot,
                        args.warmup_per_robot,
                        args.randomization,
                        seed,
                        Path(temporary),
                        args.gradient_steps,
                    )
                    + args.set
                )
                start = time.perf_counter()
                run_dir, _ = quiet_train(args.config, overrides)
                seconds = time.perf_counter() - start
                success, _ = heldout_success(run_dir, args.heldout, args.episodes)
                logged = last_metrics(run_dir)
                record = {"seed": seed, "robots": robots, "success": success, "seconds": seconds,
                          "updates": logged.get("learner_updates", float("nan")),
                          "train_success": logged.get("success_rate", float("nan"))}  # fmt: skip
                records.append(record)
                print(
                    f"  seed {seed} robots {robots:3}: held-out success {success:.3f} | learner updates "
                    f"{record['updates']:.0f} | last training success {record['train_success']:.2f} | "
                    f"{seconds:.0f} s",
                    flush=True,
                )
    print(f"\n{'robots':>6} {'held-out success':>18} {'transitions':>12} {'wall s':>14}")
    for robots in args.fleets:
        mine = [record for record in records if record["robots"] == robots]
        print(
            f"{robots:>6} {mean_std([r['success'] for r in mine]):>18} {robots * args.steps_per_robot:>12} "
            f"{mean_std([r['seconds'] for r in mine]):>14}"
        )
    if args.out:
        plot(records, args.fleets, args.out)
        args.out.with_suffix(".json").write_text(json.dumps(records, indent=1))
        print(f"plot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
