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
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

import numpy as np

from robopt.config import build_dataclass, config_to_dict
from robopt.experiment import ExperimentConfig
from robopt.experiment import load_config
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


def robopt_arm(task: str, name: str, seed: int, steps: int, run_root: str, history: int, threshold: float) -> dict:
    path, observe, policy = ARMS[task][name]
    data = config_to_dict(load_config(path))
    data.update(seed=seed, total_steps=steps)
    data["log"].update(run_root=f"{run_root}/{name}", progress=False, eval_episodes=10)
    if observe is not None:
        data["env"]["observe"] = observe
    data["policy"].update({key: history if key == "history" else value for key, value in policy.items()})
    result = train(build_dataclass(ExperimentConfig, data))
    with open(result.run_dir / "progress.csv") as handle:
        rows = list(csv.DictReader(handle))
    wall = float(rows[-1]["wall_time"])  # the training loop's own clock: no start-up, no final evaluation
    reached = [int(r["env_steps"]) for r in rows if r["episode_return"] and float(r["episode_return"]) >= threshold]
    evaluation = json.loads((result.run_dir / "eval.json").read_text())
    return {"return": evaluation["mean_return"], "reached": reached[0] if reached else None,
            "steps_per_second": result.env_steps / wall}  # fmt: skip


def sb3_arm(seed: int, steps: int, threshold: float) -> dict:
    """SB3-contrib RecurrentPPO at its defaults on the same partially observed Pendulum (4 envs)."""
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
    model = RecurrentPPO("MlpLstmPolicy", env, seed=seed, device="cpu", verbose=0)
    callback = FirstReach()
    start = time.perf_counter()
    model.learn(steps, callback=callback)
    wall = time.perf_counter() - start
    eval_env = make_vec_env("Pendulum-v1", n_envs=1, seed=seed + 10_000, wrapper_class=Positions)
    returns = []
    for _ in range(10):
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
    parser.add_argument("--run-root", default="/tmp/memory_bench")
    parser.add_argument("--arms", nargs="+", default=[*ARMS["pendulum"], "sb3_lstm"],
                        choices=[*ARMS["pendulum"], "sb3_lstm"])  # fmt: skip
    args = parser.parse_args()
    results = {}
    for name in args.arms:
        results[name] = []
        for seed in args.seeds:
            if name == "sb3_lstm":
                if args.task != "pendulum":
                    parser.error("the sb3_lstm arm runs on --task pendulum only")
                row = sb3_arm(seed, args.steps, args.threshold)
            else:
                row = robopt_arm(args.task, name, seed, args.steps, args.run_root, args.history, args.threshold)
            results[name].append(row)
            print(f"{name} seed {seed}: return {row['return']:.1f}, reached {row['reached']}, "
                  f"{row['steps_per_second']:.0f} steps/s", flush=True)  # fmt: skip
    print(f"\n{args.task}: {args.steps} env steps, seeds {args.seeds}, threshold {args.threshold}")
    print("| arm | return (deterministic, 10 episodes) | steps to threshold per seed | env steps/s |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        returns = [r["return"] for r in rows]
        spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
        reached = ", ".join("-" if r["reached"] is None else str(r["reached"]) for r in rows)
        speed = statistics.mean(r["steps_per_second"] for r in rows)
        print(f"| {name} | {statistics.mean(returns):.1f} +- {spread:.1f} | {reached} | {speed:.0f} |")
    Path(args.run_root).mkdir(parents=True, exist_ok=True)
    (Path(args.run_root) / "summary.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
