"""Hardware in the loop for the arm: an exported manipulation policy (robopt:arm_gripper, joint_position_delta actions,
e.g. a DPPO-fine-tuned diffusion policy on lift or place) over ROS 2 on ``robopt sim-robot``, against the same ONNX
policy in process.

    python benchmarks/manipulation_hil.py RUN_DIR [--episodes 100] [--latency-ms 10] [--loss 0.01]
    python benchmarks/manipulation_hil.py --smoke    # CI: a 32-step Gaussian stand-in on lift, 2 short episodes

The run is exported (ONNX, checked against torch). In process: ``--episodes`` rows of the run's task, one episode
each, the ONNX policy's deterministic action chunks executed open loop and replanned every chunk (as the deploy
runtime does), success as the env reports it. Over ROS 2: ``robopt sim-robot RUN_CONFIG --ros2`` in another process
publishes the observation vector on /robopt/observation and the episode count on /robopt/episode at the control
rate (50 Hz) and takes the arm's and the gripper's joint position targets on a ros2_control position controller's
topic; ``--latency-ms`` one way and ``--loss`` on every message. The deploy runtime (another process,
``configs/deploy/arm_gripper_ros2.yaml``) turns each delta action into absolute targets (the measured joint
positions plus action_scale * action); the simulated robot turns them back into its delta when it steps. The server
counts the successes of its first ``--episodes`` episodes. Run it alone: the processes share the two cores.
"""

from __future__ import annotations

import argparse
import math
import re
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import yaml
from smoke import parse_smoke_args, tiny_run  # benchmarks/ is the script's directory, so its sibling imports

ROOT = Path(__file__).resolve().parents[1]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson interval of a success rate."""
    if n == 0:
        return math.nan, math.nan
    p, denominator = successes / n, 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def one_row_config(run_dir: Path, scratch: Path, episode_s: float | None) -> Path:
    """The run's config with one row (the simulated robot), ``episode_s`` if given."""
    data = yaml.safe_load((run_dir / "config.yaml").read_text())
    data["env"]["num_envs"] = 1
    if episode_s:
        data["task"]["episode_s"] = episode_s
    path = scratch / "arm_hil.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def in_process(config: Path, export_dir: Path, episodes: int, seed: int) -> dict:
    """Successes of the ONNX policy on ``episodes`` rows, one episode each: the env of the run's policy (a chunked
    policy's steps a whole chunk, ``robopt.envs.chunking``: replanned every H steps, as the runtime does)."""
    import torch

    from robopt.build import build_env
    from robopt.experiment import load_config
    from robopt.sim2real.model import load_export

    _, policy = load_export(export_dir)
    env = build_env(load_config(config), num_envs=episodes)
    obs = env.reset(seed=seed).numpy()
    alive, success = np.ones(episodes, dtype=bool), np.zeros(episodes, dtype=bool)
    while alive.any():
        chunk = policy.batch(obs.astype(np.float32)).reshape(episodes, -1)  # [N, H * A]
        obs, _, terminated, truncated, info = env.step(torch.as_tensor(chunk, dtype=torch.float32))
        obs, done = obs.numpy(), (terminated | truncated).numpy()
        success |= alive & done & info["is_success"].numpy().astype(bool)
        alive &= ~done
    env.close()
    return {"successes": int(success.sum()), "episodes": episodes}


def over_ros2(config: Path, export_dir: Path, episodes: int, latency_ms: float, loss: float, seed: int) -> dict:
    """Serve the simulated arm for ``episodes`` episodes, deploy the export against it, count its successes."""
    domain = 1 + zlib.crc32(f"arm{time.time()}".encode()) % 200
    server = subprocess.Popen(
        [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", str(config), "--ros2", "--domain-id",
         str(domain), "--interface", "lo", "--dds-peer", "127.0.0.1", "--latency-ms", str(latency_ms), "--loss",
         str(loss), "--episodes", str(episodes), "--seed", str(seed)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )  # fmt: skip
    deploy_config = yaml.safe_load((ROOT / "configs" / "deploy" / "arm_gripper_ros2.yaml").read_text())
    deploy_config["robot"]["ros2"] = {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]}
    path = config.parent / "deploy.yaml"
    path.write_text(yaml.safe_dump(deploy_config))
    runtime = None
    try:
        print(server.stdout.readline().strip(), flush=True)  # ready
        # Ctrl-C must reach it: a script started in the background of a shell inherits SIGINT ignored
        runtime = subprocess.Popen(
            [sys.executable, "-m", "robopt", "deploy", str(export_dir), "--robot", "ros2://", "--config", str(path)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        output, _ = server.communicate()  # the server stops after its episodes
        runtime.send_signal(signal.SIGINT)  # Ctrl-C: the runtime stops and prints its summary
        try:
            deployed, _ = runtime.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            runtime.kill()
            deployed = runtime.communicate()[0] + "\n(the runtime did not stop on Ctrl-C within 60 s: killed)"
    finally:
        server.kill()
        if runtime is not None:
            runtime.kill()
    lines = re.findall(r"^episode \d+: return \S+ \(\d+ steps, success ([01])\)", output, re.MULTILINE)
    if len(lines) < episodes:
        raise SystemExit(
            f"the simulated robot reported {len(lines)} of {episodes} episodes:\n{output[-3000:]}\n"
            f"the runtime:\n{deployed[-2000:]}"
        )
    summary = re.search(r"^sim-robot: episodes .*$", output, re.MULTILINE)
    ticks = re.search(r"^ticks: .*$", deployed, re.MULTILINE)
    checks = re.search(r"^counters: .*$", deployed, re.MULTILINE)
    for line in (summary, ticks, checks):
        if line is not None:
            print(line.group(0), flush=True)
    if ticks is None:
        print(f"the runtime printed no summary; its last lines:\n{deployed[-1500:]}", flush=True)
    return {"successes": sum(int(s) for s in lines[:episodes]), "episodes": episodes}


def smoke_run(root: Path) -> Path:
    """``--smoke``'s stand-in for a fine-tuned policy: one 32-step PPO iteration of small networks on lift."""
    tiny = ["env.num_envs=4", "rollout.num_steps=8", "algo.minibatch_size=32", "policy.hidden=[32,32]",
            "critic.hidden=[32,32]", "total_steps=32"]  # fmt: skip
    return tiny_run(ROOT / "configs" / "ppo_lift_cube.yaml", root, tiny)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, nargs="?", help="a trained arm_gripper run (required but with --smoke)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--loss", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1000, help="the episodes' seed (both sides)")
    parser.add_argument("--episode-s", type=float, default=0.0, help="episode length (0: the run's)")
    args = parse_smoke_args(parser, smoke={"episodes": 2, "episode_s": 0.5})
    if args.run_dir is None and not args.smoke:
        parser.error("the following arguments are required: run_dir")
    from robopt.sim2real.export import export_run

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or smoke_run(Path(scratch) / "runs")
        report = export_run(run_dir, out_dir=Path(scratch) / "export")
        print(f"exported, parity max difference {max(report.max_difference.values()):.2e}", flush=True)
        config = one_row_config(run_dir, Path(scratch), args.episode_s)
        start = time.perf_counter()
        local = in_process(config, report.out_dir, args.episodes, args.seed)
        print(f"in process: {local} ({time.perf_counter() - start:.0f} s)", flush=True)
        start = time.perf_counter()
        remote = over_ros2(config, report.out_dir, args.episodes, args.latency_ms, args.loss, args.seed)
        print(f"over ROS 2: {remote} ({time.perf_counter() - start:.0f} s)", flush=True)
        print("\n| | success | 95 % interval |")
        print("|---|---|---|")
        for name, r in (("in process", local), (f"ROS 2, {args.latency_ms:g} ms, {args.loss:.0%} loss", remote)):
            low, high = wilson(r["successes"], r["episodes"])
            print(f"| {name} | {r['successes'] / r['episodes']:.2f} ({r['successes']} of {r['episodes']}) | "
                  f"{low:.2f} - {high:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
