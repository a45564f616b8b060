"""Env steps per second with random actions: robopt's native backend vs its peers, side by side.

For each task and N in --num-envs, prints (env steps/s; one env step = frame_skip MuJoCo substeps):
    robopt     : make_env("mujoco/<Task>", N, backend=--backend) (task obs/reward/reset, auto-reset, torch)
    sync       : gymnasium.vector.SyncVectorEnv of N Gymnasium v5 envs
    raw 1T     : bare mujoco.mj_step(nstep=frame_skip) on N MjData, one thread, no task logic
    rollout 2T : mujoco.rollout with 2 threads and persistent per-thread MjData, N states fed back one env
                 step per call (nstep=frame_skip), no task logic
and the ratios robopt/sync and robopt/rollout. Each figure is the best of --repeats timed runs, so
the four take turns within each repeat, so load from other processes on a shared machine hits every
column alike.

Usage: .venv/bin/python benchmarks/env_throughput.py [--tasks HalfCheetah Ant] [--num-envs 1 16 64 256]
       .venv/bin/python benchmarks/env_throughput.py --backend mujoco_warp [--graph] --device cuda --no-peers
       .venv/bin/python benchmarks/env_throughput.py --smoke    # CI: HalfCheetah, 2 envs, 10 steps, every column
"""

from __future__ import annotations

import argparse
import time
import warnings

import gymnasium as gym
import mujoco
import numpy as np
import torch
from mujoco import rollout
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.envs import make_env
from robopt.envs.native_env import load_model
from robopt.envs.tasks import TASKS


def robopt_runner(task_cls, num_envs: int, steps: int, backend: str, device: str, **options):
    env = make_env(f"mujoco/{task_cls.name}", num_envs, backend=backend, device=device, seed=0, **options)
    env.reset(seed=0)
    low, high = env.action_low, env.action_high
    actions = low + (high - low) * torch.rand(steps, num_envs, env.action_dim, device=env.device)  # [T, N, A]

    def run() -> None:
        for t in range(steps):
            env.step(actions[t])
        if env.device.type == "cuda":
            torch.cuda.synchronize()

    return run, env.close


def sync_runner(task_cls, num_envs: int, steps: int):
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(task_cls.gymnasium_id) for _ in range(num_envs)])
    envs.reset(seed=0)
    envs.action_space.seed(0)
    actions = [envs.action_space.sample() for _ in range(steps)]

    def run() -> None:
        for action in actions:
            envs.step(action)

    return run, envs.close


def raw_runner(task_cls, num_envs: int, steps: int):
    model = load_model(task_cls)
    datas = [mujoco.MjData(model) for _ in range(num_envs)]
    rng = np.random.default_rng(0)
    ctrl = rng.uniform(model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1], (num_envs, model.nu))
    for data, row in zip(datas, ctrl, strict=True):
        data.ctrl[:] = row

    def run() -> None:
        for _ in range(steps):
            for data in datas:
                mujoco.mj_step(model, data, task_cls.frame_skip)

    return run, lambda: None


def rollout_runner(task_cls, num_envs: int, steps: int):
    model = load_model(task_cls)
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    initial = np.zeros((num_envs, mujoco.mj_stateSize(model, spec)))
    mujoco.mj_getState(model, mujoco.MjData(model), initial[0], spec)
    initial[:] = initial[0]
    rng = np.random.default_rng(0)
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    ctrl = rng.uniform(low, high, (num_envs, task_cls.frame_skip, model.nu))  # [N, frame_skip, U]
    out = np.zeros((num_envs, task_cls.frame_skip, initial.shape[1]))
    models = [model] * num_envs
    pool = rollout.Rollout(nthread=2)
    datas = [mujoco.MjData(model) for _ in range(2)]

    def run() -> None:
        state = initial.copy()
        for _ in range(steps):
            pool.rollout(models, datas, state, ctrl, nstep=task_cls.frame_skip, state=out, skip_checks=True)
            state[:] = out[:, -1]

    return run, pool.close


def measure(runners: dict, num_env_steps: int, repeats: int) -> dict[str, float]:
    """Env steps/s per runner, best of ``repeats``; the runners take turns so load bursts hit all of them."""
    best = dict.fromkeys(runners, 0.0)
    for _ in range(repeats):
        for name, (run, _) in runners.items():
            start = time.perf_counter()
            run()
            best[name] = max(best[name], num_env_steps / (time.perf_counter() - start))
    for _, close in runners.values():
        close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="*", default=[t.name for t in TASKS])
    parser.add_argument("--num-envs", nargs="*", type=int, default=[1, 16, 64, 256])
    parser.add_argument("--env-steps", type=int, default=20000, help="env steps per timed run (split over N)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--backend", default="mujoco", choices=["mujoco", "mujoco_warp"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True, help="also time the peers")
    parser.add_argument("--graph", action="store_true", help="mujoco_warp: replay a recording of each step's launches")
    args = parse_smoke_args(parser, smoke={"tasks": ["HalfCheetah"], "num_envs": [2], "env_steps": 20, "repeats": 1})
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    by_name = {t.name: t for t in TASKS}
    header = (
        f"{'task':<24}{'N':>5}{'robopt':>11}{'sync':>11}{'raw 1T':>11}{'rollout 2T':>12}{'/sync':>8}{'/rollout':>10}"
    )
    if args.graph and args.backend != "mujoco_warp":
        raise SystemExit("env_throughput: --graph is an option of --backend mujoco_warp")
    options = {"graph": True} if args.graph else {}
    print(
        f"backend={args.backend}{' (graph)' if args.graph else ''} device={args.device} "
        f"env_steps/run={args.env_steps} repeats={args.repeats}"
    )
    print(header)
    print("-" * len(header))
    for name in args.tasks:
        task_cls = by_name[name]
        for num_envs in args.num_envs:
            steps = max(10, args.env_steps // num_envs)
            runners = {"robopt": robopt_runner(task_cls, num_envs, steps, args.backend, args.device, **options)}
            if args.peers:
                runners["sync"] = sync_runner(task_cls, num_envs, steps)
                runners["raw"] = raw_runner(task_cls, num_envs, steps)
                runners["rollout"] = rollout_runner(task_cls, num_envs, steps)
            rate = measure(runners, steps * num_envs, args.repeats)
            if not args.peers:
                print(f"{name:<24}{num_envs:>5}{rate['robopt']:>11,.0f}", flush=True)
                continue
            print(
                f"{name:<24}{num_envs:>5}{rate['robopt']:>11,.0f}{rate['sync']:>11,.0f}{rate['raw']:>11,.0f}"
                f"{rate['rollout']:>12,.0f}{rate['robopt'] / rate['sync']:>8.2f}"
                f"{rate['robopt'] / rate['rollout']:>10.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
