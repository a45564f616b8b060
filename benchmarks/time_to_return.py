"""Wall-clock time to a working controller: seconds of training until the deterministic return on a Gymnasium
MuJoCo task first reaches each of a few levels, for robopt's fast configs and Stable-Baselines3.

Contestants (``--contestants``):
- ``ppo``: ``configs/ppo_halfcheetah_fast.yaml`` (native batched MuJoCo, 64 envs x 32 steps, 5 epochs of
  512-sample minibatches, lr 3e-4; rl-zoo's tuned HalfCheetah settings otherwise).
- ``sac`` / ``td3``: ``configs/sac_halfcheetah_fast.yaml`` / ``configs/td3_halfcheetah_fast.yaml`` (many native
  envs, large batches, fewer updates per env step, observation normalization, the compiled update).
- ``ppo-gpu``: ``configs/ppo_halfcheetah_gpu.yaml`` (MuJoCo Warp on CUDA, 1024 envs, CUDA-graph replay; needs a GPU).
- ``sb3-ppo``: SB3's PPO at rl-baselines3-zoo's tuned HalfCheetah hyperparameters (1 env x 512 steps, 20 epochs of
  64-sample minibatches, lr 2.0633e-5, 256x256 ReLU, log_std -2, gamma 0.98, GAE 0.92, clip 0.1, VecNormalize).
- ``sb3-sac``: SB3's SAC at rl-zoo's HalfCheetah (and Hopper) settings: its defaults (256x256 ReLU, lr 3e-4,
  batch 256, one update per env step, buffer 1M, automatic entropy) with 10k random warm-up steps.

robopt trains on its native batched env of the same task (``mujoco/HalfCheetah`` for HalfCheetah-v5); every
contestant is evaluated every ``--eval-every`` env steps (rounded to whole training chunks) on the Gymnasium env
with the deterministic policy over ``--episodes`` episodes; evaluation time is excluded from the clock. A run stops
when it has reached every level, or at ``--budget-s`` seconds of training or ``--max-steps``; a level not reached
is reported as such with the best return, never dropped, and a ratio against it is a bound. One torch thread
each; contestants run one after another, so run nothing else meanwhile.

    .venv/bin/python benchmarks/time_to_return.py --seeds 0 1 2 --contestants ppo sb3-ppo --levels 3000
    .venv/bin/python benchmarks/time_to_return.py --seeds 0 1 2 --contestants sac td3 sb3-sac --levels 3000 5000 8000
    .venv/bin/python benchmarks/time_to_return.py --env Hopper-v5 --contestants sac sb3-sac --levels 1000 2500 3000
    .venv/bin/python benchmarks/time_to_return.py --seeds 0 --contestants ppo --final-steps 1000000
    .venv/bin/python benchmarks/time_to_return.py --smoke    # CI: one training chunk and 1 episode per contestant
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ROBOPT_CONFIGS = {"ppo": "ppo_halfcheetah_fast.yaml", "sac": "sac_halfcheetah_fast.yaml",
                  "td3": "td3_halfcheetah_fast.yaml", "ppo-gpu": "ppo_halfcheetah_gpu.yaml"}  # fmt: skip
NATIVE_IDS = {"HalfCheetah-v5": "mujoco/HalfCheetah", "Hopper-v5": "mujoco/Hopper", "Walker2d-v5": "mujoco/Walker2d",
              "Ant-v5": "mujoco/Ant"}  # fmt: skip
SB3_CHUNK = 1000  # env steps per SB3 SAC training call (PPO: one 512-step rollout)


@dataclass
class Outcome:
    reached: dict[float, tuple[float, int]] = field(default_factory=dict)  # level -> (seconds, env steps)
    best_return: float = float("-inf")
    trained_seconds: float = 0.0
    trained_steps: int = 0


def sb3_ppo_trainer(env_id: str, seed: int):
    """(train_one_rollout, evaluate, steps_per_rollout) for SB3's PPO at rl-zoo's HalfCheetah settings."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed), gamma=0.98)
    policy_kwargs = {"log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.ReLU,
                     "net_arch": {"pi": [256, 256], "vf": [256, 256]}}  # fmt: skip
    model = PPO(
        "MlpPolicy",
        env,
        batch_size=64,
        n_steps=512,
        gamma=0.98,
        learning_rate=2.0633e-05,
        ent_coef=0.000401762,
        clip_range=0.1,
        n_epochs=20,
        gae_lambda=0.92,
        max_grad_norm=0.8,
        vf_coef=0.58096,
        policy_kwargs=policy_kwargs,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> dir in the system temp

    def train() -> None:
        model.learn(total_timesteps=512, reset_num_timesteps=False)

    def evaluate(episodes: int) -> float:
        eval_env = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed + 10_000), training=False, norm_reward=False)
        eval_env.obs_rms = env.obs_rms
        mean_return, _ = evaluate_policy(model, eval_env, episodes, deterministic=True)
        return float(mean_return)

    return train, evaluate, 512


def sb3_sac_trainer(env_id: str, seed: int):
    """(train_one_chunk, evaluate, steps_per_chunk) for SB3's SAC at rl-zoo's HalfCheetah settings."""
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.logger import Logger

    model = SAC(
        "MlpPolicy",
        make_vec_env(env_id, n_envs=1, seed=seed),
        learning_starts=10_000,
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.set_logger(Logger(folder=None, output_formats=[]))

    def train() -> None:
        model.learn(total_timesteps=SB3_CHUNK, reset_num_timesteps=False)

    def evaluate(episodes: int) -> float:
        eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000)
        return float(evaluate_policy(model, eval_env, episodes, deterministic=True)[0])

    return train, evaluate, SB3_CHUNK


def robopt_trainer(name: str, env_id: str, seed: int, overrides: tuple[str, ...] = ()):
    """(train_one_iteration, evaluate, steps_per_iteration) for robopt's fast config ``name`` on ``env_id``'s
    native twin (with ``key=value`` overrides)."""
    from robopt.build import build_loop
    from robopt.envs import make_env
    from robopt.evaluation import evaluate_policy
    from robopt.experiment import load_config

    native = NATIVE_IDS.get(env_id)
    if native is None:
        raise SystemExit(f"--env {env_id}: robopt's fast configs run on a native twin of {sorted(NATIVE_IDS)}")
    config = load_config(
        CONFIGS / ROBOPT_CONFIGS[name], [f"env.id={native}", *overrides, f"seed={seed}", "torch_threads=1"]
    )
    loop = build_loop(config)
    total = config.total_steps

    def train() -> None:
        loop.iteration(progress=min(1.0, loop.env_steps / total))

    def evaluate(episodes: int) -> float:
        env = make_env(env_id, episodes)
        try:
            return evaluate_policy(loop.policy, env, episodes, seed=seed + 10_000).mean_return
        finally:
            env.close()

    return train, evaluate, loop.steps_per_iteration


def time_to_levels(make, seed: int, args) -> Outcome:
    """Train until every level is reached, or the time or step budget is spent; first crossing of each level."""
    train, evaluate, per_chunk = make(seed)
    chunks_per_eval = max(1, round(args.eval_every / per_chunk))
    outcome = Outcome()
    while outcome.trained_seconds < args.budget_s and outcome.trained_steps < args.max_steps:
        start = time.perf_counter()
        for _ in range(chunks_per_eval):
            train()
        outcome.trained_seconds += time.perf_counter() - start
        outcome.trained_steps += chunks_per_eval * per_chunk
        value = evaluate(args.episodes)
        outcome.best_return = max(outcome.best_return, value)
        for level in args.levels:
            if value >= level and level not in outcome.reached:
                outcome.reached[level] = (outcome.trained_seconds, outcome.trained_steps)
        if len(outcome.reached) == len(args.levels):
            break
    return outcome


def final_return(name: str, env_id: str, seed: int, steps: int, episodes: int, overrides) -> tuple[float, float]:
    """robopt's fast config ``name`` trained for ``steps``: (deterministic return, training seconds)."""
    train, evaluate, per_iteration = robopt_trainer(name, env_id, seed, overrides)
    start = time.perf_counter()
    for _ in range(-(-steps // per_iteration)):
        train()
    seconds = time.perf_counter() - start
    return evaluate(episodes), seconds


def maker(name: str, env_id: str, overrides: tuple[str, ...]):
    if name == "sb3-ppo":
        return lambda seed: sb3_ppo_trainer(env_id, seed)
    if name == "sb3-sac":
        return lambda seed: sb3_sac_trainer(env_id, seed)
    return lambda seed: robopt_trainer(name, env_id, seed, overrides)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="HalfCheetah-v5", help="Gymnasium id (robopt trains on its native twin)")
    parser.add_argument(
        "--contestants", nargs="+", default=["ppo", "sb3-ppo"], choices=(*ROBOPT_CONFIGS, "sb3-ppo", "sb3-sac")
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--levels", type=float, nargs="+", default=[3000.0], help="deterministic returns to reach")
    parser.add_argument("--eval-every", type=int, default=10_240, help="env steps between evaluations")
    parser.add_argument("--episodes", type=int, default=5, help="deterministic episodes per evaluation")
    parser.add_argument("--budget-s", type=float, default=1200.0, help="training seconds per run before giving up")
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument("--final-steps", type=int, default=0, help="also train robopt's contestants this long")
    parser.add_argument("--override", nargs="*", default=[], help="key=value overrides of robopt's configs")
    smoke = {"seeds": [0], "eval_every": 1, "episodes": 1, "max_steps": 1, "final_steps": 1}
    args = parse_smoke_args(parser, smoke=smoke)
    args.levels = sorted(args.levels)
    torch.set_num_threads(1)
    outcomes: dict[str, list[Outcome]] = {name: [] for name in args.contestants}
    for seed in args.seeds:
        for name in args.contestants:
            outcome = time_to_levels(maker(name, args.env, tuple(args.override)), seed, args)
            outcomes[name].append(outcome)
            levels = ", ".join(
                f"{level:.0f}: {outcome.reached[level][0]:.1f} s / {outcome.reached[level][1]} steps"
                if level in outcome.reached
                else f"{level:.0f}: not reached"
                for level in args.levels
            )
            print(
                f"seed {seed}: {name:8s} {levels} (best {outcome.best_return:.0f}, trained "
                f"{outcome.trained_seconds:.0f} s / {outcome.trained_steps} steps)",
                flush=True,
            )
    print(
        f"\nTime to deterministic returns on {args.env}, seeds {args.seeds}, budget {args.budget_s:.0f} s / "
        f"{args.max_steps} steps per run"
    )
    for level in args.levels:
        for name, rows in outcomes.items():
            times = [row.reached[level][0] for row in rows if level in row.reached]
            steps = [row.reached[level][1] for row in rows if level in row.reached]
            summary = (
                f"{statistics.mean(times):7.1f} s mean ({', '.join(f'{t:.1f}' for t in times)}), "
                f"{statistics.mean(steps):.0f} steps"
                if times
                else "-"
            )
            print(f"{level:6.0f} {name:8s} reached in {len(times)}/{len(rows)} runs: {summary}")
        print_ratios(outcomes, level)
    if args.final_steps:
        for seed in args.seeds:
            for name in (n for n in args.contestants if n in ROBOPT_CONFIGS):
                value, seconds = final_return(name, args.env, seed, args.final_steps, 10, tuple(args.override))
                print(
                    f"seed {seed}: {name} return after {args.final_steps} steps: {value:.1f} (trained {seconds:.0f} s)"
                )


def print_ratios(outcomes: dict[str, list[Outcome]], level: float) -> None:
    """Each SB3 contestant's mean time over each robopt contestant's; a run that did not reach the level counts
    its whole training time, so the ratio is then a bound (said)."""
    for theirs in (name for name in outcomes if name.startswith("sb3")):
        for ours in (name for name in outcomes if not name.startswith("sb3")):

            def seconds(rows):
                return [row.reached[level][0] if level in row.reached else row.trained_seconds for row in rows]

            ratio = statistics.mean(seconds(outcomes[theirs])) / statistics.mean(seconds(outcomes[ours]))
            missed_theirs = any(level not in row.reached for row in outcomes[theirs])
            missed_ours = any(level not in row.reached for row in outcomes[ours])
            bound = " (at least)" if missed_theirs and not missed_ours else ""
            bound = " (at most)" if missed_ours and not missed_theirs else bound
            bound = " (both missed runs: no ratio)" if missed_ours and missed_theirs else bound
            print(f"       {theirs} time / {ours} time: {ratio:.1f}x{bound}")


if __name__ == "__main__":
    main()
