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
    episode), lift it ``lift_height`` m; with ``place``, carry it over the target, lower it there and let go.

    Its choices are functions of what the policy observes (the tool, the object, the gripper's opening, the
    target), not of a hidden phase: a clone sees why the expert acts as it does. Per row: while the object is not
    held, go above it (``hover`` m) until within ``xy_tolerance`` of its axis, then down to the grasp height, and
    close once there; the object counts as held while the gripper is closed on something (its opening between
    ``held``) with the object between the fingers; held, go up (and, placing, over the target, then down onto it),
    and open once the object is on its target."""

    def __init__(
        self,
        env,
        seed: int,
        place: bool = False,
        lift_height: float = 0.15,
        hover: float = 0.06,
        xy_tolerance: float = 0.01,
        held: tuple[float, float] = (0.2, 0.8),
    ) -> None:
        self.env, self.arm, self.place = env, CartesianArm(env), place
        self.lift_height, self.hover, self.xy_tolerance, self.held = lift_height, hover, xy_tolerance, held
        self.generator = torch.Generator().manual_seed(seed)
        self.yaw = torch.zeros(env.num_envs, dtype=torch.float64)
        self.heading = self.arm.heading()
        self.object = env.task.robot.objects
        self.rest_z = float(self.object.rest_z[0])
        self.grip_z = self.rest_z + 0.008  # the tool site (the fingers' middle) just above the cube's centre

    def _new_episodes(self, rows: np.ndarray, object_yaw: torch.Tensor) -> None:
        """Draw each new episode's grasp: the fingers along the object's x or y axis (the nearer of the two
        equivalent hand headings)."""
        if rows.size == 0:
            return
        quarter = torch.randint(2, (rows.size,), generator=self.generator).to(torch.float64) * (math.pi / 2)
        yaw = object_yaw[rows] + quarter - self.heading
        self.yaw[rows] = torch.remainder(yaw + math.pi / 2, math.pi) - math.pi / 2  # a parallel gripper is symmetric

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        env = self.env
        s = _signals(env)
        qpos = s.state["qpos"].cpu().numpy()
        cube = s.objects_pos[:, 0].cpu().numpy()
        tool = s.ee_pos.cpu().numpy()
        opening = s.gripper_opening.cpu().numpy()
        self._new_episodes(np.nonzero(env.episode_steps.cpu().numpy() == 0)[0], yaw_of(s.objects_quat[:, 0]).cpu())
        between = np.linalg.norm(cube - tool, axis=1) < 0.02  # the object's centre between the fingers
        held = between & (opening > self.held[0]) & (opening < self.held[1])
        off_axis = np.linalg.norm(cube[:, :2] - tool[:, :2], axis=1)
        goal = cube.copy()  # above the object until over its axis, then down to the grasp height
        goal[:, 2] = np.where(off_axis > self.xy_tolerance, cube[:, 2] + self.hover, self.grip_z)
        at_grasp = (off_axis <= self.xy_tolerance) & (np.abs(tool[:, 2] - self.grip_z) < 0.006)
        close = at_grasp | held
        up = tool.copy()
        up[:, 2] = self.rest_z + self.lift_height  # held: straight up from where it is
        goal = np.where(held[:, None], up, goal)
        if self.place:
            target = s.command[:, :3].cpu().numpy() + s.base_frame_pos.cpu().numpy()
            in_hand = tool - cube  # where the tool is from the held object: it is the object that goes on the target
            over = np.linalg.norm(cube[:, :2] - target[:, :2], axis=1) <= self.xy_tolerance
            high = target + in_hand
            high[:, 2] = self.rest_z + self.lift_height
            carry = np.where(over[:, None], target + in_hand, high)
            raised = held & (tool[:, 2] > self.rest_z + 0.5 * self.lift_height)
            goal = np.where((held & (raised | over))[:, None], carry, goal)
            placed = np.linalg.norm(cube - target, axis=1) < 0.006
            close = close & ~placed
            goal = np.where(placed[:, None], target + [0.0, 0.0, 0.008 + self.hover], goal)
        actions = self.arm.actions(qpos, goal, self.yaw, np.where(close, -1.0, 1.0))
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
