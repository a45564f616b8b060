"""Left-right symmetry (``robot.mirror``): the quadruped's joint and foot maps with signs from the axes, the
observation's mirror assembled from its terms' declarations checked against physics (a mirrored start with mirrored
actions stays the mirror image), PPO's mirrored transitions and mirror loss, and one-line refusals."""

from __future__ import annotations

import pytest
import torch

from robopt.envs import make_env
from robopt.envs.robot.signals import quat_multiply
from tests.robots.conftest import quadruped_sections

PAIRS = [["FL_", "FR_"], ["RL_", "RR_"]]


def quadruped(num_envs: int = 2, robot_changes: dict | None = None, **task_changes):
    robot, task = quadruped_sections()
    robot["mirror"] = PAIRS
    robot.update(robot_changes or {})
    for entry in task["observations"].values():
        entry.pop("noise", None)
    task["reset"] = {}
    task.update(task_changes)
    return make_env("robot", num_envs, backend="mujoco", robot=robot, task=task, seed=0, num_threads=1)


def test_the_quadrupeds_map_takes_its_signs_from_the_axes() -> None:
    env = quadruped()
    robot = env.task.robot
    names = robot.joint_names
    perm, sign = robot.mirror.joints.perm.tolist(), robot.mirror.joints.sign.tolist()
    for i, name in enumerate(names):
        other = name.replace("FL_", "XX").replace("FR_", "FL_").replace("XX", "FR_")
        other = other.replace("RL_", "XX").replace("RR_", "RL_").replace("XX", "RR_")
        assert names[perm[i]] == other
        # hip abduction about x flips (q' = -q); thigh and calf pitch about y keep their sign
        assert sign[i] == (-1.0 if "hip" in name else 1.0)
    feet = [robot.foot_names[j] for j in robot.mirror.feet.perm.tolist()]
    assert feet == [robot.foot_names[j] for j in (1, 0, 3, 2)]
    mirrors = env.mirror()
    for mirror, width in ((mirrors["obs"], env.obs_dim), (mirrors["action"], env.action_dim)):
        x = torch.randn(5, width, dtype=torch.float64)
        torch.testing.assert_close(mirror.apply(mirror.apply(x)), x, rtol=0, atol=0)  # an involution


def _mirrored_state(env, qpos: torch.Tensor, qvel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mirror image of the quadruped's state through the world's x-z plane (its base starts unturned)."""
    joints = env.task.robot.mirror.joints
    qpos, qvel = qpos.clone(), qvel.clone()
    qpos[:, 1] = -qpos[:, 1]
    qpos[:, 3:7] = qpos[:, 3:7] * torch.tensor([1.0, -1.0, 1.0, -1.0], dtype=qpos.dtype)  # M R M
    qvel[:, :6] = qvel[:, :6] * torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, -1.0], dtype=qvel.dtype)
    index, dof = env.task.robot.qpos_index, env.task.robot.dof_index
    qpos[:, index] = joints.apply(qpos[:, index])
    qvel[:, dof] = joints.apply(qvel[:, dof])
    return qpos, qvel


def test_a_mirrored_start_with_mirrored_actions_stays_the_mirror_image() -> None:
    # With the trunk's centre of mass put on the mirror plane (it is 2 mm off, like a real robot's), the model is
    # symmetric and physics keeps the mirror image: after 15 steps of random actions from a turned, moving start,
    # each observation element (velocities, gravity, command, joints, last action) is the declared mirror of the
    # other run's within 1e-4: it drifts from 2e-6 to 2.5e-5 over the steps (float32 observations, four solver
    # iterations), while the median element is near 0.1 and a wrong sign is off by twice its value
    first, second = quadruped(1), quadruped(1)
    for env in (first, second):
        env.physics.mj_model.body_ipos[env.task.robot.base_body, 1] = 0.0
    mirror = first.mirror()
    first.reset(seed=0), second.reset(seed=0)
    state = first.physics.state()
    qpos, qvel = state["qpos"].clone(), state["qvel"].clone()
    yaw = torch.tensor([0.4], dtype=torch.float64)
    qpos[:, 3:7] = quat_multiply(
        torch.stack([torch.cos(yaw / 2), 0 * yaw, 0 * yaw, torch.sin(yaw / 2)], -1), qpos[:, 3:7]
    )
    qvel[:, :6] = torch.tensor([[0.3, 0.2, 0.0, 0.1, -0.2, 0.5]], dtype=torch.float64)
    rows = torch.arange(1)
    first.physics.set_state(rows, qpos, qvel)
    second.physics.set_state(rows, *_mirrored_state(first, qpos, qvel))
    command = torch.tensor([[0.7, 0.3, -0.4]], dtype=torch.float64)
    first.task.command.value[:] = command
    second.task.command.value[:] = mirror_command = command * torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64)
    first.task.command.timer[:] = second.task.command.timer[:] = 10_000
    generator = torch.Generator().manual_seed(0)
    for step in range(15):
        action = 0.5 * torch.randn(1, 12, generator=generator)
        obs_first = first.step(action)[0]
        obs_second = second.step(mirror["action"].apply(action).float())[0]
        torch.testing.assert_close(obs_second, mirror["obs"].apply(obs_first), rtol=0, atol=1e-4, msg=f"step {step}")
    assert torch.equal(second.task.command.value, mirror_command)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mirror": [["FL_", "XL_"]]}, "the mirror of joint 'FL_hip_joint' would be 'XL_hip_joint', which is not"),
        ({"mirror": [["FL_", "FR_"]]}, "leaves joint 'RR_hip_joint' unpaired (no pair renames it) but it lies"),
        ({"mirror": [["FL_"]]}, "robot.mirror: expected a list of [left, right] name substrings"),
        (
            {
                "default_pose": {
                    "FL_hip_joint": 0.1,
                    "F[R]_hip_joint|R[RL]_hip_joint": 0.0,
                    ".*_thigh_joint": 0.9,
                    ".*_calf_joint": -1.8,
                }
            },
            "not symmetric under robot.mirror: FL_hip_joint=0.1 but the mirror of FR_hip_joint=0 is 0",
        ),
    ],
)
def test_a_bad_mirror_is_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        quadruped(1, robot_changes=changes)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_term_without_a_mirror_is_named() -> None:
    env = quadruped(1, observations={"joint_pos": {}, "feet_vel": {}})
    with pytest.raises(ValueError, match=r"^task.observations.feet_vel has no mirror, so symmetry cannot mirror"):
        env.mirror()
