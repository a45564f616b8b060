"""Wall-clock time to a working controller: seconds of training until the deterministic return on
HalfCheetah-v5 first reaches a target (3000), for Stable-Baselines3's PPO and robopt's fastest config.

- SB3: PPO with rl-baselines3-zoo's tuned HalfCheetah hyperparameters (1 env x 512 steps, 20 epochs of
  64-sample minibatches, lr 2.0633e-5, 256x256 ReLU, log_std -2, gamma 0.98, GAE 0.92, clip 0.1,
  VecNormalize on observations and rewards).
- robopt: ``configs/ppo_halfcheetah_fast.yaml`` (native batched MuJoCo, 64 envs x 32 steps, 5 epochs of
  512-sample minibatches, lr 3e-4; otherwise the same settings).

Both are evaluated every ``--eval-every`` env steps (rounded to whole rollouts) on Gymnasium's HalfCheetah-v5
with the deterministic policy over ``--episodes`` episodes; evaluation time is excluded from the clock. A
library that does not reach the target within ``--budget-s`` seconds of training (or ``--max-steps``) is
reported as "not reached" with its best return, so the ratio is then a lower bound. One torch thread each.

    .venv/bin/python benchmarks/time_to_return.py --seeds 0 1 2
    .venv/bin/python benchmarks/time_to_return.py --seeds 0 --only robopt --final-steps 1000000
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ENV_ID = "HalfCheetah-v5"
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ppo_halfcheetah_fast.yaml"


@dataclass
class Outcome:
    seconds: float | None  # training wall-clock when the target was first reached (None: not reached)
    steps: int | None
    best_return: float
    trained_seconds: float
    trained_steps: int


def sb3_trainer(seed: int):
    """(train_one_rollout, evaluate, steps_per_rollout) for SB3's PPO at rl-zoo's HalfCheetah settings."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env(ENV_ID, n_envs=1, seed=seed), gamma=0.98)
    policy_kwargs = {"log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.ReLU,
                     "net_arch": {"pi": [256, 256], "vf": [256, 256]}}  # fmt: skip
    model = PPO(
        "MlpPolicy", env, batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05, ent_coef=0.000401762,
        clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096,
        policy_kwargs=policy_kwargs, seed=seed, device="cpu", verbose=0,
    )  # fmt: skip
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> dir in the system temp

    def train() -> None:
        model.learn(total_timesteps=512, reset_num_timesteps=False)

    def evaluate(episodes: int) -> float:
        eval_env = VecNormalize(make_vec_env(ENV_ID, n_envs=1, seed=seed + 10_000), training=False, norm_reward=False)
        eval_env.obs_rms = env.obs_rms
        mean_return, _ = evaluate_policy(model, eval_env, episodes, deterministic=True)
        return float(mean_return)

    return train, evaluate, 512


def robopt_trainer(seed: int, overrides: tuple[str, ...] = ()):
    """(train_one_iteration, evaluate, steps_per_iteration) for robopt's fast config (with ``key=value`` overrides)."""
    from robopt.build import build_loop
    from robopt.envs import make_env
    from robopt.evaluation import evaluate_policy
    from robopt.experiment import load_config

    config = load_config(CONFIG, [*overrides, f"seed={seed}"])
    loop = build_loop(config)
    total = config.total_steps

    def train() -> None:
        loop.iteration(progress=loop.env_steps / total)

    def evaluate(episodes: int) -> float:
        env = make_env(ENV_ID, episodes)
        try:
            return evaluate_policy(loop.policy, env, episodes, seed=seed + 10_000).mean_return
        finally:
            env.close()

    return train, evaluate, loop.steps_per_iteration


def time_to_return(make, seed: int, args) -> Outcome:
    """Train until the evaluated return reaches the target, the time budget or the step budget."""
    train, evaluate, per_rollout = make(seed)
    rollouts_per_eval = max(1, round(args.eval_every / per_rollout))
    seconds, steps, best = 0.0, 0, float("-inf")
    while seconds < args.budget_s and steps < args.max_steps:
        start = time.perf_counter()
        for _ in range(rollouts_per_eval):
            train()
        seconds += time.perf_counter() - start
        steps += rollouts_per_eval * per_rollout
        value = evaluate(args.episodes)
        best = max(best, value)
        if value >= args.target:
            return Outcome(seconds, steps, best, seconds, steps)
    return Outcome(None, None, best, seconds, steps)


def final_return(seed: int, steps: int, episodes: int, overrides: tuple[str, ...]) -> tuple[float, float]:
    """robopt's fast config trained for ``steps``: (deterministic return, training seconds)."""
    train, evaluate, per_iteration = robopt_trainer(seed, overrides)
    start = time.perf_counter()
    for _ in range(steps // per_iteration):
        train()
    seconds = time.perf_counter() - start
    return evaluate(episodes), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=3000.0)
    parser.add_argument("--eval-every", type=int, default=10_240, help="env steps between evaluations")
    parser.add_argument("--episodes", type=int, default=5, help="deterministic episodes per evaluation")
    parser.add_argument("--budget-s", type=float, default=1200.0, help="training seconds per run before giving up")
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument("--only", choices=("robopt", "sb3"), default=None)
    parser.add_argument("--final-steps", type=int, default=0, help="also train robopt this long and evaluate it")
    parser.add_argument("--override", nargs="*", default=[], help="key=value overrides of robopt's config")
    args = parser.parse_args()
    torch.set_num_threads(1)
    makers = {"robopt": functools.partial(robopt_trainer, overrides=tuple(args.override)), "sb3": sb3_trainer}
    names = [args.only] if args.only else ["robopt", "sb3"]
    outcomes: dict[str, list[Outcome]] = {name: [] for name in names}
    for seed in args.seeds:
        for name in names:
            outcome = time_to_return(makers[name], seed, args)
            outcomes[name].append(outcome)
            reached = f"{outcome.seconds:7.1f} s at {outcome.steps} steps" if outcome.seconds else "not reached"
            print(f"seed {seed}: {name:6s} return {args.target:.0f}: {reached} (best {outcome.best_return:.0f}, "
                  f"trained {outcome.trained_seconds:.0f} s / {outcome.trained_steps} steps)", flush=True)  # fmt: skip
    print(f"\nTime to a deterministic return of {args.target:.0f} on {ENV_ID}, seeds {args.seeds}")
    for name, rows in outcomes.items():
        times = [row.seconds for row in rows if row.seconds is not None]
        summary = f"{statistics.mean(times):.1f} s mean ({', '.join(f'{t:.1f}' for t in times)})" if times else "-"
        print(f"{name:8s} reached in {len(times)}/{len(rows)} runs: {summary}")
    if len(names) == 2:
        robopt_times = [row.seconds or row.trained_seconds for row in outcomes["robopt"]]
        sb3_times = [row.seconds or row.trained_seconds for row in outcomes["sb3"]]
        bound = "" if all(row.seconds for row in outcomes["sb3"]) else " (at least: SB3 did not always reach it)"
        ratio = statistics.mean(sb3_times) / statistics.mean(robopt_times)
        print(f"SB3 time / robopt time: {ratio:.1f}x{bound}")
    if args.final_steps:
        for seed in args.seeds:
            value, seconds = final_return(seed, args.final_steps, 10, tuple(args.override))
            print(f"seed {seed}: robopt return after {args.final_steps} steps: {value:.1f} (trained {seconds:.0f} s)")


if __name__ == "__main__":
    main()
