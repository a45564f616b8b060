"""Env steps per second of a robopt training run, as one line: the config (with ``key=value`` overrides) is
built, ``--warmup`` iterations run untimed after an off-policy run's random warm-up (compiles, first
allocations), then whole
iterations are timed for at least ``--seconds``. On CUDA the device is synchronized at both ends of the clock.

    .venv/bin/python benchmarks/train_throughput.py configs/ppo_halfcheetah_fast.yaml --seconds 20
    python3 benchmarks/train_throughput.py configs/ppo_halfcheetah_fast.yaml --override env.id=mujoco/Ant \\
        env.backend=mujoco_warp device=cuda env.num_envs=4096 --label "PPO mujoco_warp Ant 4096"
    .venv/bin/python benchmarks/train_throughput.py --smoke    # CI: ppo_halfcheetah_fast, 1 + 1 iterations
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # robopt from the tree when not installed
from smoke import parse_smoke_args  # noqa: E402  (benchmarks/ is the script's directory, so its sibling imports)


def synchronize(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?", help="the experiment's YAML (required but with --smoke)")
    parser.add_argument("--override", nargs="*", default=[], help="key=value overrides")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    parser.add_argument("--seconds", type=float, default=20.0, help="time whole iterations for at least this long")
    parser.add_argument("--label", default=None, help="what the printed line starts with (default: the config)")
    smoke = {"config": "configs/ppo_halfcheetah_fast.yaml", "warmup": 1, "seconds": 0.01}
    args = parse_smoke_args(parser, smoke=smoke)
    if args.config is None:
        parser.error("the following arguments are required: config")

    from robopt.build import build_loop
    from robopt.experiment import load_config
    from robopt.options import ConfigError

    try:
        config = load_config(args.config, args.override)
        loop = build_loop(config)
    except (ConfigError, ValueError) as error:
        raise SystemExit(f"train_throughput: {error}") from None
    label = args.label or f"{Path(args.config).stem} {' '.join(args.override)}".strip()
    start = time.perf_counter()
    schedule = getattr(loop, "schedule", None)  # off-policy: the random warm-up first, then --warmup iterations
    while loop.env_steps < getattr(schedule, "learning_starts", 0):
        loop.iteration(progress=0.0)
    for _ in range(args.warmup):
        loop.iteration(progress=0.0)
    synchronize(config.device)
    warmup_s = time.perf_counter() - start
    steps, iterations, start = loop.env_steps, 0, time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        loop.iteration(progress=min(1.0, loop.env_steps / config.total_steps))
        iterations += 1
    synchronize(config.device)
    elapsed, steps = time.perf_counter() - start, loop.env_steps - steps
    print(
        f"{label}: {steps / elapsed:,.0f} env steps/s ({iterations} iterations, {steps} steps in {elapsed:.1f} s; "
        f"warm-up {warmup_s:.1f} s)",
        flush=True,
    )
    loop.env.close()


if __name__ == "__main__":
    main()
