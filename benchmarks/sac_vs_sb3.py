"""robopt SAC vs Stable-Baselines3 SAC on HalfCheetah-v5 at identical hyperparameters, interleaved in one run.

Hyperparameters are SB3's SAC defaults (rl-zoo's HalfCheetah settings but for the warm-up): 256x256 ReLU actor
and twin critics, state-dependent log-std clamped to [-20, 2], tanh squashing, Adam lr 3e-4, batch 256, one
gradient update per env step, tau 0.005, gamma 0.99, automatic entropy temperature (initial 1, target -A),
``--learning-starts`` uniform random steps first, one env, no observation normalization, the same torch threads.

Both train ``--steps`` env steps per seed, interleaved ``--chunk`` steps at a time (SB3's ``learn`` continued with
``reset_num_timesteps=False``, robopt's loop one iteration at a time) so that load from other processes hits both
alike. Only the learning phase is timed (steps after the warm-up, each with one update). Prints env steps and
gradient updates per second of wall-clock and of CPU time, their ratio, and the deterministic return of each
(10 episodes, seed + 10000). Run nothing else meanwhile.

    .venv/bin/python benchmarks/sac_vs_sb3.py --steps 6000 --learning-starts 1000 --seeds 0   # speed, 3-4 min
    .venv/bin/python benchmarks/sac_vs_sb3.py --steps 30000 --seeds 0 1                        # speed and return
"""

from __future__ import annotations

import argparse
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ppo_vs_sb3 import Clock, evaluate_robopt, print_summary  # noqa: E402  (same timing and evaluation as the PPO comparison)


def make_sb3(env_id: str, seed: int, learning_starts: int):
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    env = make_vec_env(env_id, n_envs=1, seed=seed)
    model = SAC("MlpPolicy", env, learning_starts=learning_starts, seed=seed, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> dir in the system temp
    return model


def make_robopt(env_id: str, seed: int, learning_starts: int, chunk: int, threads: int):
    from robopt.build import build_loop
    from robopt.experiment import load_config

    overrides = [f"env.id={env_id}", "env.backend=gymnasium", f"seed={seed}", f"torch_threads={threads}",
                 f"algo.loop.learning_starts={learning_starts}", f"algo.loop.iteration_steps={chunk}"]  # fmt: skip
    return build_loop(load_config("configs/sac_halfcheetah.yaml", overrides))


def evaluate_sb3(model, env_id: str, seed: int) -> float:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    mean_return, _ = evaluate_policy(model, make_vec_env(env_id, n_envs=1, seed=seed), 10, deterministic=True)
    return float(mean_return)


def run_seed(args, seed: int) -> dict:
    """(wall steps/s, CPU steps/s, return) per library over the learning phase of one seed."""
    sb3 = make_sb3(args.env, seed, args.learning_starts)
    loop = make_robopt(args.env, seed, args.learning_starts, args.chunk, args.threads)
    torch.set_num_threads(args.threads)  # after build_loop, which sets robopt's own count; SB3 uses the same
    sb3.learn(total_timesteps=args.learning_starts, reset_num_timesteps=False)  # warm-up: untimed
    while loop.env_steps < args.learning_starts:
        loop.iteration(progress=0.0)
    clocks = {"sb3": Clock(), "robopt": Clock()}
    timed = 0
    while loop.env_steps < args.steps:
        with clocks["sb3"]:
            sb3.learn(total_timesteps=args.chunk, reset_num_timesteps=False)
        with clocks["robopt"]:
            loop.iteration(progress=loop.env_steps / args.steps)
        timed += args.chunk
    assert sb3.num_timesteps == loop.env_steps, (sb3.num_timesteps, loop.env_steps)
    returns = {"sb3": evaluate_sb3(sb3, args.env, seed + 10_000),
               "robopt": evaluate_robopt(loop, args.env, seed + 10_000)}  # fmt: skip
    loop.env.close()
    return {name: (timed / clock.wall, timed / clock.cpu, returns[name]) for name, clock in clocks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per run, warm-up included")
    parser.add_argument("--learning-starts", type=int, default=10_000, help="uniform random warm-up steps (untimed)")
    parser.add_argument("--chunk", type=int, default=1000, help="env steps per interleaved turn")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both")
    parser.add_argument("--env", default="HalfCheetah-v5", help="Gymnasium id")
    args = parser.parse_args()
    if args.steps <= args.learning_starts or (args.steps - args.learning_starts) % args.chunk:
        parser.error("--steps minus --learning-starts must be a positive multiple of --chunk")
    rows: dict[str, list[tuple[float, float, float]]] = {"sb3": [], "robopt": []}
    for seed in args.seeds:
        for name, row in run_seed(args, seed).items():
            rows[name].append(row)
            print(f"seed {seed}: {name:7s} {row[0]:6.1f} steps/s wall, {row[1]:6.1f} per CPU-s, return {row[2]:8.1f}",
                  flush=True)  # fmt: skip
    print(f"\nSAC on {args.env}, {args.steps} steps ({args.learning_starts} warm-up), seeds {args.seeds}, "
          f"{args.threads} torch thread(s), one update per step")  # fmt: skip
    print_summary(rows, speed="steps/s = updates/s (wall)")


if __name__ == "__main__":
    main()
