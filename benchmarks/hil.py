"""Hardware in the loop: a run's exported policy over UDP against ``robopt sim-robot`` vs the same policy in process.

    .venv/bin/python benchmarks/hil.py RUN_DIR --episodes 4
    .venv/bin/python benchmarks/hil.py RUN_DIR --latency-ms 10 --loss 0.01 --config configs/deploy/pendulum.yaml
    .venv/bin/python benchmarks/hil.py --smoke    # CI: a 128-step PPO run, 1 episode, ticks of 5 ms

Exports the run (ONNX, checked against torch), then plays ``--episodes`` episodes three ways from the same reset
seed, so the three see the same initial states: in process (the ONNX model stepping a Gymnasium env directly),
over UDP to a simulated robot in another process with no added faults, and over UDP with ``--latency-ms`` added
one way and ``--loss`` packet loss in both directions. Both processes tick at the policy's control period in real
time (``--period`` sets another tick for both). The returns are the simulated robot's own (exact even when packets
are lost). A learning figure, not a timing: other processes may run meanwhile, though a loaded machine does delay
ticks. ``--smoke`` without RUN_DIR trains a 128-step stand-in first.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports


def in_process_returns(policy, env_id: str, episodes: int, seed: int) -> list[float]:
    import gymnasium as gym

    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    returns, total = [], 0.0
    while len(returns) < episodes:
        obs, reward, terminated, truncated, _ = env.step(policy(obs.astype(np.float32)))
        total += float(reward)
        if terminated or truncated:
            returns.append(total)
            obs, total = env.reset()[0], 0.0
    return returns


def udp_returns(
    export_dir: Path, env_id: str, episodes: int, seed: int, period: float, options: list[str], config: Path | None
) -> tuple[list[float], dict]:
    from robopt.sim2real.deploy import deploy

    command = [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", env_id, "--port", "0", "--seed",
               str(seed), "--episodes", str(episodes), *options]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:
            match = re.search(r"on udp [\d.]+:(\d+), period ([\d.e-]+)", line)
            if match:
                break
        else:
            raise SystemExit(f"sim-robot did not start: {server.stdout.read()}")
        duration = episodes * 200 * period + 3.0  # Pendulum: 200 steps per episode
        summary = deploy(
            export_dir, f"udp://127.0.0.1:{match.group(1)}", duration=duration, config_path=config, echo=lambda _: None
        )
        output, _ = server.communicate(timeout=30)
    finally:
        server.kill()
    returns = [float(v) for v in re.findall(r"episode \d+: return (-?[\d.]+)", output)]
    return returns, summary["counters"]


def smoke_run(root: Path) -> Path:
    """``--smoke``'s stand-in for a trained run: PPO on Pendulum-v1 for 128 steps."""
    import contextlib
    import io

    from robopt.experiment import load_config
    from robopt.runner import train

    overrides = [
        "total_steps=128",
        "rollout.num_steps=32",
        f"log.run_root={root}",
        "log.progress=false",
        "log.eval_episodes=0",
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        return train(load_config("configs/ppo_pendulum.yaml", overrides), progress=False).run_dir


def with_period(config: Path | None, period: float, directory: Path) -> Path:
    """The deploy config ``config`` (or the defaults) with its control period set to ``period``."""
    import yaml

    data = yaml.safe_load(config.read_text()) if config is not None else {}
    path = directory / "deploy.yaml"
    path.write_text(yaml.safe_dump({**(data or {}), "period": period}))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, nargs="?", help="a trained Pendulum-v1 run (required but with --smoke)")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--loss", type=float, default=0.01)
    parser.add_argument("--config", type=Path, default=None, help="deploy config (safety limits); default: defaults")
    parser.add_argument(
        "--period",
        type=float,
        default=None,
        help="seconds per tick of both processes (default: the policy's control period)",
    )
    args = parse_smoke_args(parser, smoke={"episodes": 1, "period": 0.005})
    if args.run_dir is None and not args.smoke:
        parser.error("the following arguments are required: run_dir")
    from robopt.sim2real.export import export_run
    from robopt.sim2real.model import load_export

    with tempfile.TemporaryDirectory() as root:
        run_dir = args.run_dir or smoke_run(Path(root) / "runs")
        report = export_run(run_dir, Path(root) / "export", formats=("onnx",))
        sidecar, policy = load_export(report.out_dir)
        period = args.period or sidecar.control_period
        config, options = args.config, []
        if args.period is not None:
            config, options = with_period(args.config, period, Path(root)), ["--period", str(period)]
        rows = {"in process": (in_process_returns(policy, sidecar.env_id, args.episodes, args.seed), {})}
        rows["udp"] = udp_returns(report.out_dir, sidecar.env_id, args.episodes, args.seed, period, options, config)
        faults = [*options, "--latency-ms", str(args.latency_ms), "--loss", str(args.loss)]
        label = f"udp {args.latency_ms:g} ms, {args.loss:.0%} loss"
        rows[label] = udp_returns(report.out_dir, sidecar.env_id, args.episodes, args.seed, period, faults, config)
    print(
        f"\n{sidecar.env_id}, {args.episodes} episodes from seed {args.seed}, period {period} s, "
        f"deploy config: {args.config or 'defaults'}"
    )
    for name, (returns, counters) in rows.items():
        quiet = ("ticks", "waiting")
        fired = {k: v for k, v in counters.items() if v and k not in quiet and not k.startswith("robot.")}
        mean = statistics.fmean(returns) if returns else float("nan")
        std = statistics.pstdev(returns) if returns else float("nan")
        print(f"{name:24s} return {mean:9.1f} +- {std:6.1f}  per episode {[round(r, 1) for r in returns]}  {fired}")


if __name__ == "__main__":
    main()
