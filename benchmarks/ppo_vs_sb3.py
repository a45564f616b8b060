"""robopt PPO vs Stable-Baselines3 PPO on HalfCheetah-v5 at identical hyperparameters, in one run.

Hyperparameters are SB3's PPO defaults: T = 2048 steps per env, 64-sample minibatches, 10 epochs,
lr 3e-4 (constant), clip 0.2, gamma 0.99, GAE lambda 0.95, 64x64 tanh MLPs, orthogonal init,
no observation or reward normalization, grad-norm clip 0.5. Both use one torch thread and the same
number of envs and seeds. Prints env steps/s of each, the ratio, and the deterministic return each reached.

    .venv/bin/python benchmarks/ppo_vs_sb3.py --steps 100000 --num-envs 1 --seeds 0
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch

ENV_ID = "HalfCheetah-v5"


def run_sb3(steps: int, num_envs: int, seed: int) -> tuple[float, float, float]:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    env = make_vec_env(ENV_ID, n_envs=num_envs, seed=seed)
    model = PPO("MlpPolicy", env, n_steps=2048, batch_size=64, n_epochs=10, seed=seed, device="cpu", verbose=0)
    start, cpu_start = time.perf_counter(), time.process_time()
    model.learn(total_timesteps=steps)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    eval_env = make_vec_env(ENV_ID, n_envs=1, seed=seed + 10_000)
    mean_return, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    return model.num_timesteps / elapsed, model.num_timesteps / cpu, float(mean_return)


def run_robopt(steps: int, num_envs: int, seed: int, run_root: str) -> tuple[float, float, float]:
    from robopt.config import ExperimentConfig, build_dataclass
    from robopt.evaluation import evaluate_run
    from robopt.runner import train

    config = build_dataclass(
        ExperimentConfig,
        {
            "name": "bench_ppo_sb3_defaults",
            "seed": seed,
            "total_steps": steps,
            "torch_threads": 1,
            "env": {"id": ENV_ID, "num_envs": num_envs},
            "policy": {"hidden": [64, 64], "activation": "tanh", "normalize_obs": False, "log_std_init": 0.0},
            "critic": {"hidden": [64, 64], "activation": "tanh"},
            "rollout": {"num_steps": 2048, "gamma": 0.99, "gae_lambda": 0.95, "normalize_reward": False},
            "algo": {
                "name": "ppo",
                "learning_rate": 3e-4,
                "lr_schedule": "constant",
                "epochs": 10,
                "minibatch_size": 64,
                "ratio": {"name": "clip", "clip_low": 0.2},
                "value_coef": 0.5,
                "entropy_coef": 0.0,
                "max_grad_norm": 0.5,
            },  # fmt: skip
            "log": {"run_root": run_root, "progress": False, "checkpoint_every": 10, "eval_episodes": 0},
        },
    )
    start, cpu_start = time.perf_counter(), time.process_time()
    result = train(config)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    evaluation = evaluate_run(result.run_dir, episodes=10, seed=seed + 10_000)
    return result.env_steps / elapsed, result.env_steps / cpu, evaluation.mean_return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run (rounded to whole rollouts)")
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {"sb3": [], "robopt": []}
    with tempfile.TemporaryDirectory() as run_root:
        for seed in args.seeds:
            rows["sb3"].append(run_sb3(args.steps, args.num_envs, seed))
            rows["robopt"].append(run_robopt(args.steps, args.num_envs, seed, run_root))
            for name in rows:
                wall, cpu, mean_return = rows[name][-1]
                print(
                    f"seed {seed}: {name:7s} {wall:7.0f} steps/s wall, {cpu:7.0f} per CPU-second, "
                    f"return {mean_return:8.1f}"
                )
    print(
        f"\nPPO on {ENV_ID}, {args.steps} steps, {args.num_envs} env(s), seeds {args.seeds}, "
        "SB3 default hyperparameters"
    )
    print(f"{'':8s} {'steps/s (wall)':>15s} {'steps/CPU-s':>12s} {'deterministic return':>26s}")
    for name, values in rows.items():
        returns = [v[2] for v in values]
        wall, cpu = statistics.mean(v[0] for v in values), statistics.mean(v[1] for v in values)
        print(f"{name:8s} {wall:15.0f} {cpu:12.0f} {np.mean(returns):17.1f} +- {np.std(returns):.1f}")
    for column, label in ((0, "wall-clock"), (1, "CPU-time")):
        ratio = statistics.mean(v[column] for v in rows["robopt"]) / statistics.mean(v[column] for v in rows["sb3"])
        print(f"speed ratio robopt / sb3 ({label}): {ratio:.2f}x")
    print("CPU-time rates are robust to other load on a shared machine; wall-clock is what a user sees.")


if __name__ == "__main__":
    main()
