"""Env steps per second of Isaac Lab's cart-pole (``env.backend: isaaclab``, Newton physics on warp's CPU device)
next to robopt's native MuJoCo backend on the comparable ``mujoco/InvertedPendulum`` (a cart-pole too), same N.

Random actions in [-1, 1]; each figure is the best of ``--repeats`` timed runs after a warm-up. Isaac Lab keeps
one simulation per process, so each Isaac figure comes from its own subprocess (its start-up, printed apart, is
not in the rate). Run in the Isaac venv (``make isaac``), which has both backends:

    .venv-isaac/bin/python benchmarks/isaac_throughput.py [--num-envs 8 64 256] [--steps 200] [--device cpu]
    python benchmarks/isaac_throughput.py --device cuda --native-backend mujoco_warp --num-envs 4096   # a GPU
    .venv-isaac/bin/python benchmarks/isaac_throughput.py --smoke    # CI (make test-isaac): 8 envs, 5 steps

The native figure is measured first, so where Isaac Lab is missing (the main venv) the run ends in Isaac Lab's
one-line refusal after the native side has run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports


def rate(env, steps: int, repeats: int) -> float:
    env.reset(seed=0)
    actions = torch.rand(steps, env.num_envs, env.action_dim, device=env.device) * 2 - 1
    for t in range(min(20, steps)):  # warm-up: kernels, caches
        env.step(actions[t])
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        for t in range(steps):
            env.step(actions[t])
        best = max(best, steps * env.num_envs / (time.perf_counter() - start))
    return best


def measure(task: str, backend: str, num_envs: int, steps: int, repeats: int, device: str) -> dict:
    from robopt.envs import make_env

    start = time.perf_counter()
    env = make_env(task, num_envs, backend=backend, device=device)
    built = time.perf_counter() - start
    try:
        return {"rate": rate(env, steps, repeats), "startup_s": built}
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-envs", type=int, nargs="+", default=[8, 64, 256])
    parser.add_argument("--steps", type=int, default=200, help="env steps per timed run (per env)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--native-backend", default="mujoco", help="mujoco (CPU threads) or mujoco_warp (GPU)")
    parser.add_argument("--one", nargs=2, metavar=("TASK", "BACKEND"), help=argparse.SUPPRESS)
    args = parse_smoke_args(parser, smoke={"num_envs": [8], "steps": 5, "repeats": 1})
    torch.set_num_threads(1)
    if args.one:  # the subprocess: one figure as JSON on the last line
        task, backend = args.one
        print(json.dumps(measure(task, backend, args.num_envs[0], args.steps, args.repeats, args.device)))
        return
    print(f"device={args.device} steps/run={args.steps} repeats={args.repeats} (env steps/s; Isaac start-up apart)")
    print(f"{'N':>5}{'isaaclab':>12}{'start s':>9}{'native':>12}{'isaac/native':>14}")
    for n in args.num_envs:
        figures = {}
        for task, backend in (("mujoco/InvertedPendulum", args.native_backend), ("Isaac-Cartpole-Direct", "isaaclab")):
            command = [sys.executable, __file__, "--one", task, backend, "--num-envs", str(n),
                       "--steps", str(args.steps), "--repeats", str(args.repeats), "--device", args.device]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{task} x {n} failed: {done.stderr.strip().splitlines()[-1]}")
            figures[backend] = json.loads(done.stdout.strip().splitlines()[-1])
        isaac, native = figures["isaaclab"], figures[args.native_backend]
        print(
            f"{n:>5}{isaac['rate']:>12,.0f}{isaac['startup_s']:>9.1f}{native['rate']:>12,.0f}"
            f"{isaac['rate'] / native['rate']:>14.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
