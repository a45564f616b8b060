"""Memory on partially observed tasks: positions only, no velocities.

--task pendulum: Pendulum-v1 seen through cos and sin of its angle (configs/ppo_pendulum*.yaml, 4 envs);
--task hopper: native Hopper seen through its 5 joint and torso positions, not its 6 velocities
(configs/ppo_hopper_fast.yaml with env.observe, 64 envs). Arms, each trained for the same env steps and seeds by PPO:
    full      the fully observed task, memoryless MLP
    partial   positions only, memoryless MLP
    history   positions only, a window of the last K steps' observations and actions (policy.history=K)
    gru       positions only, a GRU actor-critic (Pendulum: configs/ppo_pendulum_partial_gru.yaml, GRU 64;
              Hopper: GRU 128, sequences of 16)
    sb3_lstm  Pendulum only: positions only, SB3-contrib's RecurrentPPO ("MlpLstmPolicy") at its defaults on 4 envs,
              one torch thread as robopt's runs

Printed per arm: the deterministic return at the end (10 episodes, mean over seeds +- std), the env steps at which
the training episode return first reached --threshold (per seed; "-" never), and env steps per second of wall-clock
over training (collection and updates; robopt's from its progress.csv ``wall_time``, SB3's around ``learn``).
Arms run one after the other in this process: a learning result, and a speed comparison only as fair as the
machine was quiet (say what else ran).

    .venv/bin/python benchmarks/memory_partial.py --steps 100000 --seeds 0 1 2 --run-root /tmp/memory_bench
    .venv/bin/python benchmarks/memory_partial.py --task hopper --steps 1000000 --seeds 0 --threshold 1000 \
        --arms full partial history gru
    .venv/bin/python benchmarks/memory_partial.py --smoke    # CI: 128 steps per arm, SB3's 64-step rollouts
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.config import build_dataclass, config_to_dict
from robopt.experiment import ExperimentConfig, load_config
from robopt.runner import train

HOPPER_POSITIONS = [0, 1, 2, 3, 4]  # native Hopper's qpos[1:]; 5..10 are the velocities
GRU_128 = {"type": "gru", "hidden": 128, "sequence_length": 16}
ARMS = {  # (config, env.observe, policy changes); "history" is --history
    "pendulum": {
        "full": ("configs/ppo_pendulum.yaml", None, {}),
        "partial": ("configs/ppo_pendulum_partial.yaml", None, {}),
        "history": ("configs/ppo_pendulum_partial.yaml", None, {"history": None}),
        "gru": ("configs/ppo_pendulum_partial_gru.yaml", None, {}),
    },
    "hopper": {
        "full": ("configs/ppo_hopper_fast.yaml", None, {}),
        "partial": ("configs/ppo_hopper_fast.yaml", HOPPER_POSITIONS, {}),
        "history": ("configs/ppo_hopper_fast.yaml", HOPPER_POSITIONS, {"history": None}),
        "gru": ("configs/ppo_hopper_fast.yaml", HOPPER_POSITIONS, {"recurrent": GRU_128}),
    },
}


def robopt_arm(args, name: str, seed: int, run_root: str) -> dict:
    """One robopt arm of ``args.task`` trained for ``args.steps`` (``args.set`` overrides first)."""
    path, observe, policy = ARMS[args.task][name]
    data = config_to_dict(load_config(path, args.set))
    data.update(seed=seed, total_steps=args.steps)
    data["log"].update(run_root=f"{run_root}/{name}", progress=False, eval_episodes=args.episodes)
    if observe is not None:
        data["env"]["observe"] = observe
    data["policy"].update({key: args.history if key == "history" else value for key, value in policy.items()})
    result = train(build_dataclass(ExperimentConfig, data))
    with open(result.run_dir / "progress.csv") as handle:
        rows = list(csv.DictReader(handle))
    wall = float(rows[-1]["wall_time"])  # the training loop's own clock: no start-up, no final evaluation
    threshold = args.threshold
    reached = [int(r["env_steps"]) for r in rows if r["episode_return"] and float(r["episode_return"]) >= threshold]
    evaluation = json.loads((result.run_dir / "eval.json").read_text())
    return {
        "return": evaluation["mean_return"],
        "reached": reached[0] if reached else None,
        "steps_per_second": result.env_steps / wall,
    }


def sb3_arm(seed: int, steps: int, threshold: float, episodes: int = 10, **changes) -> dict:
    """SB3-contrib RecurrentPPO at its defaults (but ``changes``) on the same partially observed Pendulum (4 envs)."""
    import gymnasium as gym
    import torch
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class Positions(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

        def observation(self, obs):
            return obs[:2].astype(np.float32)

    class FirstReach(BaseCallback):
        def __init__(self):
            super().__init__()
            self.reached = None

        def _on_rollout_end(self) -> None:
            returns = [info["r"] for info in self.model.ep_info_buffer]
            if self.reached is None and returns and statistics.mean(returns[-4:]) >= threshold:
                self.reached = self.num_timesteps

        def _on_step(self) -> bool:
            return True

    torch.set_num_threads(1)  # as robopt's runs here (its auto choice for small networks on CPU)
    env = make_vec_env("Pendulum-v1", n_envs=4, seed=seed, wrapper_class=Positions)
    model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", verbose=0, **changes)
    callback = FirstReach()
    start = time.perf_counter()
    model.learn(steps, callback=callback)
    wall = time.perf_counter() - start
    eval_env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed + 10_000, wrapper_class=Positions)
    returns = []
    for _ in range(episodes):
        obs, state, start_flag, total, done = eval_env.reset(), None, np.ones(1, bool), 0.0, False
        while not done:
            action, state = model.predict(obs, state=state, episode_start=start_flag, deterministic=True)
            obs, reward, dones, _ = eval_env.step(action)
            total, done, start_flag = total + float(reward[0]), bool(dones[0]), dones
        returns.append(total)
    return {"return": statistics.mean(returns), "reached": callback.reached, "steps_per_second": steps / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=list(ARMS), default="pendulum")
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--history", type=int, default=4, help="K of the history arm")
    parser.add_argument("--threshold", type=float, default=-400.0, help="training return that counts as solved")
    parser.add_argument("--run-root", default="/tmp/memory_bench", help="runs and summary.json (--smoke: temporary)")
    parser.add_argument(
        "--arms", nargs="+", default=[*ARMS["pendulum"], "sb3_lstm"], choices=[*ARMS["pendulum"], "sb3_lstm"]
    )
    parser.add_argument("--episodes", type=int, default=10, help="deterministic evaluation episodes at the end")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides of robopt's arms")
    parser.add_argument("--sb3-set", nargs="+", default=[], metavar="KEY=VALUE", help="RecurrentPPO arguments")
    smoke = {
        "seeds": [0],
        "steps": 128,
        "episodes": 1,
        "set": ["rollout.num_steps=32"],
        "run_root": None,
        "sb3_set": ["n_steps=16", "batch_size=64", "n_epochs=1"],
    }
    args = parse_smoke_args(parser, smoke=smoke)
    if args.task != "pendulum" and "sb3_lstm" in args.arms:
        parser.error("the sb3_lstm arm runs on --task pendulum only")
    with tempfile.TemporaryDirectory() as temporary:  # the runs of --smoke without --run-root
        run_root = args.run_root or temporary
        results = {}
        for name in args.arms:
            results[name] = []
            for seed in args.seeds:
                if name == "sb3_lstm":
                    changes = {key: yaml.safe_load(value) for key, value in (kv.split("=", 1) for kv in args.sb3_set)}
                    row = sb3_arm(seed, args.steps, args.threshold, args.episodes, **changes)
                else:
                    row = robopt_arm(args, name, seed, run_root)
                results[name].append(row)
                print(
                    f"{name} seed {seed}: return {row['return']:.1f}, reached {row['reached']}, "
                    f"{row['steps_per_second']:.0f} steps/s",
                    flush=True,
                )
        print(f"\n{args.task}: {args.steps} env steps, seeds {args.seeds}, threshold {args.threshold}")
        print(f"| arm | return (deterministic, {args.episodes} episodes) | steps to threshold per seed | env steps/s |")
        print("|---|---|---|---|")
        for name, rows in results.items():
            returns = [r["return"] for r in rows]
            spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
            reached = ", ".join("-" if r["reached"] is None else str(r["reached"]) for r in rows)
            speed = statistics.mean(r["steps_per_second"] for r in rows)
            print(f"| {name} | {statistics.mean(returns):.1f} +- {spread:.1f} | {reached} | {speed:.0f} |")
        Path(run_root).mkdir(parents=True, exist_ok=True)
        (Path(run_root) / "summary.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
