"""What terrain and the height scan cost per env step: the quadruped task (configs/ppo_quadruped_velocity.yaml) on its
flat floor against the same task on configs/ppo_quadruped_terrain.yaml's terrain, each with and without the
privileged height scan (legged_gym's 187 points), at the same number of rows and threads, in the same run.

    python benchmarks/terrain_cost.py [--envs 1024] [--threads 1 2] [--steps 200]
    python benchmarks/terrain_cost.py --smoke    # CI: 8 envs, 1 thread, 5 steps, a 3 x 10 terrain of 4 m tiles

Each arm builds its env, takes 20 warm-up steps of a policy's actions (zeros plus N(0, 0.3) noise: the robot
stumbles about, some rows fall and reset onto their tiles), then times ``--steps`` steps; the split times the
physics (MuJoCo's C, the heightfield and box collisions included) and the task's terms (the height scan's lookup
included) with a wall clock around each. Ratios are each arm's env steps/s over the flat floor's without a scan.
Run it alone: two cores, one benchmark.
"""

from __future__ import annotations

import argparse

import torch
import yaml
from robot_throughput import timed_steps  # the same clock around the physics and the terms
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.envs import make_env

FLAT = "configs/ppo_quadruped_velocity.yaml"
TERRAIN = "configs/ppo_quadruped_terrain.yaml"
SCAN = {"points": [17, 11], "spacing": 0.1, "clip": 1.0}
SMOKE_TERRAIN = {"levels": 3, "columns": 10, "tile": 4.0, "border": 1.0, "platform": 1.0}


def sections(terrain: bool, scan: bool, small: bool) -> tuple[dict, dict]:
    robot = yaml.safe_load(open(FLAT))["robot"]
    task = yaml.safe_load(open(FLAT))["task"]
    if terrain:
        task["terrain"] = yaml.safe_load(open(TERRAIN))["task"]["terrain"]
        if small:
            task["terrain"].update(SMOKE_TERRAIN)
    if scan:
        task["observations"]["height_scan"] = dict(SCAN)
    return robot, task


def rate(num_envs: int, threads: int, steps: int, terrain: bool, scan: bool, small: bool) -> tuple[float, dict]:
    robot, task = sections(terrain, scan, small)
    env = make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=threads)
    steps_per_s, split = timed_steps(env, steps)
    geoms = env.physics.mj_model.ngeom
    env.close()
    return steps_per_s, {**split, "geoms": geoms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, default=1024)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200)
    args = parse_smoke_args(parser, smoke={"envs": 8, "threads": [1], "steps": 5})
    torch.set_num_threads(1)
    print(f"quadruped task, {args.envs} envs, {args.steps} timed steps")
    print("threads floor   scan | env steps/s | vs flat | physics ms terms ms rest ms per step | geoms")
    for threads in args.threads:
        base = None
        for terrain in (False, True):
            for scan in (False, True):
                steps_per_s, split = rate(args.envs, threads, args.steps, terrain, scan, args.smoke)
                base = base or steps_per_s
                per_step = {key: 1e3 * split.get(key, 0.0) / args.steps for key in ("physics", "terms", "elapsed")}
                rest = per_step["elapsed"] - per_step["physics"] - per_step["terms"]
                print(
                    f"{threads:7d} {'terrain' if terrain else 'flat':<7} {'yes' if scan else 'no':>4} | "
                    f"{steps_per_s:11.0f} | {steps_per_s / base:6.2f}x | {per_step['physics']:10.1f} "
                    f"{per_step['terms']:8.1f} {rest:7.1f} | {split['geoms']}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
