"""A joint_position_delta arm with a gripper over ROS 2: the deploy side sends absolute joint targets (the measured
joint positions from the policy's observation plus action_scale * action; the gripper's absolute), the simulated
robot turns them back into the env's delta action when it steps, so the PD targets are the commanded ones; the
safe action of a delta policy cannot be ``hold``; and a deploy of a delta policy round trips through both sides."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from robopt.envs import make_env
from robopt.envs.robot.describe import robot_sidecar
from robopt.envs.robot.signals import Signals
from robopt.options import ConfigError
from robopt.sim2real import cdr
from robopt.sim2real.deploy_config import build_safety, load_deploy_config
from robopt.sim2real.robot_topics import RobotTopics
from robopt.sim2real.ros_map import parse_robot_map
from robopt.sim2real.sidecar import DeployError, Sidecar
from robopt.sim2real.topic_robot import TopicRobot
from tests.sim2real.runtime_fakes import constant, sidecar_for
from tests.sim2real.test_ros_map import Clocks, FakeTransport

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = yaml.safe_load((ROOT / "configs" / "deploy" / "arm_gripper_ros2.yaml").read_text())


@pytest.fixture(scope="module")
def arm():
    """The place task's arm after a few random steps: (env, its last observation, the sidecar)."""
    data = yaml.safe_load((ROOT / "configs" / "base" / "place_cube.yaml").read_text())
    env = make_env("robot", 1, backend="mujoco", robot=data["robot"], task=copy.deepcopy(data["task"]), seed=2,
                   num_threads=1)  # fmt: skip
    env.reset(seed=2)
    generator = torch.Generator().manual_seed(1)
    for _ in range(5):
        obs, *_ = env.step(torch.rand(1, env.action_dim, generator=generator) * 2 - 1)
    fields = sidecar_for(env.obs_dim, env.action_dim, period=env.task.dt).__dict__
    sidecar = Sidecar(**{**fields, "env_id": "robot", "robot": robot_sidecar(env.task),
                         "action_low": env.action_low.tolist(), "action_high": env.action_high.tolist()})  # fmt: skip
    return env, obs[0].double().numpy(), sidecar


def test_the_deploy_side_sends_measured_plus_step_and_the_gripper_absolute(arm):
    env, obs, sidecar = arm
    clocks, link = Clocks(), FakeTransport()
    mapping = parse_robot_map(DEPLOY["robot"], "ros2", env.obs_dim, env.action_dim, sidecar.robot)
    robot = TopicRobot(link, mapping, env.obs_dim, env.action_dim, clock=lambda: clocks.monotonic,
                       wall_clock=lambda: clocks.wall)  # fmt: skip
    action = np.linspace(-1.0, 1.0, env.action_dim)
    robot.send(action)  # before any observation: nothing to add the step to
    assert link.sent == [] and robot.counters["no_measurement"] == 1
    link.inbox.append(("/robopt/observation", cdr.encode("std_msgs/msg/Float64MultiArray", {"data": obs}), 0.0))
    assert robot.read()[0] is not None
    robot.send(action)
    sent = np.asarray(cdr.decode("std_msgs/msg/Float64MultiArray", link.sent[-1][1])["data"])
    task = env.task.robot
    scale, offset = task.action_scale.double().numpy(), task.action_offset.double().numpy()
    measured = Signals(env.physics.state(), task, env.task.context).joint_pos[0].double().numpy()
    gripper = task.gripper.action_index
    expected = measured + scale * action
    expected[gripper] = offset[gripper] + scale[gripper] * action[gripper]
    np.testing.assert_allclose(sent, expected, atol=1e-6)  # the observation is float32


def test_the_simulated_robot_turns_targets_into_the_delta_that_reaches_them(arm):
    env, _, _ = arm
    view = RobotTopics(env)
    assert list(view.publications()) == ["/joint_states"]  # a fixed-base arm without an IMU: joints only
    assert [topic for topic, _, _ in view.messages(1.7e9)] == ["/joint_states"]
    task = env.task.robot
    measured = Signals(env.physics.state(), task, env.task.context).joint_pos[0].double().numpy()
    targets = measured + np.linspace(-0.02, 0.03, env.action_dim)
    action = torch.as_tensor(view.action(targets)[None])
    ctrl = env.task.action_to_ctrl(action, env.physics.state())[0].double().numpy()  # the env's own delta map
    pd_target = task.action_offset.double().numpy() + task.action_scale.double().numpy() * ctrl
    np.testing.assert_allclose(pd_target, targets, atol=1e-9)


def test_a_delta_policy_refuses_the_hold_safe_action_and_a_map_without_joints(arm):
    _, _, sidecar = arm
    with pytest.raises(DeployError, match="hold repeats the last step of a joint_position_delta policy"):
        build_safety(constant(np.zeros(sidecar.action_dim)), sidecar, load_deploy_config({"safe_action": "hold"}), 0.1)
    default = build_safety(constant(np.zeros(sidecar.action_dim)), sidecar, load_deploy_config({}), 0.1)
    assert default.safe_action == default.estop_action == "measured"  # a delta policy's default
    robot = copy.deepcopy(sidecar.robot)
    robot["observation"]["terms"] = [t for t in robot["observation"]["terms"] if t["name"] != "joint_pos"]
    with pytest.raises(ConfigError, match="delta policy's targets need its measured joints, but its observation"):
        parse_robot_map(DEPLOY["robot"], "ros2", sidecar.obs_dim, sidecar.action_dim, robot)
