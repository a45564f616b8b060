"""How precisely the arm reaches poses: evaluate runs of configs/ppo_arm_reach.yaml or configs/sac_arm_reach.yaml.

    python benchmarks/arm_reach.py --evaluate runs/ppo_arm_reach/<timestamp> runs/sac_arm_reach/<timestamp>
    python benchmarks/arm_reach.py --smoke    # CI: a 32-step stand-in run of ppo_arm_reach.yaml, 2 episodes

Each of ``--episodes`` env rows runs one 8 s episode with the deterministic policy: two targets, a new one every 4 s
(the config's command: position in its box, orientation within its roll, pitch and yaw ranges). For each target
window: the position error |p_target - p_tool| and the orientation error (the angle between the two rotations)
averaged over the window's last ``--hold`` seconds (the settled pose), and the time until the tool first comes
within 1 cm and 0.05 rad. Training wall time and env steps come from the run's progress.csv. ``--smoke`` without
``--evaluate`` trains a tiny stand-in run first.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.build import build_env
from robopt.envs.robot.signals import Signals, quat_angle
from robopt.evaluation import load_policy

POSITION_GOAL, ORIENTATION_GOAL = 0.01, 0.05  # m, rad


@torch.no_grad()
def evaluate(run_dir: Path, episodes: int, seed: int, hold: float) -> dict:
    config, policy = load_policy(run_dir)
    config = replace(config, env=replace(config.env, num_envs=episodes))
    env = build_env(config)
    task, steps = env.task, env.max_episode_steps
    window = round(task.command.resample_s[0] / env.dt)
    held = round(hold / env.dt)
    obs = env.reset(seed=seed)
    position = torch.zeros(episodes, steps)
    orientation = torch.zeros(episodes, steps)
    for t in range(steps):
        command = task.context.command.clone()  # the target the policy sees this step
        action, _ = policy.act(obs, deterministic=True)
        obs, _, terminated, truncated, _ = env.step(action)
        if t == steps - 1:  # the rows reset: the last step's pose is the one before the reset
            break
        signals = Signals(env.physics.state(), task.robot, task.context)
        position[:, t] = (command[:, :3] - signals.ee_pos_base).norm(dim=1).float()
        orientation[:, t] = quat_angle(signals.ee_quat_base, command[:, 3:7]).float()
    env.close()
    settled_position, settled_orientation, reach_time = [], [], []
    for start in range(0, steps - 1, window):
        end = min(start + window, steps - 1)
        settled_position.append(position[:, end - held : end].mean(1))
        settled_orientation.append(orientation[:, end - held : end].mean(1))
        inside = (position[:, start:end] <= POSITION_GOAL) & (orientation[:, start:end] <= ORIENTATION_GOAL)
        first = torch.where(inside.any(1), inside.float().argmax(1).float(), torch.full((episodes,), float("nan")))
        reach_time.append(first * env.dt)
    p, o, r = torch.cat(settled_position), torch.cat(settled_orientation), torch.cat(reach_time)
    rows = list(csv.DictReader((run_dir / "progress.csv").open()))
    return {
        "position_mm": float(p.mean()) * 1000,
        "position_p90_mm": float(p.quantile(0.9)) * 1000,
        "orientation_rad": float(o.mean()),
        "orientation_p90_rad": float(o.quantile(0.9)),
        "within_goal": float(((p <= POSITION_GOAL) & (o <= ORIENTATION_GOAL)).float().mean()),
        "reach_time_s": float(r[~r.isnan()].mean()) if (~r.isnan()).any() else float("nan"),
        "env_steps": int(rows[-1]["env_steps"]),
        "wall_time_s": float(rows[-1]["wall_time"]),
    }


def smoke_run(root: Path) -> Path:
    """``--smoke``'s stand-in for a trained arm: one 32-step PPO iteration of 32-wide networks."""
    from robopt.experiment import load_config
    from robopt.runner import train

    overrides = [
        "env.num_envs=4",
        "rollout.num_steps=8",
        "algo.minibatch_size=32",
        "policy.hidden=[32,32]",
        "critic.hidden=[32,32]",
        "torch_threads=1",
        "total_steps=32",
        f"log.run_root={root}",
        "log.progress=false",
        "log.eval_episodes=0",
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        return train(load_config("configs/ppo_arm_reach.yaml", overrides), progress=False).run_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluate", type=Path, nargs="+", help="run directories (required but with --smoke)")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--seed", type=int, default=10_000)
    parser.add_argument("--hold", type=float, default=0.5, help="seconds at the end of a target window averaged")
    args = parse_smoke_args(parser, smoke={"episodes": 2})
    if args.evaluate is None and not args.smoke:
        parser.error("the following arguments are required: --evaluate")
    with tempfile.TemporaryDirectory() as temporary:
        for run in args.evaluate or [smoke_run(Path(temporary))]:
            result = evaluate(run, args.episodes, args.seed, args.hold)
            print(run, " ".join(f"{key}={value:.4g}" for key, value in result.items()), flush=True)


if __name__ == "__main__":
    main()
