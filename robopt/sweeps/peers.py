"""Peer libraries as sweep trials: a Stable-Baselines3 run that writes a run directory ``robopt report`` reads.

``robopt sweep CONFIG --peer sb3-ppo`` adds a point whose trials train SB3's PPO (or SAC, ``sb3-sac``) at SB3's
defaults on the config's task (a native ``mujoco/<Task>`` id becomes its Gymnasium twin) for the config's
``total_steps``, with the trial's seed. The run directory holds ``config.yaml`` (peer, env, seed, steps),
``progress.csv`` (env steps, the mean return and length of the episodes that ended since the last row, wall time;
one row per PPO rollout or per 1000 SAC steps) and ``eval.json`` (the deterministic return over
``--eval-episodes`` episodes on a fresh env seeded ``seed + 10000``, as robopt's runs). SB3 is not a dependency of
robopt: without it a peer trial fails with one line. Run as ``python -m robopt.sweeps.peers PEER ...``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import sys
import time
from pathlib import Path

import yaml

PEERS = ("sb3-ppo", "sb3-sac")
LOG_EVERY = 1000  # SAC: env steps between progress rows


def _model(peer: str, env, seed: int):
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.logger import Logger

    model = (PPO if peer == "sb3-ppo" else SAC)("MlpPolicy", env, seed=seed, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # nothing written beside the run directory
    return model


def train_peer(peer: str, env_id: str, seed: int, total_steps: int, run_dir: Path, eval_episodes: int) -> dict:
    """Train ``peer`` at SB3's defaults, logging into ``run_dir`` (module doc); returns the evaluation summary."""
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    torch.set_num_threads(1)
    model = _model(peer, make_vec_env(env_id, n_envs=1, seed=seed), seed)
    start, returns, lengths = time.perf_counter(), [], []
    handle = (run_dir / "progress.csv").open("w", newline="")
    writer = csv.writer(handle)
    writer.writerow(["env_steps", "episode_return", "episode_length", "wall_time"])

    def flush(steps: int) -> None:
        if returns:
            writer.writerow([steps, float(np.mean(returns)), float(np.mean(lengths)), time.perf_counter() - start])
            handle.flush()
            returns.clear()
            lengths.clear()

    class Progress(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                if "episode" in info:
                    returns.append(info["episode"]["r"])
                    lengths.append(info["episode"]["l"])
            if peer == "sb3-sac" and self.num_timesteps % LOG_EVERY == 0:
                flush(self.num_timesteps)
            return True

        def _on_rollout_end(self) -> None:
            if peer == "sb3-ppo":
                flush(self.num_timesteps)

    try:
        model.learn(total_timesteps=total_steps, callback=Progress())
        flush(model.num_timesteps)
    finally:
        handle.close()
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000)
    episode_returns, episode_lengths = evaluate_policy(
        model, eval_env, eval_episodes, deterministic=True, return_episode_rewards=True
    )
    summary = {
        "mean_return": float(np.mean(episode_returns)), "std_return": float(np.std(episode_returns)),
        "returns": [float(r) for r in episode_returns], "mean_length": float(np.mean(episode_lengths)),
    }  # fmt: skip
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2))
    return summary


def gymnasium_id(env_id: str) -> str:
    """The Gymnasium id a peer trains on: a native ``mujoco/<Task>`` id's twin, any other id as given."""
    if not env_id.startswith("mujoco/"):
        return env_id
    from robopt.envs.registry import gymnasium_twin

    return gymnasium_twin(env_id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m robopt.sweeps.peers", description=__doc__)
    parser.add_argument("peer", choices=PEERS)
    parser.add_argument("--env", required=True, help="Gymnasium id (or a native mujoco/<Task>: its twin)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, required=True, help="env steps to train")
    parser.add_argument("--run-root", type=Path, required=True, help="run directory goes under RUN_ROOT/<peer>/")
    parser.add_argument("--eval-episodes", type=int, default=10)
    args = parser.parse_args(argv)
    try:
        import stable_baselines3  # noqa: F401
    except ImportError:
        print(
            f"robopt: error: --peer {args.peer} needs Stable-Baselines3: pip install stable-baselines3", file=sys.stderr
        )
        return 2
    try:
        env_id = gymnasium_id(args.env)
    except ValueError as error:
        print(f"robopt: error: --peer {args.peer}: {error}", file=sys.stderr)
        return 2
    run_dir = args.run_root / args.peer / datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir.mkdir(parents=True)
    config = {"peer": args.peer, "env": {"id": env_id}, "seed": args.seed, "total_steps": args.steps,
              "hyperparameters": "Stable-Baselines3 defaults"}  # fmt: skip
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    print(f"robopt: training {args.peer} (SB3 defaults) on {env_id} in {run_dir}", flush=True)
    summary = train_peer(args.peer, env_id, args.seed, args.steps, run_dir, args.eval_episodes)
    print(f"deterministic evaluation: {summary['mean_return']:.1f} +- {summary['std_return']:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
