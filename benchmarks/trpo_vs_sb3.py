"""sb3-contrib's TRPO vs robopt's TRPO on Hopper-v5 with the same hyperparameters, in one process.

Both use rl-zoo's TRPO settings for MuJoCo (configs/trpo_hopper.yaml): 2 envs x 1024 steps per update,
max KL 0.01, CG 25 iterations with damping 0.1, line search 10 x 0.8, 20 critic epochs of 128-sample
minibatches at Adam 1e-3, gamma 0.99, GAE 0.95, 64x64 tanh MLPs, normalized observations and rewards.
The same torch thread count is used for both. Prints steps/s, the ratio, and the return at the same budget
(mean of the last training episodes, and a 10-episode deterministic evaluation).

    .venv/bin/python benchmarks/trpo_vs_sb3.py --steps 100000
    .venv/bin/python benchmarks/trpo_vs_sb3.py --steps 100000 --robopt-env mujoco/Hopper   # native batched MuJoCo
    .venv/bin/python benchmarks/trpo_vs_sb3.py --smoke    # CI: one update each (2 x 1024 steps), 1 episode
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "trpo_hopper.yaml"


def run_sb3(steps: int, seed: int, episodes: int = 10) -> dict[str, float]:
    from sb3_contrib import TRPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=2, seed=seed), gamma=0.99)
    model = TRPO(
        "MlpPolicy",
        env,
        learning_rate=1e-3,
        n_steps=1024,
        batch_size=128,
        gamma=0.99,
        gae_lambda=0.95,
        cg_max_steps=25,
        cg_damping=0.1,
        line_search_shrinking_factor=0.8,
        line_search_max_iter=10,
        n_critic_updates=20,
        target_kl=0.01,
        sub_sampling_factor=1,
        normalize_advantage=True,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> dir in the system temp
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    wall = time.perf_counter() - start
    train_returns = [info["r"] for info in model.ep_info_buffer]
    eval_env = VecNormalize(make_vec_env("Hopper-v5", n_envs=1, seed=seed + 10_000), training=False, norm_reward=False)
    eval_env.obs_rms = env.obs_rms
    mean_eval, _ = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=True)
    return {
        "steps": model.num_timesteps,
        "wall": wall,
        "train_return": float(np.mean(train_returns[-20:])),
        "eval_return": float(mean_eval),
    }


def run_robopt(steps: int, seed: int, env_id: str, episodes: int = 10) -> dict[str, float]:
    from robopt.evaluation import evaluate_run
    from robopt.experiment import load_config
    from robopt.runner import train

    with tempfile.TemporaryDirectory() as run_root:
        overrides = [f"total_steps={steps}", f"seed={seed}", f"env.id={env_id}", f"log.run_root={run_root}"]
        config = load_config(CONFIG, [*overrides, "log.progress=false", "log.checkpoint_every=1000"])
        start = time.perf_counter()
        result = train(config)
        wall = time.perf_counter() - start
        evaluation = evaluate_run(result.run_dir, episodes=episodes)
        train_return = _last_episode_returns(result.run_dir)
    return {
        "steps": result.env_steps,
        "wall": wall,
        "train_return": train_return,
        "eval_return": evaluation.mean_return,
    }


def _last_episode_returns(run_dir: Path, iterations: int = 5) -> float:
    """Mean over the last iterations of the per-iteration mean return of the episodes that ended in them."""
    from robopt.logging import read_progress

    _, returns = read_progress(Path(run_dir))
    return float(np.mean(returns[-iterations:])) if returns else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000, help="env steps for each library")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, the same for both")
    parser.add_argument("--robopt-env", default="Hopper-v5", help="Hopper-v5 (Gymnasium) or mujoco/Hopper (native)")
    parser.add_argument("--skip-sb3", action="store_true")
    parser.add_argument("--episodes", type=int, default=10, help="deterministic evaluation episodes")
    args = parse_smoke_args(parser, smoke={"steps": 2048, "episodes": 1})
    torch.set_num_threads(args.threads)

    rows = {}
    rows[f"robopt ({args.robopt_env})"] = run_robopt(args.steps, args.seed, args.robopt_env, args.episodes)
    if not args.skip_sb3:
        rows["sb3-contrib (Hopper-v5)"] = run_sb3(args.steps, args.seed, args.episodes)
    print(f"TRPO on Hopper, {args.steps} steps, seed {args.seed}, {args.threads} torch thread(s)")
    print(f"{'library':34s} {'steps':>8s} {'wall s':>8s} {'steps/s':>8s} {'train ret':>10s} {'eval ret':>9s}")
    for name, row in rows.items():
        rate = row["steps"] / row["wall"]
        print(
            f"{name:34s} {row['steps']:8d} {row['wall']:8.1f} {rate:8.0f} {row['train_return']:10.1f} "
            f"{row['eval_return']:9.1f}"
        )
    if len(rows) == 2:
        ours, theirs = rows.values()
        ratio = (ours["steps"] / ours["wall"]) / (theirs["steps"] / theirs["wall"])
        print(f"speed ratio robopt / sb3-contrib: {ratio:.2f}x")


if __name__ == "__main__":
    main()
