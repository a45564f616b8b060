"""How symmetric a trained quadruped's gait is, and what ``algo.symmetry`` changes: train with and without it, then
measure each run's deterministic policy.

    python benchmarks/symmetry.py --train --seeds 0 1 2 --budget-s 1200     # both arms, each seed, 20 min each
    python benchmarks/symmetry.py --evaluate runs/bench_symmetry/*/*/        # runs trained elsewhere
    python benchmarks/symmetry.py --smoke                                    # CI: tiny runs, 4 rows

Arms: configs/ppo_quadruped_velocity.yaml as shipped ("plain") and with ``robot.mirror=[[FL_, FR_], [RL_, RR_]]
algo.symmetry.augment=true`` ("mirrored"), the same seeds and wall-clock budget each (Ctrl-C at the budget: robopt
saves and stops). Figures per run, over ``--episodes`` rows of 10 s with the command straight ahead (forward speed
uniform in [0.5, 1.0] m/s, no lateral or yaw command, held for the episode), the observation noise of training kept:

- ``mirror_error``: the policy's own asymmetry, mean ||mu(M s) - M mu(s)|| / mean ||mu(s)|| over the visited states
  (M the robot's mirror: ``robopt.envs.robot.mirror``); 0 for a symmetric policy;
- ``pair_gap``: the gait's asymmetry, the mean over left-right joint pairs of |E[q_left] - sign E[q_right]| (rad),
  the time-averaged posture of each leg against its mirror image's;
- ``drift_vy`` and ``drift_wz``: mean |v_y| (m/s) and |w_z| (rad/s) while commanded straight (a lopsided gait
  drifts sideways or turns);
- ``vel_error``: mean |v_cmd - v_xy| (m/s), the tracking the symmetry must not cost;
- env steps and wall seconds of training (progress.csv).

Run it alone: two cores, one benchmark. The time to the flat-ground tracking target with and without symmetry is
``benchmarks/quadruped_tracking.py --budget-s`` on the two configs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch
from quadruped_tracking import train, training_cost  # benchmarks/ is the script's directory
from smoke import parse_smoke_args

from robopt.build import build_env
from robopt.envs.robot.mirror import build_mirror
from robopt.envs.robot.signals import Signals
from robopt.evaluation import load_policy

CONFIG = "configs/ppo_quadruped_velocity.yaml"
PAIRS = [["FL_", "FR_"], ["RL_", "RR_"]]
MIRRORED = ["robot.mirror=[[FL_, FR_], [RL_, RR_]]", "algo.symmetry.augment=true"]
TINY = ["env.num_envs=4", "rollout.num_steps=8", "algo.minibatch_size=32", "policy.hidden=[32]", "critic.hidden=[32]",
        "torch_threads=1"]  # fmt: skip


@torch.no_grad()
def evaluate(run_dir: Path, episodes: int, seed: int, seconds: float) -> dict:
    config, policy = load_policy(run_dir)
    commands = {**config.task.commands, "lin_vel_x": [0.5, 1.0], "lin_vel_y": [0.0, 0.0], "ang_vel_z": [0.0, 0.0],
                "standing": 0.0, "resample_s": [1e6, 1e6]}  # fmt: skip
    sections = {**config.sections, "task": replace(config.task, commands=commands)}
    config = replace(config, sections=sections, env=replace(config.env, num_envs=episodes))
    env = build_env(config)
    task, physics = env.task, env.physics
    robot = task.robot
    mirror = robot.mirror or build_mirror(
        PAIRS,
        physics.mj_model,
        robot.init_qpos.cpu().numpy(),
        robot.base_body,
        robot.joint_names,
        robot.default_pose.cpu(),
        robot.action_scale.cpu(),
        robot.foot_names,
    )
    object.__setattr__(robot, "mirror", mirror)  # a run trained without robot.mirror is measured with PAIRS
    obs_mirror, action_mirror = task.mirror()["obs"], mirror.joints
    obs = env.reset(seed=seed)
    steps = round(seconds / env.dt)
    alive = torch.ones(episodes, dtype=torch.bool)
    fell = torch.zeros(episodes, dtype=torch.bool)
    sums = {"mirror": 0.0, "norm": 0.0, "vy": 0.0, "wz": 0.0, "vel": 0.0, "count": 0.0}
    posture = torch.zeros(episodes, len(robot.joint_names), dtype=torch.float64)
    for _ in range(steps):
        action, _ = policy.act(obs, deterministic=True)
        mirrored, _ = policy.act(obs_mirror.apply(obs).float(), deterministic=True)
        gap = (mirrored - action_mirror.apply(action).float()).norm(dim=1)
        obs, _, terminated, truncated, _ = env.step(action)
        signals = Signals(physics.state(), robot, task.context)
        rows = alive.float()
        sums["mirror"] += float((gap * rows).sum())
        sums["norm"] += float((action.norm(dim=1) * rows).sum())
        sums["vy"] += float((signals.base_lin_vel[:, 1].abs().float() * rows).sum())
        sums["wz"] += float((signals.base_ang_vel[:, 2].abs().float() * rows).sum())
        command = task.context.command[:, :2].float()
        sums["vel"] += float(((command - signals.base_lin_vel[:, :2].float()).norm(dim=1) * rows).sum())
        sums["count"] += float(rows.sum())
        posture += (signals.joint_pos - signals.default_pose) * rows.double()[:, None]
        fell |= alive & terminated
        alive &= ~(terminated | truncated)
    env.close()
    mean_posture = posture.sum(0) / max(sums["count"], 1.0)  # [A] time- and row-averaged offsets from the default
    pair_gap = (mean_posture[mirror.joints.perm] * mirror.joints.sign - mean_posture).abs().mean()
    count = max(sums["count"], 1.0)
    result = {
        "mirror_error": sums["mirror"] / max(sums["norm"], 1e-9),
        "pair_gap": float(pair_gap),
        "drift_vy": sums["vy"] / count,
        "drift_wz": sums["wz"] / count,
        "vel_error": sums["vel"] / count,
        "falls": float(fell.float().mean()),
    }
    return result | training_cost(run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", action="store_true", help="train both arms for --seeds first, then evaluate")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget-s", type=float, default=1200.0, help="wall-clock budget of each training")
    parser.add_argument("--total-steps", type=int, default=200_000_000)
    parser.add_argument("--root", type=Path, default=Path("runs/bench_symmetry"), help="--smoke: temporary")
    parser.add_argument("--evaluate", type=Path, nargs="*", default=[], help="run directories to evaluate")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=10.0, help="evaluation episode length (s)")
    parser.add_argument("--seed", type=int, default=10_000, help="evaluation seed")
    parser.add_argument("overrides", nargs="*", help="config overrides of both arms (key=value)")
    smoke = {"train": True, "seeds": [0], "total_steps": 32, "budget_s": 0.0, "root": None, "episodes": 4,
             "seconds": 0.2, "overrides": TINY}  # fmt: skip
    args = parse_smoke_args(parser, smoke=smoke)
    with tempfile.TemporaryDirectory() as temporary:
        runs = [("given", run) for run in args.evaluate]
        if args.train:
            root = args.root or Path(temporary)
            for arm, extra in (("plain", []), ("mirrored", MIRRORED)):
                trained = train(CONFIG, args.seeds, args.total_steps, root / arm, [*args.overrides, *extra],
                                args.budget_s)  # fmt: skip
                runs += [(arm, run) for run in trained]
        if not runs:
            parser.error("nothing to do: give --train or --evaluate RUN...")
        keys = ("mirror_error", "pair_gap", "drift_vy", "drift_wz", "vel_error", "falls", "env_steps", "wall_time_s")
        print("arm | run | " + " | ".join(keys), flush=True)
        for arm, run in runs:
            result = evaluate(run, args.episodes, args.seed, args.seconds)
            print(f"{arm} | {run} | " + " | ".join(f"{result[key]:.4g}" for key in keys), flush=True)


if __name__ == "__main__":
    sys.exit(main())
