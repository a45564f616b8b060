"""Hardware in the loop for a legged robot: the exported quadruped policy walking over ROS 2 on ``robopt sim-robot``,
driven by a scripted /cmd_vel, against the same policy and commands in process.

    python benchmarks/legged_hil.py RUN_DIR [--latency-ms 10] [--loss 0.01] [--segment-s 5]
    python benchmarks/legged_hil.py --smoke    # CI: a 32-step stand-in run, 1 s per command

The run (a robot from its description, e.g. a ``benchmarks/quadruped_tracking.py`` seed) is exported (ONNX, checked
against torch). ``robopt sim-robot`` serves its config (one robot, the episode and the command resampling made long
enough that the simulator never resets or changes the command itself) over ROS 2 (DDS on loopback): /joint_states,
/imu and /odom out at 50 Hz, joint position targets in, the PD control inside MuJoCo at 200 Hz, ``--latency-ms``
one way and ``--loss`` on every message; it scores /cmd_vel against the body's velocity. The deploy runtime (this
process, ``configs/deploy/quadruped_ros2.yaml``: ``observation: from_sidecar``, targets to a ros2_control position
controller's topic) ticks at 50 Hz. A thread publishes the scripted commands on /cmd_vel at 10 Hz. In process: the
same ONNX policy steps the same env directly with the same command sequence (no link, no noise, no latency; a
config trained under ``task.link`` and a randomization has both taken out, for the simulated robot as well).
Printed: velocity and yaw-rate errors (steady: 1 s after each change left out; all) and falls, both ways. Run it
alone: the two processes share the two cores.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import yaml
from smoke import parse_smoke_args, tiny_run  # benchmarks/ is the script's directory, so its sibling imports

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [  # (vx, vy, yaw rate): forward, back, sideways, turning, combined, standing
    (0.8, 0.0, 0.0), (-0.6, 0.0, 0.0), (0.0, 0.4, 0.0), (0.0, 0.0, 0.8),
    (0.5, -0.3, -0.5), (1.0, 0.0, 0.5), (0.0, 0.0, 0.0), (-0.4, 0.3, 0.0),
]  # fmt: skip


def long_config(run_dir: Path, scratch: Path) -> Path:
    """The run's config with episodes and command intervals longer than the benchmark (the script commands)."""
    data = yaml.safe_load((run_dir / "config.yaml").read_text())
    data["task"]["episode_s"] = 3600.0
    data["task"]["commands"]["resample_s"] = [3600.0, 3600.0]
    for term in data["task"]["observations"].values():  # the in-process reference without sensor noise
        if isinstance(term, dict):
            term.pop("noise", None)
    # nor the link that training simulated (late and lost measurements; the randomization, its actuator delay and
    # any other knob, goes whole: the simulated robot is the nominal one): the real link is the benchmark's own
    data["task"].pop("link", None)
    data.get("env", {}).get("kwargs", {}).pop("randomization", None)
    data["env"]["num_envs"] = 1
    path = scratch / "quadruped_hil.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def in_process(config: Path, export_dir: Path, segment_s: float) -> dict:
    """The ONNX policy on the env in this process, its command set from the script each step, scored as the
    simulated robot scores /cmd_vel (``RobotTopics.track``/``step``)."""
    import torch

    from robopt.build import build_env
    from robopt.experiment import load_config
    from robopt.sim2real.model import load_export
    from robopt.sim2real.robot_topics import RobotTopics

    _, policy = load_export(export_dir)
    env = build_env(load_config(config), num_envs=1)
    task, score = env.task, RobotTopics(env)
    obs = env.reset(seed=0)[0].numpy()
    for vx, vy, wz in COMMANDS:
        score.track({"linear": {"x": vx, "y": vy}, "angular": {"z": wz}})
        for _ in range(round(segment_s / env.dt)):
            task.context.command[:] = torch.tensor((vx, vy, wz), dtype=task.context.command.dtype)
            action = policy(np.asarray(obs, dtype=np.float32))  # [A], deterministic (the export's mean)
            obs, _, terminated, _, _ = env.step(torch.as_tensor(action[None], dtype=torch.float32))
            obs = obs[0].numpy()
            score.step(env.dt, bool(terminated[0]))
    env.close()
    return score.tracking_summary()


def publish_commands(domain: int, segment_s: float, stop: threading.Event, matched: threading.Event) -> None:
    """Publish the commands in turn; their clock starts once the robot subscribes (``matched``): DDS discovery on a
    loaded machine can take longer than a smoke run's whole deploy."""
    from robopt.sim2real import cdr
    from robopt.sim2real.ros2 import DdsLink
    from robopt.sim2real.transport import Qos

    twist = "geometry_msgs/msg/Twist"
    link = DdsLink({}, {"/cmd_vel": (twist, Qos("reliable", 10))}, domain, interface="lo", peers=["127.0.0.1"])
    try:
        while not stop.is_set() and link.matched("/cmd_vel") == 0:
            stop.wait(0.05)
        matched.set()
        start = time.monotonic()
        while not stop.is_set():
            # the last command holds until the deploy ends: a late DDS discovery (a loaded machine) still meets one
            index = min(int((time.monotonic() - start) // segment_s), len(COMMANDS) - 1)
            vx, vy, wz = COMMANDS[index]
            link.publish("/cmd_vel", cdr.encode(twist, {"linear": {"x": vx, "y": vy}, "angular": {"z": wz}}))
            stop.wait(0.1)
    finally:
        link.close()


def over_ros2(config: Path, export_dir: Path, segment_s: float, latency_ms: float, loss: float) -> dict:
    from robopt.sim2real.deploy import deploy

    domain = 1 + zlib.crc32(f"legged{time.time()}".encode()) % 200
    seconds = segment_s * len(COMMANDS)
    server = subprocess.Popen(
        [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", str(config), "--ros2", "--domain-id",
         str(domain), "--interface", "lo", "--dds-peer", "127.0.0.1", "--latency-ms", str(latency_ms), "--loss",
         str(loss), "--cmd-vel", "/cmd_vel", "--command-topic", "/joint_group_position_controller/commands",
         "--duration", str(seconds + 15)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        # the SIGINT below must reach it: a script started in the background of a shell inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    stop = threading.Event()
    try:
        print(server.stdout.readline().strip(), flush=True)  # ready
        deploy_config = yaml.safe_load((ROOT / "configs" / "deploy" / "quadruped_ros2.yaml").read_text())
        deploy_config["robot"]["ros2"] = {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]}
        path = config.parent / "deploy.yaml"
        path.write_text(yaml.safe_dump(deploy_config))
        matched = threading.Event()
        publisher = threading.Thread(target=publish_commands, args=(domain, segment_s, stop, matched), daemon=True)
        publisher.start()
        if not matched.wait(timeout=60):
            raise SystemExit("the simulated robot did not subscribe to /cmd_vel within 60 s (DDS discovery)")
        summary = deploy(export_dir, "ros2://", duration=seconds, config_path=path, echo=lambda _: None)
        stop.set()
        publisher.join(timeout=5)
        server.send_signal(signal.SIGINT)  # Ctrl-C: the server prints its tracking line
        output, _ = server.communicate(timeout=30)
    finally:
        stop.set()
        server.kill()
    number = r"([\d.]+|nan)"  # nan: no step was steady (every segment shorter than the settle time)
    line = re.search(
        rf"tracking /cmd_vel over (\d+) steps: velocity error steady {number} / all {number} m/s, "
        rf"yaw-rate error steady {number} / all {number} rad/s, falls (\d+)",
        output,
    )
    if line is None:
        raise SystemExit(f"the simulated robot printed no tracking line:\n{output[-3000:]}")
    steps, vs, va, ys, ya, falls = line.groups()
    counters = summary["counters"]
    return {
        "vel_steady": float(vs),
        "vel_all": float(va),
        "yaw_steady": float(ys),
        "yaw_all": float(ya),
        "falls": int(falls),
        "steps": int(steps),
        "ticks": summary["ticks"],
        "rate_hz": summary["rate_hz"],
        "stale": counters.get("stale", 0),
        "safe_action": counters.get("safe_action", 0),
        "clamped": counters.get("clamped", 0),
    }


def smoke_run(root: Path) -> Path:
    """``--smoke``'s stand-in for a trained quadruped: one 32-step iteration of small networks (no --smoke figure
    means anything)."""
    from quadruped_tracking import TINY

    return tiny_run(ROOT / "configs" / "ppo_quadruped_velocity.yaml", root, [*TINY, "total_steps=32"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, nargs="?", help="a trained quadruped run (required but with --smoke)")
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--loss", type=float, default=0.01)
    parser.add_argument("--segment-s", type=float, default=5.0)
    args = parse_smoke_args(parser, smoke={"segment_s": 1.0})
    if args.run_dir is None and not args.smoke:
        parser.error("the following arguments are required: run_dir")
    from robopt.sim2real.export import export_run

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or smoke_run(Path(scratch) / "runs")
        report = export_run(run_dir, out_dir=Path(scratch) / "export")
        print(f"exported, parity max difference {max(report.max_difference.values()):.2e}", flush=True)
        config = long_config(run_dir, Path(scratch))
        local = in_process(config, report.out_dir, args.segment_s)
        print(f"in process: {local}", flush=True)
        remote = over_ros2(config, report.out_dir, args.segment_s, args.latency_ms, args.loss)
        print(f"over ROS 2 ({args.latency_ms:g} ms, {args.loss:.0%} loss): {remote}", flush=True)
        print("\n| | velocity error steady / all (m/s) | yaw-rate error steady / all (rad/s) | falls |")
        print("|---|---|---|---|")
        for name, r in (("in process", local), (f"ROS 2, {args.latency_ms:g} ms, {args.loss:.0%} loss", remote)):
            print(
                f"| {name} | {r['vel_steady']:.3f} / {r['vel_all']:.3f} | {r['yaw_steady']:.3f} / "
                f"{r['yaw_all']:.3f} | {r['falls']} |"
            )


if __name__ == "__main__":
    main()
