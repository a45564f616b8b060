"""Env steps per second of the quadruped task (configs/ppo_quadruped_velocity.yaml) against raw MuJoCo on the same
model in the same run, and where an env step's time goes.

    python benchmarks/robot_throughput.py [--envs 64 256 1024] [--threads 1 2] [--steps 200]
    python benchmarks/robot_throughput.py --backend mujoco_warp --device cuda --envs 4096 [--graph]
    python benchmarks/robot_throughput.py --smoke    # CI: 4 envs, 1 thread, 5 steps

On ``mujoco_warp`` (a GPU) it prints the env's steps per second alone (physics and terms on the device; the raw
MuJoCo C comparison is a CPU figure), synchronizing the device at both ends of the clock.

Raw MuJoCo: ``mujoco.rollout`` (C threads, no Python per env) stepping the same compiled model (floor, actuators
and sensors included) N rows x 4 physics steps per control step, from the standing pose with the actuators holding
it: the physical limit. The env: ``NativeVecEnv.step`` with a policy's actions (zeros plus N(0, 0.3) noise: the
robot walks about, contacts change, some rows fall and reset). The split times each part of the env's step with a
wall clock around it: the backend's physics step (C with its per-row Python glue), the task's terms (context, reward
terms, observation frame), the rest (resets, randomization, bookkeeping). Run it alone: two cores, one benchmark.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import mujoco
import numpy as np
import torch
import yaml
from mujoco import rollout
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.envs import make_env

CONFIG = "configs/ppo_quadruped_velocity.yaml"


def sections() -> tuple[dict, dict]:
    data = yaml.safe_load(open(CONFIG))
    return data["robot"], data["task"]


def raw_rate(env, num_envs: int, threads: int, steps: int) -> float:
    """Control steps per second of mujoco.rollout on the env's model, holding the default pose."""
    model = env.physics.mj_model
    decimation = env.task.frame_skip
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    data = mujoco.MjData(model)
    data.qpos[:] = env.task.robot.init_qpos.numpy()
    mujoco.mj_forward(model, data)
    state = np.zeros(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state, spec)
    initial = np.tile(state, (num_envs, 1))
    control = np.zeros((num_envs, steps * decimation, model.nu))
    datas = [mujoco.MjData(model) for _ in range(threads)]
    with rollout.Rollout(nthread=threads) as runner:
        runner.rollout([model] * num_envs, datas, initial, control[:, :decimation])  # warm up the pool
        start = time.perf_counter()
        runner.rollout([model] * num_envs, datas, initial, control)
        elapsed = time.perf_counter() - start
    return num_envs * steps / elapsed


def warp_rate(num_envs: int, steps: int, device: str, graph: bool) -> float:
    """Env steps per second of the quadruped task on MuJoCo Warp (random actions, as ``env_rate``)."""
    robot, task = sections()
    env = make_env("robot", num_envs, backend="mujoco_warp", device=device, robot=robot, task=task, seed=0, graph=graph)
    generator = torch.Generator(device=device).manual_seed(0)
    env.reset(seed=0)

    def step():
        env.step(0.3 * torch.randn(num_envs, env.action_dim, generator=generator, device=device))

    for _ in range(20):
        step()
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    elapsed = time.perf_counter() - start
    env.close()
    return num_envs * steps / elapsed


def synchronize(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed_steps(env, steps: int) -> tuple[float, dict[str, float]]:
    """Env steps per second over ``steps`` steps of a policy's actions (zeros plus N(0, 0.3) noise) after 20 warm-up
    steps, and the seconds spent in the physics (``physics``) and the task's terms (``terms``) and in all
    (``elapsed``); shared with benchmarks/terrain_cost.py."""
    totals: dict[str, float] = defaultdict(float)

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            out = fn(*args, **kwargs)
            totals[name] += time.perf_counter() - start
            return out

        return wrapper

    env.physics.step = timed("physics", env.physics.step)
    for hook in ("update_context", "reward", "advance", "reset_context"):
        setattr(env.task, hook, timed("terms", getattr(env.task, hook)))
    generator = torch.Generator().manual_seed(0)
    env.reset(seed=0)
    for _ in range(20):
        env.step(0.3 * torch.randn(env.num_envs, env.action_dim, generator=generator))
    totals.clear()
    start = time.perf_counter()
    for _ in range(steps):
        env.step(0.3 * torch.randn(env.num_envs, env.action_dim, generator=generator))
    elapsed = time.perf_counter() - start
    return env.num_envs * steps / elapsed, {"physics": totals["physics"], "terms": totals["terms"], "elapsed": elapsed}


def env_rate(num_envs: int, threads: int, steps: int) -> tuple[float, dict[str, float]]:
    """Env steps per second and the seconds spent in each part over the timed steps."""
    robot, task = sections()
    env = make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=threads)
    rate, split = timed_steps(env, steps)
    raw = raw_rate(env, num_envs, threads, steps)
    env.close()
    split["rest"] = split["elapsed"] - split["physics"] - split["terms"]
    return rate, {**split, "raw": raw}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--backend", default="mujoco", choices=("mujoco", "mujoco_warp"))
    parser.add_argument("--device", default="cpu", help="mujoco_warp: cuda, or cpu (warp's CPU device, slow)")
    parser.add_argument("--graph", action="store_true", help="mujoco_warp: replay each step from a CUDA graph")
    args = parse_smoke_args(parser, smoke={"envs": [4], "threads": [1], "steps": 5})
    if args.backend == "mujoco_warp":
        for num_envs in args.envs:
            rate = warp_rate(num_envs, args.steps, args.device, args.graph)
            print(
                f"quadruped task on mujoco_warp ({args.device}{', graph' if args.graph else ''}), {num_envs} envs: "
                f"{rate:.0f} env steps/s",
                flush=True,
            )
        return
    torch.set_num_threads(1)
    print("envs threads | env steps/s | raw mujoco.rollout steps/s | env/raw | physics% terms% rest% of the env step")
    for threads in args.threads:
        for num_envs in args.envs:
            rate, split = env_rate(num_envs, threads, args.steps)
            shares = " ".join(f"{100 * split[key] / split['elapsed']:.0f}%" for key in ("physics", "terms", "rest"))
            print(
                f"{num_envs:5d} {threads:2d} | {rate:9.0f} | {split['raw']:9.0f} | {rate / split['raw']:.2f} | "
                f"{shares}",
                flush=True,
            )


if __name__ == "__main__":
    main()
