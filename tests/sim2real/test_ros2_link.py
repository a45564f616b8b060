"""ROS 2 topics between processes on loopback (Cyclone DDS and Zenoh): round trips of the wire bytes, hardware in
the loop against ``robopt sim-robot --ros2/--zenoh``, and 10,000 hostile messages under the control loop.

Each test takes its own DDS domain id or Zenoh port (xdist runs tests side by side), with unicast DDS on ``lo``
(no multicast needed), and Zenoh with multicast scouting off.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
import pytest

from robopt.sim2real import cdr
from robopt.sim2real.deploy import deploy
from robopt.sim2real.model import load_export
from robopt.sim2real.ros_map import Qos, parse_robot_map
from robopt.sim2real.runtime import ControlLoop, DeployConfig
from robopt.sim2real.topic_robot import TopicRobot

PERIOD = 0.01
JOINTS, ARRAY = "sensor_msgs/msg/JointState", "std_msgs/msg/Float64MultiArray"
UNICAST = {"interface": "lo", "peers": ["127.0.0.1"]}


def needs(module: str, extra: str):
    return pytest.importorskip(module, reason=f"{module} (the {extra} extra) is not installed")


def domain_for(request) -> int:
    """A DDS domain id of this test's own (1..200), from its name and this process."""
    return 1 + zlib.crc32(f"{request.node.nodeid}:{time.monotonic_ns()}".encode()) % 200


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pendulum_section(transport: dict) -> dict:
    return {
        **transport,
        "command": {"topic": "/robopt/command", "type": "std_msgs/Float64MultiArray"},
        "episode": {"topic": "/robopt/episode"},  # sim-robot's episode count
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


ECHO = """
import sys, time
sys.path.insert(0, {root!r})
from robopt.sim2real.ros_map import Qos
kind, arg = sys.argv[1], sys.argv[2]
subs = {{"/ping": ("sensor_msgs/msg/JointState", Qos("reliable", 100))}}
pubs = {{"/pong": ("sensor_msgs/msg/JointState", Qos("reliable", 100))}}
if kind == "ros2":
    from robopt.sim2real.ros2 import DdsLink
    link = DdsLink(subs, pubs, int(arg), interface="lo", peers=["127.0.0.1"])
else:
    from robopt.sim2real.zenoh_link import ZenohLink
    link = ZenohLink(subs, pubs, {{"listen": [arg], "multicast": False}})
print("ready", flush=True)
end = time.monotonic() + 20
while time.monotonic() < end:
    for _, payload, _ in link.poll():
        link.publish("/pong", payload)
        if payload.endswith(bytes(4)) and b"stop" in payload:
            end = 0
    time.sleep(0.001)
link.close()
"""


@pytest.mark.parametrize("kind", ["ros2", "zenoh"])
def test_round_trip_between_two_processes_keeps_every_byte(kind, request):
    root = str(request.config.rootpath)
    if kind == "ros2":
        needs("cyclonedds", "ros2")
        from robopt.sim2real.ros2 import DdsLink

        domain = domain_for(request)
        echo_arg, make = str(domain), lambda s, p: DdsLink(s, p, domain, **UNICAST)
    else:
        needs("zenoh", "zenoh")
        from robopt.sim2real.zenoh_link import ZenohLink

        endpoint = f"tcp/127.0.0.1:{free_port()}"
        echo_arg, make = endpoint, lambda s, p: ZenohLink(s, p, {"connect": [endpoint], "multicast": False})
    echo = subprocess.Popen(
        [sys.executable, "-c", ECHO.format(root=root), kind, echo_arg],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert echo.stdout.readline().strip() == "ready", echo.stdout.read()
        link = make({"/pong": (JOINTS, Qos("reliable", 100))}, {"/ping": (JOINTS, Qos("reliable", 100))})
        names = [f"joint_{i}" for i in range(12)]  # a 12-joint robot
        rng = np.random.default_rng(0)
        sent = [
            cdr.encode(
                JOINTS,
                {
                    "header": {"stamp": {"sec": i, "nanosec": 5}, "frame_id": "base"},
                    "name": names,
                    "position": rng.normal(size=12),
                    "velocity": rng.normal(size=12),
                },
            )
            for i in range(50)
        ]
        probe = cdr.encode(JOINTS, {"name": ["probe"]})
        deadline = time.monotonic() + 15
        while not any(payload == probe for _, payload, _ in link.poll()):  # discovery: until the echo answers
            assert time.monotonic() < deadline, "the echo process never answered"
            link.publish("/ping", probe)
            time.sleep(0.05)
        time.sleep(0.2)
        link.poll()  # late probe echoes
        for payload in sent:
            link.publish("/ping", payload)
            time.sleep(0.002)
        received: list[bytes] = []
        while len(received) < len(sent) and time.monotonic() < deadline:
            received += [bytes(payload) for _, payload, _ in link.poll() if payload != probe]
            time.sleep(0.01)
        link.publish("/ping", cdr.encode(JOINTS, {"name": ["stop"]}))
        link.close()
    finally:
        echo.wait(timeout=20) if echo.poll() is None else None
        echo.kill()
    assert received == sent  # every byte, in order, through another process and back


def start_sim_robot(kind: str, transport_arg: list[str], *options: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "robopt.sim2real.sim_robot_cli", "sim-robot", "Pendulum-v1", f"--{kind}",
               *transport_arg, "--period", str(PERIOD), "--seed", "0", *options]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = server.stdout.readline()
    if "waiting for the first command" not in line:
        server.kill()
        raise AssertionError(f"sim-robot did not start: {line}{server.stdout.read()}")
    return server


@pytest.mark.slow  # end to end in other processes: make test, not test-fast
@pytest.mark.parametrize(
    ("kind", "options", "tolerance"),
    [("ros2", (), 0.02), ("ros2", ("--latency-ms", "10", "--loss", "0.01"), 0.1), ("zenoh", (), 0.02)],
    ids=["ros2", "ros2-10ms-1pct-loss", "zenoh"],
)
def test_policy_over_topics_returns_what_it_returns_in_process(
    export_dir, tmp_path, pendulum_returns, kind, options, tolerance, request
):
    # measured: -1603.1, -1862.4 over ROS 2 and -1603.7, -1864.9 over Zenoh against -1603.1, -1862.5 in process
    needs("cyclonedds" if kind == "ros2" else "zenoh", kind)
    sidecar, policy = load_export(export_dir)
    reference = pendulum_returns(policy, 2)
    if kind == "ros2":
        domain = domain_for(request)
        server_args, spec = ["--domain-id", str(domain), "--interface", "lo", "--dds-peer", "127.0.0.1"], "ros2://"
        section = pendulum_section({"ros2": {"domain_id": domain, **UNICAST}})
    else:
        endpoint = f"tcp/127.0.0.1:{free_port()}"
        server_args, spec = ["--listen", endpoint, "--no-multicast"], f"zenoh://{endpoint}"
        section = pendulum_section({"zenoh": {"multicast": False}})
    server = start_sim_robot(kind, server_args, "--episodes", "2", *options)
    try:
        import yaml

        config = tmp_path / "deploy.yaml"
        config.write_text(yaml.safe_dump({"period": PERIOD, "estop_after": 0, "robot": section}))
        summary = deploy(export_dir, spec, duration=6.0, config_path=config, echo=lambda _: None)
        output, _ = server.communicate(timeout=15)
    finally:
        server.kill()
    returns = [float(value) for value in re.findall(r"episode \d+: return (-?[\d.]+)", output)]
    assert len(returns) == 2, output
    print(f"over {kind} {' '.join(options)}: returns {returns}, in process {[round(float(r), 3) for r in reference]}")
    for deployed, expected in zip(returns, reference):
        # the two processes tick out of phase: an action may reach the robot one 10 ms step late
        assert abs(deployed - expected) <= tolerance * abs(expected), (returns, reference)
    counters = summary["counters"]
    assert summary["ticks"] > 500 and counters["robot.malformed"] == 0 and counters["robot.unknown_joint"] == 0
    assert counters["robot.episodes"] in (1, 2)  # the boundary after episode 1 (and 2's, if it came before the end)


def hostile_payloads(count: int, rng: np.random.Generator) -> list[bytes]:
    """Malformed and hostile JointState payloads: cut, flipped, random, NaN/Inf, wrong lengths and names,
    stamps far in the future or the past, huge counts."""
    good = cdr.encode(JOINTS, {"name": ["hinge"], "position": [0.3], "velocity": [0.1]})
    kinds = [
        lambda: good[: int(rng.integers(0, len(good)))],
        lambda: bytes(rng.integers(0, 256, int(rng.integers(0, 200))).astype(np.uint8)),
        lambda: flip(good),
        lambda: cdr.encode(
            JOINTS, {"name": ["hinge"], "position": [rng.choice([np.nan, np.inf, -np.inf])], "velocity": [0.0]}
        ),
        lambda: cdr.encode(
            JOINTS, {"name": ["hinge", "x"], "position": rng.normal(size=int(rng.integers(0, 5))), "velocity": [0.0]}
        ),
        lambda: cdr.encode(JOINTS, {"name": ["elbow"], "position": [0.1], "velocity": [0.1]}),
        lambda: cdr.encode(
            JOINTS,
            {
                "header": {"stamp": {"sec": int(rng.choice([2**31 - 1, 1, 10**9])), "nanosec": 7}},
                "name": ["hinge"],
                "position": [1e300],
                "velocity": [-1e300],
            },
        ),
        lambda: good[:8] + b"\xff\xff\xff\xff" + good[12:],  # a frame_id length of 4 GB
    ]

    def flip(payload: bytes) -> bytes:
        data = bytearray(payload)
        for _ in range(int(rng.integers(1, 6))):
            data[int(rng.integers(4, len(data)))] = int(rng.integers(0, 256))
        return bytes(data)

    return [kinds[int(rng.integers(0, len(kinds)))]() for _ in range(count)]


def test_ten_thousand_hostile_messages_under_the_control_loop(export_dir, request, monkeypatch):
    needs("cyclonedds", "ros2")
    from robopt.sim2real import ros2
    from robopt.sim2real.ros2 import DdsLink

    monkeypatch.setattr(ros2, "NO_SUBSCRIBER_NOTICE_S", 0.2)
    sidecar, policy = load_export(export_dir)
    domain = domain_for(request)
    section = {**pendulum_section({}), "qos": {"reliability": "reliable", "depth": 1000}}
    mapping = parse_robot_map(section, "ros2", sidecar.obs_dim, sidecar.action_dim)
    link = DdsLink(mapping.topics, {"/robopt/command": (ARRAY, Qos("reliable", 10))}, domain, **UNICAST)
    robot = TopicRobot(link, mapping, sidecar.obs_dim, sidecar.action_dim)
    attacker = DdsLink({}, {"/joint_states": (JOINTS, Qos("reliable", 1000))}, domain, **UNICAST)
    payloads = hostile_payloads(10_000, np.random.default_rng(0))
    config = DeployConfig(period=0.005, estop_after=0, max_action_delta=0.5)
    loop = ControlLoop(policy, robot, sidecar, config)
    deadline = time.monotonic() + 5
    while attacker.matched("/joint_states") == 0 and time.monotonic() < deadline:
        time.sleep(0.01)

    published = []

    def attack() -> None:
        for i, payload in enumerate(payloads):
            published.append(attacker.publish("/joint_states", payload))
            if i % 50 == 49:
                time.sleep(0.02)  # about 2500 messages a second

    thread = threading.Thread(target=attack)
    thread.start()
    loop.run(duration=5.0)
    thread.join()
    loop.run(duration=0.5)  # the last messages are taken too
    loop.stop()
    notices = robot.take_notices()
    loop.close()
    attacker.close()
    counters = loop.all_counters()
    actions = loop.log.records()["action"]
    assert counters["robot_error"] == 0 and counters["internal_error"] == 0  # nothing raised
    low, high = sidecar.action_low, sidecar.action_high
    assert np.all(np.isfinite(actions)) and np.all(actions >= low) and np.all(actions <= high)
    assert np.all(np.abs(np.diff(actions[:, 0])) <= 0.5 + 1e-9)  # the rate limit held throughout
    # Cyclone DDS's writer refuses payloads that are not CDR at all (empty, no encapsulation header): about a third
    # never reach the wire. Every one that did was used or counted once by its first fault.
    bad = ("robot.malformed", "robot.nonfinite", "robot.wrong_length", "robot.unknown_joint")
    taken = counters["robot.messages"] + sum(counters[key] for key in bad)
    assert sum(published) > 5000 and taken == sum(published), (sum(published), counters)
    assert all(counters[key] > 0 for key in bad), counters
    assert any("has no joint 'hinge'" in n for n in notices)
    assert any("/robopt/command has no subscriber" in n for n in notices)  # nobody listens to the command here
