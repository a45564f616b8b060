"""The quadruped over ROS 2 messages: ``observation: from_sidecar`` rebuilds the policy's observation from
JointState, Imu, Odometry and a Twist command exactly as the env computed it, joint targets go out by name, the
command input is clamped to the trained ranges and goes to zero when quiet, and every bad map is one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robopt.envs import make_env
from robopt.envs.robot.describe import robot_sidecar
from robopt.envs.robot.signals import Signals
from robopt.options import ConfigError
from robopt.sim2real import cdr
from robopt.sim2real.ros_map import parse_robot_map
from robopt.sim2real.topic_robot import TopicRobot
from tests.robots.conftest import quadruped_sections
from tests.sim2real.test_ros_map import Clocks, FakeTransport

TARGETS = "/joint_group_position_controller/commands"


@pytest.fixture(scope="module")
def walked():
    """The quadruped after 30 random steps, noise off: (env, its last observation, the sidecar's robot block)."""
    robot, task = quadruped_sections()
    for term in task["observations"].values():
        term.pop("noise", None)
    env = make_env("robot", 1, backend="mujoco", robot=robot, task=task, seed=3, num_threads=1)
    env.reset(seed=3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        obs, *_ = env.step(0.5 * torch.randn(1, env.action_dim, generator=generator))
    return env, obs[0].double().numpy(), robot_sidecar(env.task)


def section(**change) -> dict:
    command = {"topic": TARGETS, "type": "std_msgs/Float64MultiArray", "targets": "joint_position"}
    base = {"observation": "from_sidecar", "command": command}
    return {**base, **change}


def messages(env) -> dict[str, bytes]:
    """What the robot's drivers would publish for the env's state (joints shuffled, one extra joint)."""
    s = Signals(env.physics.state(), env.task.robot, env.task.context)
    names = list(env.task.robot.joint_names)
    order = np.random.default_rng(0).permutation(len(names))
    position, velocity = s.joint_pos[0].double().numpy(), s.joint_vel[0].double().numpy()
    joint_states = {"header": {"stamp": {"sec": 1_700_000_000, "nanosec": 0}},
                    "name": [names[i] for i in order] + ["gripper"], "position": np.append(position[order], 0.3),
                    "velocity": np.append(velocity[order], 0.0)}  # fmt: skip
    w, x, y, z = s.base_quat[0].double().tolist()
    imu = {"header": {"stamp": {"sec": 1_700_000_000, "nanosec": 0}}, "orientation": {"x": x, "y": y, "z": z, "w": w},
           "angular_velocity": dict(zip("xyz", s.base_ang_vel[0].double().tolist()))}  # fmt: skip
    odom = {"header": {"stamp": {"sec": 1_700_000_000, "nanosec": 0}},
            "twist": {"twist": {"linear": dict(zip("xyz", s.base_lin_vel[0].double().tolist()))}}}  # fmt: skip
    vx, vy, wz = env.task.context.command[0].double().tolist()
    twist = {"linear": {"x": vx, "y": vy}, "angular": {"z": wz}}
    return {
        "/joint_states": cdr.encode("sensor_msgs/msg/JointState", joint_states),
        "/imu": cdr.encode("sensor_msgs/msg/Imu", imu),
        "/odom": cdr.encode("nav_msgs/msg/Odometry", odom),
        "/cmd_vel": cdr.encode("geometry_msgs/msg/Twist", twist),
    }


def topic_robot(block: dict, sec: dict, obs_dim: int = 48, action_dim: int = 12):
    clocks, link = Clocks(), FakeTransport()
    clocks.wall = 1_700_000_000.01  # the messages' stamps are 10 ms old
    mapping = parse_robot_map(sec, "ros2", obs_dim, action_dim, block)
    robot = TopicRobot(
        link, mapping, obs_dim, action_dim, clock=lambda: clocks.monotonic, wall_clock=lambda: clocks.wall
    )
    return robot, link, clocks


def test_the_observation_from_ros_messages_is_the_envs_own(walked):
    env, expected, block = walked
    robot, link, clocks = topic_robot(block, section())
    robot.send(env.task.context.action[0].double().numpy())  # the last action the policy observes
    assert robot.read()[0] is None  # nothing measured yet
    link.inbox = [(topic, payload, clocks.monotonic) for topic, payload in messages(env).items()]
    obs, stamp = robot.read()
    assert obs is not None and obs.shape == (48,)
    np.testing.assert_allclose(obs, expected, atol=2e-6)  # float32 env, float64 map
    assert stamp == pytest.approx(clocks.monotonic - 0.01, abs=1e-6)  # the measurements' stamps, not the command's
    assert np.abs(expected).min() > 0 or np.count_nonzero(expected) >= 40  # a state worth comparing


def test_cmd_vel_is_clamped_held_then_zero_and_never_holds_the_observation_back(walked):
    env, expected, block = walked
    robot, link, clocks = topic_robot(block, section(cmd_vel={"hold_s": 0.5, "ranges": {"lin_vel_x": [-0.5, 0.5]}}))
    measured = {k: v for k, v in messages(env).items() if k != "/cmd_vel"}
    link.inbox = [(topic, payload, clocks.monotonic) for topic, payload in measured.items()]
    obs, _ = robot.read()
    assert obs is not None and np.all(obs[9:12] == 0.0)  # no command yet: standing, and the observation is there
    fast = {"linear": {"x": 3.0, "y": -0.2}, "angular": {"z": 2.0}}
    link.inbox = [("/cmd_vel", cdr.encode("geometry_msgs/msg/Twist", fast), clocks.monotonic)]
    obs, _ = robot.read()
    np.testing.assert_allclose(obs[9:12], [0.5 * 2.0, -0.2 * 2.0, 1.0 * 0.25])  # clamped, then the trained scale
    assert robot.counters["command_clamped"] == 1
    clocks.advance(0.4)
    assert robot.read()[0][9] == pytest.approx(1.0)  # held
    clocks.advance(0.2)
    obs, _ = robot.read()
    assert np.all(obs[9:12] == 0.0) and robot.counters["command_quiet"] == 1
    notices = robot.take_notices()
    assert any("clamped" in n for n in notices) and any("/cmd_vel quiet for 0.5 s" in n for n in notices)


def test_joint_targets_go_out_by_name_within_the_joint_ranges(walked):
    env, _, block = walked
    names = block["joint_names"]
    controller_order = names[::-1]
    sec = section(
        command={
            "topic": TARGETS,
            "type": "std_msgs/Float64MultiArray",
            "targets": "joint_position",
            "joints": controller_order,
        }
    )
    robot, link, _ = topic_robot(block, sec)
    action = np.linspace(-1.0, 1.0, 12)
    robot.send(action)
    topic, payload = link.sent[-1]
    data = np.asarray(cdr.decode("std_msgs/msg/Float64MultiArray", payload)["data"])
    targets = np.asarray(block["action_offset"]) + np.asarray(block["action_scale"]) * action
    assert topic == TARGETS and np.allclose(data, targets[::-1])
    joint_state = section(
        command={"topic": "/joint_targets", "type": "sensor_msgs/JointState", "targets": "joint_position"}
    )
    robot, link, _ = topic_robot(block, joint_state)
    robot.send(action)
    message = cdr.decode("sensor_msgs/msg/JointState", link.sent[-1][1])
    assert message["name"] == names and np.allclose(message["position"], targets)
    # the action bounds the safety layer clamps to keep every target inside its joint's range
    low = np.asarray(block["action_offset"]) + np.asarray(block["action_scale"]) * env.action_low.double().numpy()
    high = np.asarray(block["action_offset"]) + np.asarray(block["action_scale"]) * env.action_high.double().numpy()
    ranges = np.asarray(block["joint_range"], dtype=np.float64)
    assert np.allclose(low, ranges[:, 0], atol=1e-6) and np.allclose(high, ranges[:, 1], atol=1e-6)


def targets(joints=None, **command) -> dict:
    """A from_sidecar section whose command sends joint_position targets (``joints`` in the message's order)."""
    base = {"topic": TARGETS, "type": "std_msgs/Float64MultiArray", "targets": "joint_position"}
    return section(command={**base, **({"joints": joints} if joints is not None else {}), **command})


def with_terms(block: dict, terms: list, **observation) -> dict:
    return {**block, "observation": {**block["observation"], "terms": terms, **observation}}


def test_bad_maps_are_one_line(walked):
    _, _, block = walked
    terms = block["observation"]["terms"]
    no_command = with_terms(block, [t for t in terms if t["name"] != "velocity_command"])
    feet = with_terms(
        block, [*terms, {"name": "feet_contact", "size": 4, "scale": [1.0] * 4, "clip": None, "deploy": None}]
    )
    old_export = with_terms(block, [{k: v for k, v in t.items() if k != "deploy"} for t in terms])
    hand_written = [{"topic": "/a", "type": "std_msgs/Float64MultiArray", "field": "data"}]
    # fmt: off
    cases = [
        (block, section(cmd_vel={"ranges": {"lin_vel_x": [-2.0, 2.0]}}), 48, "is wider than the trained [-1.0, 1.0]"),
        (no_command, section(cmd_vel={}), 45, "this policy has no velocity command input"),
        (block, targets(["FR_hip_joint", "tail_joint"]), 48,
         "'tail_joint' is not a joint of the policy; its joints are: FR_hip_joint"),
        (block, targets(block["joint_names"][:11]), 48, "RL_calf_joint missing"),
        (block, targets(type="geometry_msgs/Twist"), 48, "Twist cannot carry joint positions"),
        (block, targets(type="sensor_msgs/JointState", field="effort"), 48, "JointState's position, not 'effort'"),
        (feet, section(), 52, "the policy's term 'feet_contact' has no ROS 2 source"),
        (old_export, section(), 48, "written before the sidecar carried each term's deploy source; export the run"),
        ({**block, "command": {**block["command"], "deploy": None}}, section(), 48,
         "the policy observes a command (type velocity) but its sidecar records no message"),
        (None, section(), 48, "from_sidecar needs a policy of a robot from its description"),
        (block, section(topics={"lidar": "/scan"}), 48, "robot.topics: unknown key 'lidar'"),
        (block, section(observation=hand_written, topics={"imu": "/imu"}), 48,
         "robot.topics: goes with observation: from_sidecar"),
    ]
    # fmt: on
    for robot_block, sec, obs_dim, message in cases:
        with pytest.raises(ConfigError) as error:
            parse_robot_map(sec, "ros2", obs_dim, 12, robot_block)
        assert message in str(error.value) and "\n" not in str(error.value), (message, str(error.value))


def test_a_users_observation_term_deploys_from_its_declaration():
    # tests/robots/hooks.py:joint_effort declares its deploy source (JointState's effort, by joint name): the export
    # sidecar carries it, and from_sidecar maps it with nothing added to robopt's deploy map
    from robopt.sim2real.sidecar_map import observation_from_sidecar

    robot, task = quadruped_sections()
    task["observations"]["effort"] = {"hook": "tests.robots.hooks:joint_effort", "scale": 0.1}
    env = make_env("robot", 1, backend="mujoco", robot=robot, task=task, seed=3, num_threads=1)
    block = robot_sidecar(env.task)
    term = block["observation"]["terms"][-1]
    assert (
        term["deploy"]
        == {"topic": "joint_states", "type": "sensor_msgs/JointState", "field": "effort", "by_joint": True}
        and term["elements"] == block["joint_names"]
    )
    entries = observation_from_sidecar(block, {"joint_states": "/robot/joints"}, None)
    assert entries[-1] == {
        "topic": "/robot/joints",
        "field": "effort",
        "joints": block["joint_names"],
        "transform": {"scale": [0.1] * 12},
    }
    parsed = parse_robot_map(section(topics={"joint_states": "/robot/joints"}), "ros2", 60, 12, block)
    assert "/robot/joints" in parsed.topics
    env.close()
