"""The observation and command map of ros2:// and zenoh:// robots, on hand-made messages through a fake transport:
transforms, stamps, and every kind of bad input counted and reported, never raised."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from robopt.options import ConfigError
from robopt.sim2real import cdr
from robopt.sim2real.ros_fields import gravity_in_body
from robopt.sim2real.ros_map import parse_robot_map
from robopt.sim2real.topic_robot import SILENT_NOTICE_S, TopicRobot

JOINTS = "sensor_msgs/msg/JointState"
ARRAY = "std_msgs/msg/Float64MultiArray"
PENDULUM = {
    "command": {"topic": "/effort_controller/commands", "type": "std_msgs/Float64MultiArray", "scale": 1.0},
    "observation": [
        {"topic": "/joint_states", "type": "sensor_msgs/JointState", "field": "position", "joints": ["hinge"],
         "transform": ["cos", "sin"]},
        {"topic": "/joint_states", "field": "velocity", "joints": ["hinge"]},
    ],
}  # fmt: skip


class FakeTransport:
    def __init__(self) -> None:
        self.inbox, self.sent, self.counters = [], [], {}

    def poll(self):
        arrived, self.inbox = self.inbox, []
        return arrived

    def publish(self, topic, payload):
        self.sent.append((topic, payload))
        return True

    def take_notices(self):
        return []

    def close(self):
        pass


class Clocks:
    def __init__(self) -> None:
        self.monotonic, self.wall = 100.0, 1_700_000_000.0

    def advance(self, seconds: float) -> None:
        self.monotonic += seconds
        self.wall += seconds


def make_robot(section=PENDULUM, obs_dim=3, action_dim=1, transport="ros2"):
    clocks, link = Clocks(), FakeTransport()
    mapping = parse_robot_map(section, transport, obs_dim, action_dim)
    robot = TopicRobot(
        link, mapping, obs_dim, action_dim, clock=lambda: clocks.monotonic, wall_clock=lambda: clocks.wall
    )
    return robot, link, clocks


def joint_states(names, position, velocity, stamp=None) -> bytes:
    sec, nanosec = (0, 0) if stamp is None else (int(stamp), int(round((stamp % 1.0) * 1e9)))
    message = {"header": {"stamp": {"sec": sec, "nanosec": nanosec}}, "name": names, "position": position,
               "velocity": velocity}  # fmt: skip
    return cdr.encode(JOINTS, message)


def test_pendulum_observation_from_joint_states_with_cos_sin_and_the_stamp():
    robot, link, clocks = make_robot()
    obs, when = robot.read()
    assert obs is None and math.isnan(when)  # nothing yet: the loop sends the safe action
    q, dq = 0.7, -1.25
    measured = clocks.wall - 0.004  # the robot measured 4 ms ago (wall clock, as a header stamp)
    link.inbox.append(("/joint_states", joint_states(["other", "hinge"], [9.0, q], [8.0, dq], measured), 99.0))
    obs, when = robot.read()
    np.testing.assert_allclose(obs, [math.cos(q), math.sin(q), dq], rtol=0, atol=1e-15)  # Pendulum-v1's layout
    assert when == pytest.approx(clocks.monotonic - 0.004, abs=1e-6)  # the stamp, moved onto the monotonic clock
    assert robot.counters["messages"] == 1


def test_receive_time_without_a_header_or_with_stamps_receive():
    section = {"command": {"topic": "/cmd"}, "observation": [{"topic": "/obs", "type": ARRAY, "field": "data"}]}
    robot, link, _ = make_robot(section, obs_dim=2)
    link.inbox.append(("/obs", cdr.encode(ARRAY, {"data": [1.0, 2.0]}), 123.5))
    obs, when = robot.read()
    assert obs.tolist() == [1.0, 2.0] and when == 123.5
    robot, link, clocks = make_robot({**PENDULUM, "stamps": "receive"})
    link.inbox.append(("/joint_states", joint_states(["hinge"], [0.0], [0.0], clocks.wall - 5.0), 77.0))
    assert robot.read()[1] == 77.0  # the stamp is ignored
    robot, link, clocks = make_robot()
    link.inbox.append(("/joint_states", joint_states(["hinge"], [0.0], [0.0], None), 88.0))
    assert robot.read()[1] == 88.0  # an unset stamp (0 s): the receive time


def test_the_episode_topic_counts_the_robots_boundaries_as_of_the_read():
    """robot.episode: each change of the robot's episode count is one boundary; the first message is the baseline,
    a malformed one is counted and dropped, and without the topic no boundaries are reported (None)."""
    assert make_robot()[0].episodes_started is None
    robot, link, clocks = make_robot({**PENDULUM, "episode": {"topic": "/robot/episode"}})
    assert set(robot.map.subscriptions) == {"/joint_states", "/robot/episode"}
    assert "/robot/episode" not in robot.map.measured_topics  # the observation does not wait for it

    def episode(count: int) -> tuple:
        return ("/robot/episode", cdr.encode("std_msgs/msg/UInt32", {"data": count}), clocks.monotonic)

    state = ("/joint_states", joint_states(["hinge"], [0.1], [0.0], clocks.wall), clocks.monotonic)
    link.inbox += [episode(7), state]
    assert robot.read()[0] is not None and robot.episodes_started == 0  # 7: where the robot's count stands
    link.inbox += [episode(7), episode(8)]
    assert robot.episodes_started == 0  # as of the latest read
    robot.read()
    assert robot.episodes_started == 1
    link.inbox += [episode(9), episode(10), ("/robot/episode", b"\x00\x01", clocks.monotonic)]
    robot.read()
    assert robot.episodes_started == 3 and robot.counters["malformed"] == 1 and robot.counters["episodes"] == 3
    link.inbox += [episode(0)]  # a robot that restarts its count: a change, so a boundary
    robot.read()
    assert robot.episodes_started == 4


def test_last_action_is_what_was_sent_and_zero_after_the_robots_episode_boundary():
    """``{source: last_action}`` feeds back the action sent last; when the robot reports a new episode it is zero
    again, as the env's term is after a reset (a reset robot must not see the last gait's action)."""
    section = {**PENDULUM, "observation": [*PENDULUM["observation"], {"source": "last_action"}],
               "episode": {"topic": "/robot/episode"}}  # fmt: skip
    robot, link, clocks = make_robot(section, obs_dim=4)

    def arrive(*messages) -> np.ndarray:
        state = ("/joint_states", joint_states(["hinge"], [0.1], [0.0], clocks.wall), clocks.monotonic)
        link.inbox += [*messages, state]
        return robot.read()[0]

    def episode(count: int) -> tuple:
        return ("/robot/episode", cdr.encode("std_msgs/msg/UInt32", {"data": count}), clocks.monotonic)

    assert arrive(episode(3))[3] == 0.0  # zero at start
    robot.send(np.array([0.7]))
    assert arrive()[3] == 0.7 and arrive(episode(3))[3] == 0.7  # the same episode: the action sent
    assert arrive(episode(4))[3] == 0.0 and robot.episodes_started == 1  # a new episode: no previous action
    robot.send(np.array([-0.2]))
    assert arrive()[3] == -0.2


def test_every_transform_and_selection():
    section = {
        "command": {"topic": "/cmd_vel", "type": "geometry_msgs/Twist", "fields": ["linear.x", "angular.z"]},
        "observation": [
            {"topic": "/imu", "type": "sensor_msgs/Imu", "field": "orientation", "transform": "gravity"},
            {"topic": "/imu", "field": "angular_velocity", "transform": {"scale": 0.25, "offset": [0.0, 1.0, 0.0]}},
            {"topic": "/odom", "type": "nav_msgs/Odometry", "field": "twist.twist.linear.x"},
            {"topic": "/arm", "type": ARRAY, "field": "data", "index": [2, 0], "transform": {"hook": "numpy:negative"}},
        ],
    }
    robot, link, _ = make_robot(section, obs_dim=3 + 3 + 1 + 2, action_dim=2)
    half = math.sqrt(0.5)  # a 90 degree roll about x: body z points along world -y
    imu = {
        "orientation": {"x": half, "y": 0.0, "z": 0.0, "w": half},
        "angular_velocity": {"x": 4.0, "y": 8.0, "z": -4.0},
    }
    link.inbox += [
        ("/imu", cdr.encode("sensor_msgs/msg/Imu", imu), 1.0),
        ("/odom", cdr.encode("nav_msgs/msg/Odometry", {"twist": {"twist": {"linear": {"x": 0.5}}}}), 1.0),
        ("/arm", cdr.encode(ARRAY, {"data": [1.0, 2.0, 3.0]}), 1.0),
    ]
    obs, _ = robot.read()
    # gravity [0, 0, -1] in a body rolled +90 deg about x is [0, -1, 0]; angular velocity * 0.25 + [0, 1, 0];
    # the odometry's forward speed; data[2], data[0] negated by the hook
    np.testing.assert_allclose(obs, [0.0, -1.0, 0.0, 1.0, 3.0, -1.0, 0.5, -3.0, -1.0], atol=1e-12)
    np.testing.assert_allclose(gravity_in_body(np.array([0.0, 0.0, 0.0, 1.0])), [0.0, 0.0, -1.0])
    robot.send(np.array([0.3, -0.2]))
    topic, payload = link.sent[-1]
    twist = cdr.decode("geometry_msgs/msg/Twist", payload)
    assert topic == "/cmd_vel" and twist["linear"]["x"] == 0.3 and twist["angular"]["z"] == -0.2


def test_command_messages_carry_scale_times_action_plus_offset():
    robot, link, clocks = make_robot({**PENDULUM, "command": {"topic": "/c", "scale": 2.0, "offset": 0.5}})
    robot.send(np.array([0.25]))
    assert cdr.decode(ARRAY, link.sent[-1][1])["data"].tolist() == [1.0]
    command = {"topic": "/j", "type": "sensor_msgs/JointState", "field": "effort", "joints": ["a", "b"]}
    robot, link, clocks = make_robot({**PENDULUM, "command": command}, action_dim=2)
    robot.send(np.array([1.5, -1.0]))
    message = cdr.decode(JOINTS, link.sent[-1][1])
    assert message["name"] == ["a", "b"] and message["effort"].tolist() == [1.5, -1.0]
    assert message["header"]["stamp"]["sec"] == int(clocks.wall)


def test_bad_messages_are_counted_and_dropped_and_the_last_good_one_stays():
    robot, link, clocks = make_robot()
    link.inbox.append(("/joint_states", joint_states(["hinge"], [0.5], [1.0]), 1.0))
    good = robot.read()[0]
    bad = [
        b"\x00\x01\x00\x00\xff",  # malformed
        joint_states(["hinge"], [0.5, 0.6], [1.0]),  # names and positions of different lengths
        joint_states(["hinge"], [math.nan], [1.0]),  # NaN
        joint_states(["hinge"], [0.1], [math.inf]),  # Inf
    ]
    for payload in bad:
        link.inbox.append(("/joint_states", payload, 2.0))
        obs, _ = robot.read()
        assert obs is None or np.array_equal(obs, good)
    counters = robot.counters
    assert counters["malformed"] == 1 and counters["wrong_length"] == 1 and counters["nonfinite"] == 2
    link.inbox += [("/joint_states", b"garbage", 3.0), ("/joint_states", joint_states(["hinge"], [0.5], [1.0]), 3.0)]
    assert np.array_equal(robot.read()[0], good)  # the newest good message of the tick wins
    link.inbox.append(("/unrelated", b"anything", 3.0))  # a topic the map does not use: ignored
    assert robot.read()[0] is not None


def test_a_silent_topic_and_an_unknown_joint_are_reported_once():
    robot, link, clocks = make_robot()
    assert robot.read()[0] is None and robot.take_notices() == []  # not yet: the robot may still be starting
    clocks.advance(SILENT_NOTICE_S + 0.1)
    robot.read()
    robot.read()
    notices = robot.take_notices()
    assert notices == [
        "waiting for /joint_states: no valid message yet (the safe action is sent until every "
        "observation topic has published)"
    ]
    link.inbox.append(("/joint_states", joint_states(["shoulder", "elbow"], [0.0, 0.0], [0.0, 0.0]), 1.0))
    assert robot.read()[0] is None
    robot.read()
    assert robot.take_notices() == [
        "robot.observation[0]: /joint_states has no joint 'hinge'; its names are: shoulder, elbow"
    ]
    assert robot.counters["unknown_joint"] == 1 and robot.counters["waiting"] == 5  # one count per message, per read


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bogus": 1}, "robot: unknown key 'bogus'"),
        ({"observation": []}, "robot.observation: expected a list of entries"),
        (
            {"observation": [{"topic": "joint_states", "type": "sensor_msgs/JointState", "field": "position"}]},
            "robot.observation[0].topic: topic 'joint_states' is not a fully qualified ROS 2 topic name",
        ),
        (
            {"observation": [{"topic": "/j", "type": "sensor_msgs/LaserScan", "field": "ranges"}]},
            "robot.observation[0].type: unknown message type 'sensor_msgs/LaserScan'; robopt ships sensor_msgs/Joint",
        ),
        (
            {"observation": [{"topic": "/j", "type": "sensor_msgs/JointState", "field": "pos"}]},
            "robot.observation[0].field: sensor_msgs/JointState has no field 'pos'",
        ),
        ({"observation": [{"topic": "/j", "field": "position"}]}, "the first entry of /j needs its type"),
        (
            {"observation": [{"topic": "/i", "type": "sensor_msgs/Imu", "field": "orientation", "joints": ["a"]}]},
            "joints pick entries of a JointState",
        ),
        (
            {"observation": [{"topic": "/i", "type": "sensor_msgs/Imu", "field": "orientation"}]},
            "robot.observation: the entries give 4 numbers (4) but the policy takes 3",
        ),
        (
            {"observation": [{"topic": "/i", "type": "sensor_msgs/Imu", "field": "orientation", "transform": "tan"}]},
            "unknown transform 'tan'",
        ),
        (
            {"observation": [{"topic": "/a", "type": ARRAY, "field": "data", "transform": {"hook": "nowhere:f"}}]},
            "hook 'nowhere:f' cannot be loaded",
        ),
        ({"qos": {"reliability": "sometimes"}}, "robot.qos: reliability 'sometimes' is not allowed"),
        ({"qos": "fastest"}, "robot.qos: unknown QoS profile 'fastest'"),
        ({"stamps": "gps"}, "robot.stamps: 'gps' is not allowed; allowed: header, receive"),
        (
            {"command": {"topic": "/c", "type": "sensor_msgs/JointState", "field": "effort"}},
            "a JointState command needs field (position, velocity or effort) and joints, one name per action (1)",
        ),
        (
            {"command": {"topic": "/c", "type": "geometry_msgs/Twist", "fields": ["linear.w"]}},
            "robot.command.fields: geometry_msgs/Twist has no field 'linear.w'",
        ),
        ({"command": {"topic": "/joint_states"}}, "/joint_states is also an observation topic"),
        ({"command": {"topic": "/c", "scale": [1.0, 2.0]}}, "robot.command.scale: 2 numbers for 1 actions"),
        ({"episode": {"topic": "/e", "type": "std_msgs/Float64MultiArray"}}, "allowed: std_msgs/UInt32"),
        ({"episode": {"topic": "/joint_states"}}, "robot.episode.topic: /joint_states is also an observation"),
        ({"episode": "/e"}, "robot.episode: expected {topic, type: std_msgs/UInt32, qos}"),
        ({"episode": {"topic": "e"}}, "robot.episode: "),
    ],
)
def test_bad_maps_are_one_line_config_errors(change, message):
    with pytest.raises(ConfigError) as error:
        parse_robot_map({**PENDULUM, **change}, "ros2", 3, 1)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_domain_ids_specs_and_a_missing_transport_are_one_line_errors(monkeypatch, tmp_path):
    from runtime_fakes import pendulum_sidecar

    from robopt.sim2real.robots import parse_robot
    from robopt.sim2real.sidecar import DeployError

    sidecar = pendulum_sidecar()
    for spec, section, message in [
        ("ros2://233", PENDULUM, "robot.ros2.domain_id: 233 is not a DDS domain id; allowed: 0..232"),
        ("ros2://x", PENDULUM, "expected ros2://DOMAIN_ID with a domain id in 0..232"),
        ("ros2://", {**PENDULUM, "ros2": {"domain_id": -1}}, "-1 is not a DDS domain id"),
        ("ros2://", {**PENDULUM, "ros2": {"domian_id": 3}}, "robot.ros2: unknown key 'domian_id'"),
        ("zenoh://", {**PENDULUM, "zenoh": {"mode": "router"}}, "robot.zenoh.mode: 'router' is not allowed"),
        ("zenoh://tcp/127.0.0.1:99999", PENDULUM, "'tcp/127.0.0.1:99999' needs a port in 1..65535"),
        ("zenoh://tcp/127.0.0.1", PENDULUM, "needs a port in 1..65535"),
        ("zenoh://", {**PENDULUM, "zenoh": {"listen": ["udp/0.0.0.0:0"]}}, "robot.zenoh.listen: 'udp/0.0.0.0:0'"),
        ("zenoh://127.0.0.1:7447", PENDULUM, "is not PROTOCOL/ADDRESS, e.g. tcp/127.0.0.1:7447"),
        ("carrier-pigeon://", PENDULUM, "expected sim:ENV_ID"),
    ]:
        with pytest.raises((ConfigError, DeployError)) as error:
            parse_robot(spec, sidecar, robot_section=section)
        assert message in str(error.value) and "\n" not in str(error.value)
    monkeypatch.setitem(sys.modules, "cyclonedds", None)  # as if the ros2 extra were not installed
    monkeypatch.setitem(sys.modules, "zenoh", None)
    with pytest.raises(ConfigError, match=r"need Cyclone DDS, which is not installed: pip install 'robopt\[ros2\]'"):
        parse_robot("ros2://", sidecar, robot_section=PENDULUM)
    with pytest.raises(ConfigError, match=r"need Zenoh, which is not installed: pip install 'robopt\[zenoh\]'"):
        parse_robot("zenoh://", sidecar, robot_section=PENDULUM)


@pytest.mark.parametrize(
    ("robot", "config", "message"),
    [
        ("ros2://233", "", "233 is not a DDS domain id; allowed: 0..232"),
        (
            "ros2://",
            "robot: {observation: [{topic: /j, type: sensor_msgs/Foo, field: x}], command: {topic: /c}}",
            "robot.observation[0].type: unknown message type 'sensor_msgs/Foo'",
        ),
        ("zenoh://", "robot: {zenoh: {mode: router}}", "robot.zenoh.mode: 'router' is not allowed"),
        ("zenoh://tcp/127.0.0.1:99999", "", "zenoh://tcp/127.0.0.1:99999: 'tcp/127.0.0.1:99999' needs a port"),
    ],
)
def test_deploy_command_refuses_bad_robot_input_with_one_line_and_exit_2(export_dir, tmp_path, robot, config, message):
    from typer.testing import CliRunner

    from robopt.cli import app

    path = tmp_path / "deploy.yaml"
    path.write_text(config or "{}")
    result = CliRunner().invoke(app, ["deploy", str(export_dir), "--robot", robot, "--config", str(path)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
