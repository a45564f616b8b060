"""How well the quadruped follows velocity commands: train seeds with configs/ppo_quadruped_velocity.yaml, then
evaluate each run's deterministic policy.

    python benchmarks/quadruped_tracking.py --train --seeds 0 1 2 --total-steps 13500000
    python benchmarks/quadruped_tracking.py --evaluate runs/bench_quadruped/*/
    python benchmarks/quadruped_tracking.py --smoke    # CI: 32 training steps of small networks, 2 episodes

Evaluation: ``--episodes`` rows of 20 s episodes (one per env row), commands uniform in forward [-1, 1] m/s, lateral
[-0.5, 0.5] m/s and yaw rate [-1, 1] rad/s (the config's ranges, no standing share: every command moves), a new
command after 10 s, the observation noise of training kept (a robot's sensors are noisy). Per control step:
planar velocity error |v_cmd - v_xy| in the base frame (MuJoCo's velocimeter at the IMU) and yaw-rate error
|w_cmd - w_z|, for the command the policy saw. "steady" leaves out the first second after each new command (the
robot's response time); "all" keeps every step. A fall is an episode that ends terminated before 20 s. Training
wall time and env steps come from the run's progress.csv (robopt's own clock: evaluations excluded).

On terrain (``--config configs/ppo_quadruped_terrain.yaml``, docs/legged.md) the evaluation rows stand on the run's
terrain with its curriculum's starting levels, and a terrain report follows: the mean level per type over training
(``env/terrain_level/<type>`` from progress.csv, ten points) and, from the final checkpoint, how the training rows
are spread over the levels of each type and the share in the top third of the levels.
"""

from __future__ import annotations

import argparse
import csv
import math
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.build import build_env
from robopt.envs.robot.signals import Signals
from robopt.evaluation import load_policy

ROOT = Path(__file__).resolve().parents[1]
SETTLE_S = 1.0  # response time left out of the steady-state errors
TINY = [
    "env.num_envs=4",
    "rollout.num_steps=8",
    "algo.minibatch_size=32",
    "policy.hidden=[32,32]",
    "critic.hidden=[32,32]",
    "torch_threads=1",
]  # --smoke's training: one 32-step iteration of small networks


@torch.no_grad()
def evaluate(run_dir: Path, episodes: int, seed: int) -> dict:
    config, policy = load_policy(run_dir)
    commands = {**config.task.commands, "standing": 0.0}
    sections = {**config.sections, "task": replace(config.task, commands=commands)}
    config = replace(config, sections=sections, env=replace(config.env, num_envs=episodes))
    env = build_env(config)
    inner = env
    while hasattr(inner, "inner"):  # a history window's wrapper: the task and simulator are the inner env's
        inner = inner.inner
    task = inner.task
    obs = env.reset(seed=seed)
    alive = torch.ones(episodes, dtype=torch.bool)  # rows still in their first episode
    fell = torch.zeros(episodes, dtype=torch.bool)
    since_change = torch.zeros(episodes)  # seconds since the row's command last changed
    sums = {key: torch.zeros(episodes) for key in ("vel_all", "yaw_all", "vel_steady", "yaw_steady")}
    counts = {"all": torch.zeros(episodes), "steady": torch.zeros(episodes)}
    previous = task.context.command.clone()
    while alive.any():
        command = task.context.command.clone()  # what the policy sees and the reward scores
        since_change = torch.where((command != previous).any(1), torch.zeros_like(since_change), since_change)
        previous = command
        action, _ = policy.act(obs, deterministic=True)
        obs, _, terminated, truncated, _ = env.step(action)
        signals = Signals(inner.physics.state(), task.robot, task.context)
        velocity_error = (command[:, :2] - signals.base_lin_vel[:, :2]).norm(dim=1).float()
        yaw_error = (command[:, 2] - signals.base_ang_vel[:, 2]).abs().float()
        done = terminated | truncated
        counted = alive & ~done  # a row's reset state is not its episode's
        steady = counted & (since_change >= SETTLE_S)
        for key, mask in (("all", counted), ("steady", steady)):
            sums[f"vel_{key}"] += velocity_error * mask
            sums[f"yaw_{key}"] += yaw_error * mask
            counts[key] += mask
        fell |= alive & terminated
        alive &= ~done
        since_change += env.dt
    env.close()
    result = {key: float(value.sum() / counts[key.split("_")[1]].sum()) for key, value in sums.items()}
    result["falls"] = float(fell.float().mean())
    result.update(training_cost(run_dir))
    return result


def training_cost(run_dir: Path) -> dict:
    rows = list(csv.DictReader((run_dir / "progress.csv").open()))
    return {"env_steps": int(rows[-1]["env_steps"]), "wall_time_s": float(rows[-1]["wall_time"])}


def train(config: str, seeds: list[int], total_steps: int, root: Path, extra: list[str], budget_s: float) -> list[Path]:
    """One run per seed; with ``budget_s`` a run gets Ctrl-C after that long (robopt saves and stops)."""
    runs = []
    for seed in seeds:
        name = f"quadruped_seed{seed}"
        command = [sys.executable, "-m", "robopt", "train", config, f"seed={seed}", f"total_steps={total_steps}",
                   f"name={name}", f"log.run_root={root}", "log.eval_episodes=0", "--no-progress", *extra]  # fmt: skip
        print("$", " ".join(command[2:]), flush=True)
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT)
        try:
            process.wait(timeout=budget_s or None)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGINT)  # the runner writes its checkpoint and stops
            process.wait()
        print(f"seed {seed}: {time.perf_counter() - start:.0f} s including start-up", flush=True)
        runs.append(sorted((root / name).iterdir())[-1])
    return runs


def _terrain_state(state: dict) -> dict:
    """The terrain rows' state (level, column...) inside an env's state, a wrapper's (a history window) included."""
    if "level" in state and "column" in state:
        return state
    for value in state.values():
        if isinstance(value, dict) and (found := _terrain_state(value)):
            return found
    return {}


def terrain_report(run_dir: Path) -> None:
    """The curriculum's course (progress.csv) and where it left the rows (the last checkpoint); nothing off terrain."""
    rows = list(csv.DictReader((run_dir / "progress.csv").open()))
    types = sorted(key.split("/")[-1] for key in rows[0] if key.startswith("env/terrain_level/"))
    if not types:
        return
    print(f"terrain levels of {run_dir} (mean level per type over training):")
    print("env steps  wall s | all   | " + " ".join(f"{name:>11}" for name in types))
    picks = sorted({round(i * (len(rows) - 1) / 9) for i in range(10)})
    for row in (rows[i] for i in picks):
        levels = " ".join(f"{float(row[f'env/terrain_level/{name}'] or 'nan'):11.2f}" for name in types)
        mean = float(row["env/terrain_level"])
        print(f"{int(row['env_steps']):9d} {float(row['wall_time']):7.0f} | {mean:5.2f} | {levels}")
    state = _terrain_state(torch.load(run_dir / "checkpoints" / "last.pt", weights_only=False)["loop"]["env"])
    config, _ = load_policy(run_dir)
    terrain = config.task.terrain
    from robopt.envs.robot.terrain import column_types

    kinds = column_types(terrain)
    top = math.ceil(2 * terrain.levels / 3)  # the top third: levels top..levels-1
    print(f"rows per level at the end (levels 0..{terrain.levels - 1}; top third: {top}+):")
    for name in dict.fromkeys(kinds):
        chosen = torch.tensor([kinds[c] == name for c in state["column"].tolist()])
        levels = state["level"][chosen]
        counts = torch.bincount(levels, minlength=terrain.levels).tolist()
        share = float((levels >= top).float().mean())
        print(f"  {name:<12} {counts}  top third {share:.2f}")


def report(results: dict[Path, dict]) -> None:
    keys = ("vel_steady", "vel_all", "yaw_steady", "yaw_all", "falls", "env_steps", "wall_time_s")
    print("run | " + " | ".join(keys))
    for run, result in results.items():
        print(f"{run} | " + " | ".join(f"{result[key]:.4g}" for key in keys))
    if len(results) > 1:
        print("mean +- std over runs:")
        for key in keys:
            values = [result[key] for result in results.values()]
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
            print(f"  {key}: {mean:.4g} +- {std:.2g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/ppo_quadruped_velocity.yaml")
    parser.add_argument("--train", action="store_true", help="train --seeds first, then evaluate them")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--total-steps", type=int, default=13_500_000)
    parser.add_argument("--budget-s", type=float, default=0.0, help="stop each training after this long (0: none)")
    parser.add_argument("--root", type=Path, default=Path("runs/bench_quadruped"), help="--smoke: temporary")
    parser.add_argument("--evaluate", type=Path, nargs="*", default=[], help="run directories to evaluate")
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--seed", type=int, default=10_000, help="evaluation seed")
    parser.add_argument("overrides", nargs="*", help="config overrides for --train (key=value)")
    smoke = {"train": True, "seeds": [0], "total_steps": 32, "root": None, "episodes": 2, "overrides": TINY}
    args = parse_smoke_args(parser, smoke=smoke)
    with tempfile.TemporaryDirectory() as temporary:  # the runs of --smoke without --root
        runs = list(args.evaluate)
        if args.train:
            root = args.root or Path(temporary)
            runs += train(args.config, args.seeds, args.total_steps, root, args.overrides, args.budget_s)
        if not runs:
            parser.error("nothing to do: give --train or --evaluate RUN...")
        results = {}
        for run in runs:
            results[run] = evaluate(run, args.episodes, args.seed)
            print(run, {key: round(value, 4) for key, value in results[run].items()}, flush=True)
            terrain_report(run)
    report(results)


if __name__ == "__main__":
    main()
