"""robopt PPO vs Stable-Baselines3 PPO on HalfCheetah-v5 at identical hyperparameters, in one run.

Hyperparameters are SB3's PPO defaults: T = 2048 steps per env, 64-sample minibatches, 10 epochs,
lr 3e-4 (constant), clip 0.2, gamma 0.99, GAE lambda 0.95, 64x64 tanh MLPs, orthogonal init,
no observation or reward normalization, grad-norm clip 0.5, value term vf_coef * MSE with vf_coef 0.5
(robopt's value loss is 0.5 * MSE, so its value_coef is 1.0 for the same term), advantages normalized
per minibatch (SB3's default; robopt's ``algo.minibatch_advantage_norm``). Both use one torch thread and the same
number of envs and seeds.

``--normalized`` switches on what real configs use: observation and reward normalization (SB3 wraps its
env in ``VecNormalize``; robopt uses its policy/critic normalizers and its rollout reward scaler) and value
clipping at 0.2 (SB3's ``clip_range_vf``: the clipped prediction alone; robopt's ``algo.value_clip``: the max of
clipped and unclipped losses, as OpenAI baselines and CleanRL; the cost is the same). ``--env`` picks the task.

The two trainers are interleaved one rollout-and-update at a time (SB3's ``learn`` continued with
``reset_num_timesteps=False``; robopt's loop one ``iteration`` at a time), so that load from other
processes on a shared machine hits both alike. Prints env steps per second of wall-clock and of CPU
time for each, their ratio, and the deterministic return each reached (10 episodes).

    .venv/bin/python benchmarks/ppo_vs_sb3.py --steps 100000 --num-envs 1 --seeds 0
    .venv/bin/python benchmarks/ppo_vs_sb3.py --env Hopper-v5 --normalized --steps 200000 --seeds 0 1 2 3 4
    .venv/bin/python benchmarks/ppo_vs_sb3.py --smoke    # CI: one 64-step rollout each, 1 evaluation episode
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

NUM_STEPS = 2048
VALUE_CLIP = 0.2  # --normalized only


class Clock:
    """Accumulated wall-clock and CPU seconds over the timed sections."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> Clock:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall += time.perf_counter() - self._wall
        self.cpu += time.process_time() - self._cpu


def make_sb3(env_id: str, num_envs: int, seed: int, normalized: bool, num_steps: int = NUM_STEPS):
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_vec_env(env_id, n_envs=num_envs, seed=seed)
    if normalized:
        env = VecNormalize(env, gamma=0.99)
    clip_range_vf = VALUE_CLIP if normalized else None
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=num_steps,
        batch_size=64,
        n_epochs=10,
        seed=seed,
        device="cpu",
        verbose=0,
        clip_range_vf=clip_range_vf,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> dir in the system temp
    return model


def make_robopt(
    env_id: str, num_envs: int, seed: int, normalized: bool, compile_step: bool = False, num_steps: int = NUM_STEPS
):
    from robopt.build import build_loop
    from robopt.config import build_dataclass
    from robopt.experiment import ExperimentConfig

    algo = {"name": "ppo", "learning_rate": 3e-4, "lr_schedule": "constant", "epochs": 10, "minibatch_size": 64,
            "ratio": {"name": "clip", "clip_low": 0.2}, "value_coef": 1.0, "max_grad_norm": 0.5,
            "minibatch_advantage_norm": True, "value_clip": VALUE_CLIP if normalized else 0.0,
            "compile": compile_step}  # fmt: skip
    config = build_dataclass(
        ExperimentConfig,
        {
            "seed": seed,
            "torch_threads": 1,
            "env": {"id": env_id, "num_envs": num_envs, "backend": "gymnasium"},
            "policy": {"hidden": [64, 64], "activation": "tanh", "normalize_obs": normalized, "log_std_init": 0.0},
            "critic": {"hidden": [64, 64], "activation": "tanh"},
            "rollout": {"num_steps": num_steps, "gamma": 0.99, "gae_lambda": 0.95, "normalize_reward": normalized},
            "algo": algo,
        },
    )
    return build_loop(config)


def evaluate_sb3(model, env_id: str, seed: int, episodes: int = 10) -> float:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    env = make_vec_env(env_id, n_envs=1, seed=seed)
    train_env = model.get_env()
    if isinstance(train_env, VecNormalize):  # the training statistics, frozen; raw rewards
        env = VecNormalize(env, training=False, norm_reward=False)
        env.obs_rms = train_env.obs_rms
    mean_return, _ = evaluate_policy(model, env, episodes, deterministic=True)
    return float(mean_return)


def evaluate_robopt(loop, env_id: str, seed: int, episodes: int = 10) -> float:
    from robopt.envs import make_env
    from robopt.evaluation import evaluate_policy

    env = make_env(env_id, episodes)
    return evaluate_policy(loop.policy, env, episodes, seed=seed).mean_return


def run_seed(args, seed: int) -> dict:
    """Interleaved training of both for ``args.steps`` env steps; (wall steps/s, CPU steps/s, return) per library.

    With ``args.compile`` robopt's clock includes compiling its update step (first iteration).
    """
    env_id, num_envs, num_steps, episodes = args.env, args.num_envs, args.rollout_steps, args.episodes
    sb3 = make_sb3(env_id, num_envs, seed, args.normalized, num_steps)
    loop = make_robopt(env_id, num_envs, seed, args.normalized, args.compile, num_steps)
    clocks = {"sb3": Clock(), "robopt": Clock()}
    per_iteration = num_steps * num_envs
    iterations = max(1, args.steps // per_iteration)
    for _ in range(iterations):
        with clocks["sb3"]:
            sb3.learn(total_timesteps=per_iteration, reset_num_timesteps=False)
        with clocks["robopt"]:
            loop.iteration(progress=0.0)
    done = iterations * per_iteration
    assert sb3.num_timesteps == done and loop.env_steps == done, (sb3.num_timesteps, loop.env_steps)
    returns = {
        "sb3": evaluate_sb3(sb3, env_id, seed + 10_000, episodes),
        "robopt": evaluate_robopt(loop, env_id, seed + 10_000, episodes),
    }
    return {name: (done / clock.wall, done / clock.cpu, returns[name]) for name, clock in clocks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run (rounded to whole rollouts)")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--env", default="HalfCheetah-v5", help="Gymnasium id")
    parser.add_argument("--normalized", action="store_true", help="obs/reward normalization and value clipping")
    parser.add_argument("--compile", action="store_true", help="robopt with algo.compile=true (compile time counted)")
    parser.add_argument("--rollout-steps", type=int, default=NUM_STEPS, help="steps per env per rollout (n_steps)")
    parser.add_argument("--episodes", type=int, default=10, help="deterministic evaluation episodes")
    args = parse_smoke_args(parser, smoke={"steps": 64, "rollout_steps": 64, "episodes": 1})
    torch.set_num_threads(1)
    rows: dict[str, list[tuple[float, float, float]]] = {"sb3": [], "robopt": []}
    for seed in args.seeds:
        for name, row in run_seed(args, seed).items():
            rows[name].append(row)
            print(f"seed {seed}: {name:7s} {row[0]:7.0f} steps/s wall, {row[1]:7.0f} per CPU-s, return {row[2]:8.1f}")
    mode = "normalized (VecNormalize, value clip 0.2)" if args.normalized else "SB3 defaults"
    mode += ", robopt compiled step" if args.compile else ""
    print(f"\nPPO on {args.env}, {args.steps} steps, {args.num_envs} env(s), seeds {args.seeds}, {mode}")
    print_summary(rows)


def print_summary(rows: dict[str, list[tuple[float, float, float]]], speed: str = "steps/s (wall)") -> None:
    """Mean speed (wall, per CPU-second) and return per library, and robopt's speed ratios to SB3."""
    print(f"{'':8s} {speed:>27s} {'per CPU-s':>10s} {'deterministic return':>26s}")
    for name, values in rows.items():
        returns = [v[2] for v in values]
        wall, cpu = statistics.mean(v[0] for v in values), statistics.mean(v[1] for v in values)
        print(f"{name:8s} {wall:27.1f} {cpu:10.1f} {np.mean(returns):17.1f} +- {np.std(returns):.1f}")
    for column, label in ((0, "wall-clock"), (1, "CPU-time")):
        ratio = statistics.mean(v[column] for v in rows["robopt"]) / statistics.mean(v[column] for v in rows["sb3"])
        print(f"speed ratio robopt / sb3 ({label}): {ratio:.2f}x")


if __name__ == "__main__":
    main()
