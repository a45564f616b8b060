"""Scripted experts of the shipped manipulation tasks (``task.expert``): demonstrations for behaviour cloning.

Shapes: N envs, A actions (the arm's joints, then the gripper's element), O objects.

Each expert is a Cartesian controller on MuJoCo's Jacobian of the end-effector site, with no learned part. Every
control step, per row: the desired tool pose (a position, the tool pointing down, a heading about the vertical) is
compared with the current one; the pose error, limited to ``max_step`` m and ``max_turn`` rad per step, becomes
joint displacements by damped least squares (dq = J^T (J J^T + damping^2 I)^-1 e, over the arm's joints), and the
action is the joint target q + dq in action units (the PD servo's (target - offset) / scale; with
``joint_position_delta`` actions, dq / scale), clipped to the bounds. The gripper element is +1 (open) or -1
(closed). A phase machine per row moves the target: approach above the object, descend, close, lift (and, for
place, carry over the target, lower, open, retreat).

The experts read the simulator's state (object poses), not the policy's observation, and they are deliberately
multimodal where the task is: the cube is taken with the fingers along either of its two horizontal axes, chosen
at random per episode. Push-T has no expert yet (docs/manipulation.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mujoco
import numpy as np
import torch

from robopt.envs.robot.manipulation import yaw_of
from robopt.envs.robot.signals import Signals, quat_multiply, yaw_quat

APPROACH, DESCEND, CLOSE, LIFT, CARRY, LOWER, RELEASE, RETREAT, DONE = range(9)


def _axis_angle(quat: np.ndarray) -> np.ndarray:
    """The rotation vector (rad) of a unit quaternion (w, x, y, z), the short way round."""
    if quat[0] < 0:
        quat = -quat
    sine = np.linalg.norm(quat[1:])
    if sine < 1e-9:
        return 2.0 * quat[1:]
    return quat[1:] / sine * 2.0 * math.atan2(sine, quat[0])


class CartesianArm:
    """Damped least-squares steps of a robot env's end effector (the module doc); one MjData for the kinematics."""

    def __init__(self, env, max_step: float = 0.04, max_turn: float = 0.2, damping: float = 0.05) -> None:
        task = env.task
        self.env, self.task, self.robot = env, task, task.robot
        self.model = env.physics.mj_model
        self.data = mujoco.MjData(self.model)
        self.site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, self.robot.end_effector)
        if self.site < 0:
            raise ValueError(
                f"the scripted experts need robot.end_effector to name a site, got {self.robot.end_effector!r}"
            )
        gripper = self.robot.gripper
        self.arm = [i for i in range(len(self.robot.joint_names)) if gripper is None or i != gripper.action_index]
        self.dofs = self.robot.dof_index.cpu().numpy()[self.arm]
        self.qpos_index = self.robot.qpos_index.cpu().numpy()
        self.scale = self.robot.action_scale.cpu().numpy()
        self.offset = self.robot.action_offset.cpu().numpy()
        self.low, self.high = env.action_low.cpu().numpy(), env.action_high.cpu().numpy()
        self.max_step, self.max_turn, self.damping = max_step, max_turn, damping
        self.delta = self.robot.action_type == "joint_position_delta"
        self.down = torch.tensor(self._tool_quat(self.robot.init_qpos.numpy()))  # the tool's default orientation

    def _tool_quat(self, qpos: np.ndarray) -> np.ndarray:
        self.data.qpos[:] = qpos
        mujoco.mj_kinematics(self.model, self.data)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
        return quat

    def heading(self) -> float:
        """The world heading (rad) of the fingers' closing axis at the default pose (the hand's y axis)."""
        self.data.qpos[:] = self.robot.init_qpos.numpy()
        mujoco.mj_kinematics(self.model, self.data)
        y_axis = self.data.site_xmat[self.site].reshape(3, 3)[:, 1]
        return math.atan2(y_axis[1], y_axis[0])

    def target_quat(self, yaw: torch.Tensor) -> np.ndarray:
        """Tool orientations [N, 4]: the default (pointing down) turned by ``yaw`` about the vertical."""
        return quat_multiply(yaw_quat(yaw), self.down.expand(yaw.shape[0], 4)).numpy()

    def actions(self, qpos: np.ndarray, position: np.ndarray, yaw: torch.Tensor, gripper: np.ndarray) -> np.ndarray:
        """Actions [N, A] that move each row's tool toward ``position`` [N, 3] (world) with heading ``yaw`` [N]."""
        quat_goal = self.target_quat(yaw)
        actions = np.zeros((qpos.shape[0], len(self.scale)))
        jacp, jacr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        quat, error_quat = np.zeros(4), np.zeros(4)
        for row in range(qpos.shape[0]):
            self.data.qpos[:] = qpos[row]
            mujoco.mj_kinematics(self.model, self.data)
            mujoco.mj_comPos(self.model, self.data)
            mujoco.mj_jacSite(self.model, self.data, jacp, jacr, self.site)
            step = position[row] - self.data.site_xpos[self.site]
            length = np.linalg.norm(step)
            if length > self.max_step:
                step *= self.max_step / length
            mujoco.mju_mat2Quat(quat, self.data.site_xmat[self.site])
            mujoco.mju_mulQuat(error_quat, quat_goal[row], np.array([quat[0], -quat[1], -quat[2], -quat[3]]))
            turn = _axis_angle(error_quat)
            angle = np.linalg.norm(turn)
            if angle > self.max_turn:
                turn *= self.max_turn / angle
            jacobian = np.vstack([jacp[:, self.dofs], jacr[:, self.dofs]])  # [6, arm]
            error = np.concatenate([step, turn])
            solve = np.linalg.solve(jacobian @ jacobian.T + self.damping**2 * np.eye(6), error)
            move = jacobian.T @ solve  # [arm] joint displacement (rad)
            if self.delta:
                actions[row, self.arm] = move / self.scale[self.arm]
            else:
                actions[row, self.arm] = (
                    qpos[row, self.qpos_index[self.arm]] + move - self.offset[self.arm]
                ) / self.scale[self.arm]
        if self.robot.gripper is not None:
            actions[:, self.robot.gripper.action_index] = gripper
        return np.clip(actions, self.low, self.high)


def _signals(env) -> Signals:
    task = env.task
    return Signals(env.physics.state(), task.robot, task.context)


class PickExpert:
    """Lift (and place): take the object from above, the fingers along one of its horizontal axes (drawn per
    episode), lift it ``lift_height`` m; with ``place``, carry it over the target, lower it there and let go."""

    def __init__(self, env, seed: int, place: bool = False, lift_height: float = 0.15, hover: float = 0.08) -> None:
        self.env, self.arm, self.place = env, CartesianArm(env), place
        self.lift_height, self.hover = lift_height, hover
        self.generator = torch.Generator().manual_seed(seed)
        n = env.num_envs
        self.phase = np.full(n, APPROACH)
        self.timer = np.zeros(n, dtype=np.int64)
        self.yaw = torch.zeros(n, dtype=torch.float64)
        self.grasp_xy = np.zeros((n, 2))
        self.heading = self.arm.heading()
        self.object = env.task.robot.objects
        self.rest_z = float(self.object.rest_z[0])
        self.grip_z = self.rest_z + 0.008  # the tool site (the fingers' middle) just above the cube's centre

    def _new_episodes(self, rows: np.ndarray, object_yaw: torch.Tensor) -> None:
        """Draw each new episode's grasp: the fingers along the object's x or y axis (the nearer of the two
        equivalent hand headings)."""
        if rows.size == 0:
            return
        self.phase[rows] = APPROACH
        self.timer[rows] = 0
        quarter = torch.randint(2, (rows.size,), generator=self.generator).to(torch.float64) * (math.pi / 2)
        yaw = object_yaw[rows] + quarter - self.heading
        self.yaw[rows] = torch.remainder(yaw + math.pi / 2, math.pi) - math.pi / 2  # a parallel gripper is symmetric

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        env = self.env
        s = _signals(env)
        qpos = s.state["qpos"].cpu().numpy()
        cube = s.objects_pos[:, 0].cpu().numpy()
        tool = s.ee_pos.cpu().numpy()
        self._new_episodes(np.nonzero(env.episode_steps.cpu().numpy() == 0)[0], yaw_of(s.objects_quat[:, 0]).cpu())
        base = s.base_frame_pos.cpu().numpy()
        target = s.command[:, :3].cpu().numpy() + base if self.place else None
        goal = np.zeros_like(cube)
        gripper = np.ones(len(cube))
        for row in range(len(cube)):
            phase = self.phase[row]
            if phase == APPROACH:
                goal[row] = cube[row] + (0.0, 0.0, self.hover)
                if np.linalg.norm(goal[row] - tool[row]) < 0.01:
                    phase = DESCEND
            if phase == DESCEND:
                goal[row] = (*cube[row, :2], self.grip_z)
                if np.linalg.norm(goal[row] - tool[row]) < 0.006:
                    phase, self.timer[row], self.grasp_xy[row] = CLOSE, 0, cube[row, :2]
            if phase == CLOSE:
                goal[row], gripper[row] = (*self.grasp_xy[row], self.grip_z), -1.0
                self.timer[row] += 1
                if self.timer[row] >= 12:
                    phase = LIFT
            if phase == LIFT:
                goal[row], gripper[row] = (*self.grasp_xy[row], self.rest_z + self.lift_height), -1.0
                if self.place and abs(tool[row, 2] - goal[row, 2]) < 0.02:
                    phase = CARRY
            if phase == CARRY:
                goal[row], gripper[row] = (*target[row, :2], self.rest_z + self.lift_height), -1.0
                if np.linalg.norm(goal[row] - tool[row]) < 0.01:
                    phase = LOWER
            if phase == LOWER:
                goal[row], gripper[row] = (*target[row, :2], target[row, 2] + 0.008), -1.0
                resting = cube[row, 2] < target[row, 2] + 0.004  # on the table, however it sits in the fingers
                if np.linalg.norm(goal[row] - tool[row]) < 0.006 or resting:
                    phase, self.timer[row] = RELEASE, 0
            if phase == RELEASE:
                goal[row] = (*target[row, :2], target[row, 2] + 0.008)
                self.timer[row] += 1
                if self.timer[row] >= 8:
                    phase = RETREAT
            if phase == RETREAT:
                goal[row] = (*target[row, :2], target[row, 2] + self.hover)
            self.phase[row] = phase
        actions = self.arm.actions(qpos, goal, self.yaw, gripper)
        return torch.as_tensor(actions, dtype=torch.float32, device=env.device)


EXPERTS: dict[str, Callable] = {
    "lift": lambda env, seed: PickExpert(env, seed),
    "place": lambda env, seed: PickExpert(env, seed, place=True),
}


def task_expert(env, name: str, seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """The scripted expert ``name`` acting in ``env`` (a robot env on the CPU mujoco backend)."""
    if name not in EXPERTS:
        raise ValueError(f"task.expert={name!r} is not a scripted expert; allowed: {', '.join(EXPERTS)}")
    if env.task.robot.objects is None or env.task.robot.end_effector == "":
        raise ValueError(f"the {name} expert needs task.scene.objects and robot.end_effector")
    return EXPERTS[name](env, seed)
