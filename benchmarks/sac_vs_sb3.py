"""robopt SAC vs Stable-Baselines3 SAC on HalfCheetah-v5 at identical hyperparameters, interleaved in one run.

Hyperparameters are SB3's SAC defaults (rl-zoo's HalfCheetah settings but for the warm-up): 256x256 ReLU actor
and twin critics, state-dependent log-std clamped to [-20, 2], tanh squashing, Adam lr 3e-4, batch 256, one
gradient update per env step, tau 0.005, gamma 0.99, automatic entropy temperature (initial 1, target -A),
``--learning-starts`` uniform random steps first, one env, no observation normalization, the same torch threads.

Three contestants (two with ``--no-compiled``): SB3, robopt's eager update and robopt with ``algo.compile=true``
(the whole update as one compiled graph). Each trains ``--steps`` env steps per seed, interleaved ``--chunk`` steps
at a time (SB3's ``learn`` continued with ``reset_num_timesteps=False``, robopt's loop one iteration at a time) so
that load from other processes hits all alike. Timed: the learning phase after the warm-up (each step with one
update). The compile happens at the compiled update's first call, in the warm-up's last phase; its seconds are
printed apart. Prints env steps = gradient updates per second of wall-clock and of CPU time, the ratios to SB3, and the
deterministic return of each (10 episodes, seed + 10000). Run nothing else meanwhile.

    .venv/bin/python benchmarks/sac_vs_sb3.py --steps 6000 --learning-starts 1000 --seeds 0   # speed, 5-6 min
    .venv/bin/python benchmarks/sac_vs_sb3.py --steps 30000 --seeds 0 1                        # speed and return
    .venv/bin/python benchmarks/sac_vs_sb3.py --smoke    # CI: 16 updates after 256 random steps, no compile
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ppo_vs_sb3 import Clock, evaluate_robopt, print_summary  # noqa: E402  (timing and evaluation of the PPO comparison)
from smoke import parse_smoke_args  # noqa: E402


def make_sb3(env_id: str, seed: int, learning_starts: int):
    from stable_baselines3 import SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import Logger

    env = make_vec_env(env_id, n_envs=1, seed=seed)
    model = SAC("MlpPolicy", env, learning_starts=learning_starts, seed=seed, device="cpu", verbose=0)
    model.set_logger(Logger(folder=None, output_formats=[]))  # no SB3-<date> dir in the system temp
    return model


def make_robopt(env_id: str, seed: int, learning_starts: int, chunk: int, threads: int, compile_update: bool):
    from robopt.build import build_loop
    from robopt.experiment import load_config

    overrides = [f"env.id={env_id}", "env.backend=gymnasium", f"seed={seed}", f"torch_threads={threads}",
                 f"algo.loop.learning_starts={learning_starts}", f"algo.loop.iteration_steps={chunk}",
                 f"algo.compile={str(compile_update).lower()}"]  # fmt: skip
    return build_loop(load_config("configs/sac_halfcheetah.yaml", overrides))


def evaluate_sb3(model, env_id: str, seed: int, episodes: int = 10) -> float:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy

    env = make_vec_env(env_id, n_envs=1, seed=seed)
    mean_return, _ = evaluate_policy(model, env, episodes, deterministic=True)
    return float(mean_return)


def run_seed(args, seed: int) -> tuple[dict, float]:
    """(wall steps/s, CPU steps/s, return) per contestant over the learning phase of one seed, and the seconds
    the compiled contestant's compile took (its first update, which ran in the warm-up's last phase)."""
    contestants = {"sb3": make_sb3(args.env, seed, args.learning_starts)}
    contestants["robopt"] = make_robopt(args.env, seed, args.learning_starts, args.chunk, args.threads, False)
    if args.compiled:
        contestants["compiled"] = make_robopt(args.env, seed, args.learning_starts, args.chunk, args.threads, True)
    torch.set_num_threads(args.threads)  # after build_loop, which sets robopt's own count; SB3 uses the same

    def turn(name: str, steps: int) -> None:
        model = contestants[name]
        if name == "sb3":
            model.learn(total_timesteps=steps, reset_num_timesteps=False)
        else:
            target = model.env_steps + steps
            while model.env_steps < target:
                model.iteration(progress=model.env_steps / args.steps)

    for name in contestants:  # warm-up: untimed
        turn(name, args.learning_starts)
    clocks = {name: Clock() for name in contestants}
    timed = 0
    while timed < args.steps - args.learning_starts:
        for name in contestants:
            with clocks[name]:
                turn(name, args.chunk)
        timed += args.chunk
    compile_s = contestants["compiled"].algorithm.compiled.compile_seconds if args.compiled else 0.0
    returns = {}
    for name, model in contestants.items():
        if name == "sb3":
            returns[name] = evaluate_sb3(model, args.env, seed + 10_000, args.episodes)
        else:
            assert model.env_steps == contestants["sb3"].num_timesteps, (name, model.env_steps)
            returns[name] = evaluate_robopt(model, args.env, seed + 10_000, args.episodes)
            model.env.close()
    rows = {name: (timed / clock.wall, timed / clock.cpu, returns[name]) for name, clock in clocks.items()}
    return rows, compile_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30_000, help="env steps per run, warm-up included")
    parser.add_argument("--learning-starts", type=int, default=10_000, help="uniform random warm-up steps (untimed)")
    parser.add_argument("--chunk", type=int, default=1000, help="env steps per interleaved turn")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both")
    parser.add_argument("--env", default="HalfCheetah-v5", help="Gymnasium id")
    compiled = "robopt with algo.compile=true as a third contestant (--no-compiled: left out)"
    parser.add_argument("--compiled", action=argparse.BooleanOptionalAction, default=True, help=compiled)
    parser.add_argument("--episodes", type=int, default=10, help="deterministic evaluation episodes")
    args = parse_smoke_args(
        parser, smoke={"steps": 272, "learning_starts": 256, "chunk": 16, "episodes": 1, "compiled": False}
    )
    if args.steps <= args.learning_starts or (args.steps - args.learning_starts) % args.chunk:
        parser.error("--steps minus --learning-starts must be a positive multiple of --chunk")
    if args.learning_starts % args.chunk:  # robopt's loop moves in whole chunks: it would overshoot SB3's warm-up
        parser.error("--learning-starts must be a multiple of --chunk")
    names = ("sb3", "robopt", "compiled") if args.compiled else ("sb3", "robopt")
    rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    compile_times = []
    for seed in args.seeds:
        seed_rows, compile_s = run_seed(args, seed)
        compile_times.append(compile_s)
        for name, row in seed_rows.items():
            rows[name].append(row)
            print(
                f"seed {seed}: {name:8s} {row[0]:6.1f} steps/s wall, {row[1]:6.1f} per CPU-s, return {row[2]:8.1f}",
                flush=True,
            )
    print(
        f"\nSAC on {args.env}, {args.steps} steps ({args.learning_starts} warm-up untimed), "
        f"seeds {args.seeds}, {args.threads} torch thread(s), one update per step"
    )
    print_summary(rows, speed="steps/s = updates/s (wall)")
    if args.compiled:
        for column, label in ((0, "wall-clock"), (1, "CPU-time")):
            ours, theirs = (statistics.mean(v[column] for v in rows[name]) for name in ("compiled", "sb3"))
            ratio = ours / theirs
            print(f"speed ratio compiled / sb3 ({label}): {ratio:.2f}x")
        timed = args.steps - args.learning_starts
        counted = statistics.mean(timed / (timed / row[0] + c) for row, c in zip(rows["compiled"], compile_times))
        sb3 = statistics.mean(row[0] for row in rows["sb3"])
        print(f"speed ratio compiled / sb3 (wall-clock, the compile counted): {counted / sb3:.2f}x")
        print(
            f"compile time (the first compiled update, in the untimed warm-up): "
            f"{', '.join(f'{t:.1f} s' for t in compile_times)}"
        )


if __name__ == "__main__":
    main()
