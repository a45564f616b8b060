"""The control rates the deploy loop holds against ``robopt sim-robot`` over UDP, ROS 2 (DDS) and Zenoh.

    python benchmarks/deploy_rates.py [--seconds 20] [--rates 100 250 500 1000] [--transports udp ros2 zenoh]
    python benchmarks/deploy_rates.py --pin-loop 1 --pin-robot 0 --rt-priority 50   # the loop on a core of its own
    python benchmarks/deploy_rates.py --smoke    # CI: each transport at 100 Hz for 0.5 s

For each transport and rate: a simulated Pendulum-v1 robot in another process steps at the rate (``--period``),
the deploy runtime (this process) drives it at the same rate with a tiny exported policy for ``--seconds``. Printed
per cell: missed deadlines (ticks that ended past the next one's start, and their share), read-to-send p50/p99,
observation age p50/p99 (the time from the robot's measurement to the tick that used it: the robot's stamp for
ROS 2 and Zenoh, its send time for UDP), and lost messages (actions the deploy loop sent that the robot never
received, from the robot's count). Late: ticks that started more than a tenth of a period after they were due.
``--pin-loop CPU`` pins the deploy loop's thread there (the deploy config's ``cpu_affinity``), ``--pin-robot CPU``
the robot's process, and ``--rt-priority N`` asks for SCHED_FIFO for the loop (``realtime_priority``; refused
without the permission, said once). Run it alone: a second process on the cores moves every figure.
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path

import numpy as np
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

ROOT = Path(__file__).resolve().parents[1]


def make_export(directory: Path) -> Path:
    """A tiny Gaussian Pendulum policy exported to ONNX (as tests/sim2real/conftest.py makes one)."""
    import torch

    sys.path.insert(0, str(ROOT / "tests" / "sim2real"))
    from runtime_fakes import pendulum_sidecar

    from robopt.policies.gaussian import GaussianPolicy
    from robopt.sim2real.sidecar import file_sha256, write_sidecar

    torch.manual_seed(0)
    policy = GaussianPolicy(3, 1, torch.tensor([-2.0]), torch.tensor([2.0]), hidden=(16,), normalize_obs=False)
    module = policy.export_module().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (torch.zeros(2, 3),),
            str(directory / "policy.onnx"),
            dynamo=False,
            input_names=["obs"],
            output_names=["action"],
            dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}},
        )
    obs = torch.randn(32, 3)
    with torch.no_grad():
        np.savez(directory / "parity.npz", obs=obs.numpy(), action=module(obs).numpy())
    hashes = {name: file_sha256(directory / name) for name in ("policy.onnx", "parity.npz")}
    write_sidecar(directory, pendulum_sidecar(files_sha256=hashes))
    return directory


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_cell(export_dir: Path, transport: str, rate: int, seconds: float, pin: dict | None = None) -> dict:
    import yaml

    from robopt.sim2real.deploy import deploy

    period = 1.0 / rate
    server_cmd = [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", "Pendulum-v1", "--period",
                  str(period), "--duration", str(seconds + 8), "--command-timeout-ms", "0"]  # fmt: skip
    robot_section: dict = {}
    if transport == "udp":
        port = free_port()
        server_cmd += ["--port", str(port)]
        spec = f"udp://127.0.0.1:{port}"
    elif transport == "ros2":
        domain = 1 + zlib.crc32(f"{rate}{time.time()}".encode()) % 200
        server_cmd += ["--ros2", "--domain-id", str(domain), "--interface", "lo", "--dds-peer", "127.0.0.1"]
        spec = "ros2://"
        robot_section = {"ros2": {"domain_id": domain, "interface": "lo", "peers": ["127.0.0.1"]}}
    else:
        endpoint = f"tcp/127.0.0.1:{free_port()}"
        server_cmd += ["--zenoh", "--listen", endpoint, "--no-multicast"]
        spec = f"zenoh://{endpoint}"
        robot_section = {"zenoh": {"multicast": False}}
    if transport != "udp":  # the joint states, as a robot publishes them (stamped at measurement)
        robot_section.update(
            {
                "command": {"topic": "/robopt/command", "type": "std_msgs/Float64MultiArray"},
                "observation": [
                    {
                        "topic": "/joint_states",
                        "type": "sensor_msgs/JointState",
                        "field": "position",
                        "joints": ["hinge"],
                        "transform": ["cos", "sin"],
                    },
                    {"topic": "/joint_states", "field": "velocity", "joints": ["hinge"]},
                ],
            }
        )
    pin = pin or {}
    robot_cpu = pin.get("robot")
    preexec = None if robot_cpu is None else (lambda: __import__("os").sched_setaffinity(0, {robot_cpu}))
    server = subprocess.Popen(
        server_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec
    )
    try:
        server.stdout.readline()  # ready
        with tempfile.TemporaryDirectory() as scratch:
            config = Path(scratch) / "deploy.yaml"
            log = Path(scratch) / "ticks.npy"
            deploy_config = {"period": period, "estop_after": 0, "stale_timeout_ms": 1000, "robot": robot_section}
            if pin.get("loop") is not None:
                deploy_config["cpu_affinity"] = [pin["loop"]]
            if pin.get("priority"):
                deploy_config["realtime_priority"] = pin["priority"]
            config.write_text(yaml.safe_dump(deploy_config))
            notes: list[str] = []
            warm = deploy(export_dir, spec, duration=1.0, config_path=config, echo=lambda _: None)  # discovery
            summary = deploy(
                export_dir,
                spec,
                duration=seconds,
                config_path=config,
                log_path=log,
                echo=lambda line: notes.append(line) if line.startswith("loop:") else None,
            )
            ticks = np.load(log)
        server.send_signal(signal.SIGINT)  # the server prints its counts on Ctrl-C
        output, _ = server.communicate(timeout=20)
    finally:
        server.kill()
    received = re.search(r"received (\d+)", output)
    age = ticks["obs_age"][np.isfinite(ticks["obs_age"])] * 1e3
    sent = summary["ticks"]
    return {
        "transport": transport,
        "rate": rate,
        "ticks": sent,
        "missed": summary["counters"]["missed_deadline"],
        "late": summary["counters"].get("late_ticks", -1),
        "notes": notes + summary.get("notices", []),
        "read_to_send_p50_us": summary["compute_p50_us"],
        "read_to_send_p99_us": summary["compute_p99_us"],
        "age_p50_ms": float(np.percentile(age, 50)) if age.size else float("nan"),
        "age_p99_ms": float(np.percentile(age, 99)) if age.size else float("nan"),
        "server_received": int(received.group(1)) if received else -1,
        "sent_total": warm["ticks"] + sent,  # both runs: the server counts the actions of both
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rates", type=int, nargs="+", default=[100, 250, 500, 1000])
    parser.add_argument("--transports", nargs="+", default=["udp", "ros2", "zenoh"], choices=["udp", "ros2", "zenoh"])
    parser.add_argument("--pin-loop", type=int, default=None, help="pin the deploy loop's thread to this CPU")
    parser.add_argument("--pin-robot", type=int, default=None, help="pin the simulated robot's process to this CPU")
    parser.add_argument("--rt-priority", type=int, default=0, help="SCHED_FIFO priority for the loop (0: none)")
    args = parse_smoke_args(parser, smoke={"seconds": 0.5, "rates": [100]})
    pin = {"loop": args.pin_loop, "robot": args.pin_robot, "priority": args.rt_priority}
    with tempfile.TemporaryDirectory() as scratch:
        export_dir = make_export(Path(scratch))
        print("transport  rate_hz  ticks  missed (share)  late  read-to-send p50/p99 us  obs age p50/p99 ms  lost")
        for transport in args.transports:
            for rate in args.rates:
                row = run_cell(export_dir, transport, rate, args.seconds, pin)
                for note in dict.fromkeys(row["notes"]):
                    print(f"  {note}")
                lost = row["sent_total"] - row["server_received"] if row["server_received"] >= 0 else -1
                share = row["missed"] / max(row["ticks"], 1)
                print(
                    f"{transport:9s}  {rate:7d}  {row['ticks']:5d}  {row['missed']:6d} ({share:.2%})"
                    f"  {row['late']:4d}"
                    f"  {row['read_to_send_p50_us']:8.0f} / {row['read_to_send_p99_us']:6.0f}"
                    f"  {row['age_p50_ms']:8.2f} / {row['age_p99_ms']:6.2f}  {lost}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
