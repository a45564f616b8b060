"""What terms read: the backend state seen through a robot's index tables, plus the task's ``Context`` (the command
the policy saw and its actions).

Shapes: N envs, A actuated joints (= action dim), F feet, C command dim. Quaternions are MuJoCo's (w, x, y, z).

``Signals`` computes each quantity on first use and keeps it for the rest of the step (``functools.cached_property``),
so a task pays only for what its terms read. Frames: ``base_lin_vel`` and ``base_ang_vel`` are the IMU's readings
(MuJoCo's velocimeter and gyro at the IMU site, in the site's frame); ``projected_gravity`` is the unit gravity
vector in that frame ((0, 0, -1) when upright); foot and end-effector positions and velocities are in the world
frame. A unit test builds a ``Signals`` from values with ``Signals.of(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from robopt.envs.robot.model import RobotModel


def quat_rotate(quat: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """R(q) v for unit quaternions quat [..., 4] (w, x, y, z) and vectors [..., 3]: v (2w^2 - 1) + 2w (u x v) +
    2u (u . v), u = (x, y, z)."""
    w, u = quat[..., :1], quat[..., 1:]
    return (
        vector * (2.0 * w * w - 1.0) + 2.0 * w * torch.cross(u, vector, dim=-1) + 2.0 * u * (u * vector).sum(-1, True)
    )


def quat_rotate_inverse(quat: torch.Tensor, vector: torch.Tensor) -> torch.Tensor:
    """R(q)^T v: the world vector [..., 3] in the frame of quat [..., 4] (the sign of the cross term flips)."""
    w, u = quat[..., :1], quat[..., 1:]
    return (
        vector * (2.0 * w * w - 1.0) - 2.0 * w * torch.cross(u, vector, dim=-1) + 2.0 * u * (u * vector).sum(-1, True)
    )


def quat_multiply(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """Hamilton product first * second, [..., 4] each."""
    w1, x1, y1, z1 = first.unbind(-1)
    w2, x2, y2, z2 = second.unbind(-1)
    return torch.stack(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ],
        dim=-1,
    )


def quat_conjugate(quat: torch.Tensor) -> torch.Tensor:
    """(w, -x, -y, -z): the inverse of a unit quaternion."""
    return torch.cat([quat[..., :1], -quat[..., 1:]], dim=-1)


def quat_angle(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The rotation angle (rad, in [0, pi]) between unit quaternions [..., 4]: 2 acos(|<q1, q2>|)."""
    dot = (first * second).sum(-1).abs().clamp(max=1.0)
    return 2.0 * torch.acos(dot)


def yaw_quat(yaw: torch.Tensor) -> torch.Tensor:
    """Rotations about z by yaw [...] (rad): (cos(yaw/2), 0, 0, sin(yaw/2)) [..., 4]."""
    half = 0.5 * yaw
    zero = torch.zeros_like(half)
    return torch.stack([torch.cos(half), zero, zero, torch.sin(half)], dim=-1)


def euler_quat(roll: torch.Tensor, pitch: torch.Tensor, yaw: torch.Tensor) -> torch.Tensor:
    """Rz(yaw) Ry(pitch) Rx(roll) as quaternions [..., 4] (intrinsic z-y-x, as in most robot frames)."""
    zero = torch.zeros_like(roll)
    qx = torch.stack([torch.cos(0.5 * roll), torch.sin(0.5 * roll), zero, zero], dim=-1)
    qy = torch.stack([torch.cos(0.5 * pitch), zero, torch.sin(0.5 * pitch), zero], dim=-1)
    return quat_multiply(quat_multiply(yaw_quat(yaw), qy), qx)


@dataclass
class Context:
    """What terms read besides the simulator's state (tensors on the physics device, in the state's dtype): the
    command the policy saw (the command generator's value, written in place) and its actions. What a single term
    keeps across steps lives in that term (``robopt.envs.robot.terms``), not here."""

    command: torch.Tensor  # [N, C]
    action: torch.Tensor  # [N, A] this step's action (clipped), zeros before the first
    previous_action: torch.Tensor  # [N, A]


class Signals:
    """One step's quantities for the terms (see the module doc); built by ``TermTask`` from the state dict."""

    def __init__(self, state: dict[str, torch.Tensor], robot: RobotModel, context: Context) -> None:
        self.state, self.robot, self.context = state, robot, context

    @classmethod
    def of(cls, **values: Any) -> Signals:
        """A Signals holding the given quantities as they are (for unit tests of terms): no state, robot or context."""
        signals = cls.__new__(cls)
        signals.state, signals.robot, signals.context = {}, None, None
        signals.__dict__.update(values)
        return signals

    def _sensor(self, name: str) -> torch.Tensor:
        return self.state["sensordata"][:, self.robot.sensors[name]]

    # -- the base (IMU) --------------------------------------------------------------------------------------------
    @cached_property
    def base_quat(self) -> torch.Tensor:
        """IMU frame orientation in the world [N, 4]."""
        return self._sensor("imu_quat")

    @cached_property
    def base_lin_vel(self) -> torch.Tensor:
        """Linear velocity of the IMU in its own frame [N, 3] (m/s)."""
        return self._sensor("imu_linvel")

    @cached_property
    def base_ang_vel(self) -> torch.Tensor:
        """Angular velocity in the IMU frame [N, 3] (rad/s)."""
        return self._sensor("imu_gyro")

    @cached_property
    def projected_gravity(self) -> torch.Tensor:
        """Unit gravity in the IMU frame [N, 3]: (0, 0, -1) when level."""
        down = torch.zeros_like(self.base_lin_vel)
        down[:, 2] = -1.0
        return quat_rotate_inverse(self.base_quat, down)

    @cached_property
    def base_pos(self) -> torch.Tensor:
        """World position of a floating base [N, 3] (its free joint's qpos)."""
        adr = self.robot.free_qpos
        return self.state["qpos"][:, adr : adr + 3]

    @cached_property
    def base_height(self) -> torch.Tensor:
        """Height of a floating base's origin above the ground [N]: above z = 0 (the floor), or above the terrain
        under it."""
        if self.robot.terrain is None:
            return self.base_pos[:, 2]
        return self.base_pos[:, 2] - self.robot.terrain.height(self.base_pos[:, :2])

    def terrain_height(self, xy: torch.Tensor) -> torch.Tensor:
        """The ground's height [...] under world points xy [..., 2]: the terrain's, or 0 on the flat floor."""
        if self.robot.terrain is None:
            return xy.new_zeros(xy.shape[:-1])
        return self.robot.terrain.height(xy)

    # -- joints ----------------------------------------------------------------------------------------------------
    @cached_property
    def joint_pos(self) -> torch.Tensor:
        """Actuated joint positions [N, A] (rad or m), action order."""
        return self.state["qpos"][:, self.robot.qpos_index]

    @cached_property
    def default_pose(self) -> torch.Tensor:
        """The default pose [A] (rad)."""
        return self.robot.default_pose.to(self.joint_pos)

    @cached_property
    def joint_vel(self) -> torch.Tensor:
        """Actuated joint velocities [N, A]."""
        return self.state["qvel"][:, self.robot.dof_index]

    @cached_property
    def joint_range(self) -> torch.Tensor:
        """Joint limits [A, 2] (unlimited joints: -inf, inf)."""
        return self.robot.joint_range.to(self.joint_pos)

    @cached_property
    def joint_torque(self) -> torch.Tensor:
        """Actuator forces on the actuated joints [N, A] (N m; MuJoCo's actuator_force, after force limits)."""
        return self.state["actuator_force"][:, self.robot.actuator_index]

    # -- feet and contacts -----------------------------------------------------------------------------------------
    @cached_property
    def feet_pos(self) -> torch.Tensor:
        """World positions of the feet [N, F, 3] (the foot geom's centre, or the foot body's origin)."""
        return self._sensor("feet_pos").reshape(-1, self.robot.num_feet, 3)

    @cached_property
    def feet_height(self) -> torch.Tensor:
        """Lowest point of each foot above the ground under it [N, F] (m): centre height minus the foot's radius
        (minus the terrain's height there, on a terrain)."""
        height = self.feet_pos[..., 2] - self.robot.foot_radius.to(self.feet_pos)
        if self.robot.terrain is None:
            return height
        return height - self.robot.terrain.height(self.feet_pos[..., :2])

    @cached_property
    def feet_vel(self) -> torch.Tensor:
        """World linear velocities of the feet [N, F, 3]."""
        return self._sensor("feet_vel").reshape(-1, self.robot.num_feet, 3)

    @cached_property
    def feet_force(self) -> torch.Tensor:
        """Net contact force magnitude on each foot [N, F] (N)."""
        contact = self._sensor("feet_contact").reshape(-1, self.robot.num_feet, 4)
        return contact[..., 1:].norm(dim=-1)

    @cached_property
    def feet_contact(self) -> torch.Tensor:
        """Whether each foot touches the ground [N, F] bool (a contact carrying over 1 N)."""
        return self.feet_force > 1.0

    def body_contacts(self, bodies: tuple[str, ...]) -> torch.Tensor:
        """Number of contacts [N] of the bodies matching ``bodies`` (a term's regular expressions)."""
        return self._sensor("contact:" + "|".join(bodies)).sum(dim=-1)

    # -- end effector (arms) ---------------------------------------------------------------------------------------
    @cached_property
    def ee_pos(self) -> torch.Tensor:
        """World position of the end-effector site [N, 3]."""
        return self._sensor("ee_pos")

    @cached_property
    def ee_quat(self) -> torch.Tensor:
        """World orientation of the end-effector site [N, 4]."""
        return self._sensor("ee_quat")

    @cached_property
    def base_frame_pos(self) -> torch.Tensor:
        """World position of the base body [N, 3]: a floating base's free joint, or a fixed base's place."""
        if self.robot.free_qpos >= 0:
            return self.base_pos
        return self.robot.base_world_pos.to(self.ee_pos).expand(self.ee_pos.shape[0], 3)

    @cached_property
    def base_frame_quat(self) -> torch.Tensor:
        """World orientation of the base body [N, 4]."""
        if self.robot.free_qpos >= 0:
            adr = self.robot.free_qpos
            return self.state["qpos"][:, adr + 3 : adr + 7]
        return self.robot.base_world_quat.to(self.ee_pos).expand(self.ee_pos.shape[0], 4)

    @cached_property
    def ee_pos_base(self) -> torch.Tensor:
        """End-effector position in the base frame [N, 3]."""
        return quat_rotate_inverse(self.base_frame_quat, self.ee_pos - self.base_frame_pos)

    @cached_property
    def ee_quat_base(self) -> torch.Tensor:
        """End-effector orientation in the base frame [N, 4]."""
        return quat_multiply(quat_conjugate(self.base_frame_quat), self.ee_quat)

    # -- objects and the gripper (manipulation) ---------------------------------------------------------------------
    def object_index(self, name: str) -> int:
        """The index of the scene object ``name`` ('' = the first); a ValueError listing the objects otherwise."""
        names = self.robot.objects.names
        if not name:
            return 0
        if name not in names:
            raise ValueError(f"object {name!r} is not in task.scene.objects ({', '.join(names)})")
        return names.index(name)

    @cached_property
    def objects_pos(self) -> torch.Tensor:
        """World positions of the objects' origins [N, O, 3] (their free joints' qpos)."""
        return self.state["qpos"][:, self.robot.objects.pos_index]

    @cached_property
    def objects_quat(self) -> torch.Tensor:
        """World orientations of the objects [N, O, 4]."""
        return self.state["qpos"][:, self.robot.objects.quat_index]

    @cached_property
    def objects_lin_vel(self) -> torch.Tensor:
        """World linear velocities of the objects [N, O, 3] (m/s)."""
        return self.state["qvel"][:, self.robot.objects.lin_index]

    @cached_property
    def objects_ang_vel(self) -> torch.Tensor:
        """Angular velocities of the objects in the world frame [N, O, 3] (rad/s; MuJoCo's free joint holds them in
        the body's frame)."""
        return quat_rotate(self.objects_quat, self.state["qvel"][:, self.robot.objects.ang_index])

    @cached_property
    def objects_pos_base(self) -> torch.Tensor:
        """Object positions in the base frame [N, O, 3]."""
        quat = self.base_frame_quat[:, None, :].expand(-1, self.objects_pos.shape[1], -1)
        return quat_rotate_inverse(quat, self.objects_pos - self.base_frame_pos[:, None, :])

    @cached_property
    def objects_quat_base(self) -> torch.Tensor:
        """Object orientations in the base frame [N, O, 4]."""
        quat = self.base_frame_quat[:, None, :].expand(-1, self.objects_quat.shape[1], -1)
        return quat_multiply(quat_conjugate(quat), self.objects_quat)

    @cached_property
    def objects_height(self) -> torch.Tensor:
        """Height of each object's origin above its resting height on the table [N, O] (m)."""
        return self.objects_pos[..., 2] - self.robot.objects.rest_z.to(self.objects_pos)

    @cached_property
    def gripper_opening(self) -> torch.Tensor:
        """How open the gripper is [N]: 0 closed, 1 open (its driven joint between the two)."""
        gripper = self.robot.gripper
        position = self.joint_pos[:, gripper.action_index]
        return (position - gripper.closed) / (gripper.open - gripper.closed)

    def finger_contacts(self, index: int) -> torch.Tensor:
        """Whether each finger touches object ``index`` [N, F] bool."""
        name = self.robot.objects.names[index]
        found = self._sensor(f"grasp:{name}").reshape(self.state["qpos"].shape[0], -1, 4)[..., 0]
        return found > 0

    @cached_property
    def success(self) -> torch.Tensor:
        """Whether the task's success term holds this step [N] bool (set by the task before the terminations)."""
        return torch.zeros(self.joint_pos.shape[0], dtype=torch.bool, device=self.joint_pos.device)

    # -- the context -----------------------------------------------------------------------------------------------
    @cached_property
    def command(self) -> torch.Tensor:
        """The command the policy saw [N, C]: (vx, vy, yaw rate) for velocity, (x, y, z, qw, qx, qy, qz) for pose."""
        return self.context.command

    @cached_property
    def action(self) -> torch.Tensor:
        """The policy's action of this step [N, A], clipped to the action bounds."""
        return self.context.action

    @cached_property
    def previous_action(self) -> torch.Tensor:
        """The action of the step before [N, A] (zeros at an episode's first step)."""
        return self.context.previous_action

    @cached_property
    def step_dt(self) -> float:
        """Control period (s)."""
        return self.robot.control_dt

    @cached_property
    def terminated(self) -> torch.Tensor:
        """Whether a termination term ended the episode this step [N] bool (set before the rewards)."""
        return torch.zeros(self.joint_pos.shape[0], dtype=torch.bool, device=self.joint_pos.device)
