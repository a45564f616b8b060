"""The deploy runtime's ``measured`` safe action on robots from their description: the map from the robot's
observation to the action whose PD targets are the measured joint positions (the quadruped's absolute targets), the
arm's delta actions (zero, the gripper kept), and the damping stop in a control loop whose link stalls."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import torch
import yaml

from robopt.envs import make_env
from robopt.envs.robot.describe import robot_sidecar
from robopt.envs.robot.signals import Signals
from robopt.sim2real.deploy_config import DeployConfig, measured_pose
from robopt.sim2real.runtime import ControlLoop
from robopt.sim2real.sidecar import Sidecar
from tests.robots.conftest import quadruped_sections
from tests.sim2real.runtime_fakes import ScriptedRobot, constant, sidecar_for

PLACE = Path(__file__).resolve().parents[2] / "configs" / "base" / "place_cube.yaml"


def walked_env(robot: dict, task: dict, steps: int = 30):
    """A one-row env after ``steps`` random actions, observation noise off: (env, its last observation)."""
    for term in task["observations"].values():
        term.pop("noise", None)
    env = make_env("robot", 1, backend="mujoco", robot=robot, task=task, seed=3, num_threads=1)
    env.reset(seed=3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        obs, *_ = env.step(0.5 * torch.randn(1, env.action_dim, generator=generator))
    return env, obs[0].double().numpy()


def sidecar_of(env) -> Sidecar:
    """The sidecar of a policy for ``env`` (its action bounds, its robot block), with a fake model file."""
    fields = sidecar_for(env.obs_dim, env.action_dim, period=env.task.dt).__dict__
    low, high = env.action_low.tolist(), env.action_high.tolist()
    return Sidecar(
        **{**fields, "env_id": "robot", "robot": robot_sidecar(env.task), "action_low": low, "action_high": high}
    )


def test_the_quadrupeds_measured_action_targets_the_measured_joint_positions():
    env, obs = walked_env(*quadruped_sections())
    sidecar = sidecar_of(env)
    measure, why = measured_pose(sidecar)
    assert why == ""
    action = measure(obs.astype(np.float32))  # [12]
    robot = env.task.robot
    target = robot.action_offset.double().numpy() + robot.action_scale.double().numpy() * action
    measured = Signals(env.physics.state(), robot, env.task.context).joint_pos[0].double().numpy()
    np.testing.assert_allclose(target, measured, atol=1e-5)  # the observation is float32
    assert np.abs(measured - robot.default_pose.double().numpy()).max() > 0.05  # the walk moved the joints


def test_the_arms_delta_action_holds_and_keeps_the_gripper():
    data = yaml.safe_load(PLACE.read_text())
    env, obs = walked_env(copy.deepcopy(data["robot"]), copy.deepcopy(data["task"]), steps=3)
    measure, why = measured_pose(sidecar_of(env))
    action = measure(obs)
    gripper = env.task.robot.gripper.action_index
    assert why == "" and np.isnan(action[gripper])
    np.testing.assert_array_equal(np.delete(action, gripper), 0.0)


def test_a_stalled_link_ends_in_the_damping_stop_at_the_measured_pose():
    env, obs = walked_env(*quadruped_sections())
    sidecar = sidecar_of(env)
    expected = np.clip(
        measured_pose(sidecar)[0](obs.astype(np.float32)), env.action_low.numpy(), env.action_high.numpy()
    )
    stale = (obs, -1.0)  # the link stalls: the last measurement, ever older
    robot = ScriptedRobot([(obs, 0.0)] + [stale] * 40, obs_dim=env.obs_dim, action_dim=env.action_dim)
    config = DeployConfig(period=0.02, max_action_delta=0.5, estop_after=5, safe_action="hold", estop_action="measured")
    loop = ControlLoop(
        constant(np.full(env.action_dim, 0.8)), robot, sidecar, config, clock=lambda: 0.0, realtime=False
    )
    loop.run(ticks=30)
    sent = np.array(robot.sent)
    np.testing.assert_allclose(sent[0], np.clip(np.full(env.action_dim, 0.5), None, env.action_high.numpy()))
    np.testing.assert_allclose(sent[-1], expected, atol=1e-5)  # ramped to the measured pose, 0.5 a tick at most
    assert np.abs(np.diff(sent, axis=0)).max() <= 0.5 + 1e-9 and loop.safety.estopped
