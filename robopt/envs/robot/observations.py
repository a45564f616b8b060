"""Observation terms: ``fn(signals, **params) -> [N, d]``, each declared once (``robopt.envs.robot.terms``): what it
needs, its elements' names, and how a robot computer computes it (``Deploy``) where one can.

Shapes: N envs, A actuated joints, F feet. The task scales each term, adds its noise and bias, clips, and
concatenates the terms in the order of ``task.observations``. Privileged terms for the critic (``task.critic``)
come from this same table.
"""

from __future__ import annotations

import torch

from robopt.envs.robot import mirror
from robopt.envs.robot.commands import POSE, VELOCITY
from robopt.envs.robot.signals import Signals, quat_conjugate, quat_multiply, quat_rotate, quat_rotate_inverse
from robopt.envs.robot.terms import (
    END_EFFECTOR,
    FEET,
    FLOATING,
    XYZ,
    Deploy,
    command_names,
    foot_names,
    joint_names,
    named,
    term,
)
from robopt.options import FINITE, POSITIVE, Check

JOINT_STATES = {"topic": "joint_states", "type": "sensor_msgs/JointState", "by_joint": True}
IMU = {"topic": "imu", "type": "sensor_msgs/Imu"}
POSE_NAMES = named("x", "y", "z", "qw", "qx", "qy", "qz")


@term(
    "observation",
    needs=(FLOATING,),
    elements=XYZ,
    deploy=Deploy(topic="odom", type="nav_msgs/Odometry", field="twist.twist.linear"),
    mirror=mirror.vector(1, -1, 1),
)
def base_lin_vel(s: Signals) -> torch.Tensor:
    """Linear velocity of the base in its own (IMU) frame [N, 3] (m/s)."""
    return s.base_lin_vel


@term(
    "observation",
    needs=(FLOATING,),
    elements=XYZ,
    deploy=Deploy(**IMU, field="angular_velocity"),
    mirror=mirror.vector(-1, 1, -1),
)
def base_ang_vel(s: Signals) -> torch.Tensor:
    """Angular velocity of the base in its own (IMU) frame [N, 3] (rad/s): a gyro's reading."""
    return s.base_ang_vel


@term(
    "observation",
    needs=(FLOATING,),
    elements=XYZ,
    deploy=Deploy(**IMU, field="orientation", convert="gravity"),
    mirror=mirror.vector(1, -1, 1),
)
def projected_gravity(s: Signals) -> torch.Tensor:
    """Unit gravity vector in the base (IMU) frame [N, 3]: (0, 0, -1) when level."""
    return s.projected_gravity


@term("observation", needs=(FLOATING,), mirror=mirror.vector(1))
def base_height(s: Signals) -> torch.Tensor:
    """Height of the base above the ground under it [N, 1] (m); a privileged term (a robot rarely measures it)."""
    return s.base_height[:, None]


GRID = Check(
    "two integers >= 1 (points along x and y)",
    lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(n, int) and n >= 1 for n in v),
)


def _scan_mirror(task, params: dict, width: int) -> mirror.Mirror:
    """The scan's grid flipped across the base's x axis (x-major: element i * ny + j <-> i * ny + ny - 1 - j)."""
    nx, ny = (int(n) for n in params.get("points", (17, 11)))
    return mirror.Mirror.of([i * ny + (ny - 1 - j) for i in range(nx) for j in range(ny)], [1.0] * (nx * ny))


@term(
    "observation",
    needs=(FLOATING,),
    params={"points": GRID, "spacing": POSITIVE, "offset": FINITE},
    mirror=_scan_mirror,
)
def height_scan(s: Signals, points: list = (17, 11), spacing: float = 0.1, offset: float = 0.0) -> torch.Tensor:
    """The ground under a grid of points around the base, as the base sees it [N, points_x * points_y] (m): base
    height minus the ground's height minus ``offset``, at ``points`` (x, y; legged_gym's 17 x 11 by default)
    ``spacing`` apart, centred on the base and turned with its heading (yaw only), x-major. The ground is the
    terrain (``task.terrain``; its heights as MuJoCo collides with them) or the flat floor at z = 0. A privileged
    term: a teacher's or critic's input (a robot has no such sensor without a depth camera or lidar map).

    One line when the grid has no points or is wider than a terrain tile."""
    nx, ny = (int(n) for n in points)
    if nx < 1 or ny < 1:
        raise ValueError(f"height_scan: points={list(points)} has no points; give two integers >= 1")
    terrain = s.robot.terrain
    if terrain is not None and max(nx - 1, ny - 1) * spacing > terrain.config.tile:
        raise ValueError(
            f"height_scan: the grid ({(nx - 1) * spacing:.3g} x {(ny - 1) * spacing:.3g} m) is wider than a terrain "
            f"tile ({terrain.config.tile:.3g} m)"
        )
    base = s.base_pos
    x = (torch.arange(nx, device=base.device, dtype=base.dtype) - (nx - 1) / 2) * spacing
    y = (torch.arange(ny, device=base.device, dtype=base.dtype) - (ny - 1) / 2) * spacing
    grid = torch.stack(torch.meshgrid(x, y, indexing="ij"), dim=-1).reshape(-1, 2)  # [P, 2]
    ahead = torch.zeros_like(base)
    ahead[:, 0] = 1.0
    forward = quat_rotate(s.base_quat, ahead)  # [N, 3] the base's x axis in the world
    heading = torch.nn.functional.normalize(forward[:, :2], dim=1, eps=1e-9)  # [N, 2] (cos, sin) of the yaw
    cos, sin = heading[:, None, 0], heading[:, None, 1]
    world_x = base[:, None, 0] + cos * grid[:, 0] - sin * grid[:, 1]
    world_y = base[:, None, 1] + sin * grid[:, 0] + cos * grid[:, 1]
    world = torch.stack([world_x, world_y], dim=-1)  # [N, P, 2]
    return base[:, None, 2] - s.terrain_height(world) - offset


@term(
    "observation",
    elements=joint_names,
    deploy=Deploy(**JOINT_STATES, field="position", offset="default_pose"),
    mirror=mirror.joints,
)
def joint_pos(s: Signals) -> torch.Tensor:
    """Joint positions relative to the default pose [N, A] (rad)."""
    return s.joint_pos - s.default_pose


@term("observation", elements=joint_names, deploy=Deploy(**JOINT_STATES, field="velocity"), mirror=mirror.joints)
def joint_vel(s: Signals) -> torch.Tensor:
    """Joint velocities [N, A] (rad/s)."""
    return s.joint_vel


@term("observation", elements=joint_names, mirror=mirror.joints)
def joint_torque(s: Signals) -> torch.Tensor:
    """Actuator torques [N, A] (N m)."""
    return s.joint_torque


@term("observation", elements=joint_names, deploy=Deploy(runtime="last_action"), mirror=mirror.joints)
def last_action(s: Signals) -> torch.Tensor:
    """The policy's previous action [N, A] (clipped to the action bounds; zeros at an episode's start)."""
    return s.action


@term("observation", needs=(VELOCITY,), elements=command_names, deploy=Deploy(command=True), mirror=mirror.command)
def velocity_command(s: Signals) -> torch.Tensor:
    """The velocity command [N, 3]: forward (m/s), lateral (m/s), yaw rate (rad/s), in the base's heading frame."""
    return s.command


@term("observation", needs=(POSE,), elements=command_names, deploy=Deploy(command=True))
def pose_command(s: Signals) -> torch.Tensor:
    """The target pose of the end effector in the base frame [N, 7]: position (m), quaternion (w, x, y, z)."""
    return s.command


@term("observation", needs=(END_EFFECTOR,), elements=POSE_NAMES)
def ee_pose(s: Signals) -> torch.Tensor:
    """The end effector's pose in the base frame [N, 7]: position (m), quaternion (w, x, y, z), w >= 0."""
    quat = s.ee_quat_base
    return torch.cat([s.ee_pos_base, torch.where(quat[:, :1] < 0, -quat, quat)], dim=1)


@term("observation", needs=(END_EFFECTOR, POSE), elements=named("x", "y", "z", "rx", "ry", "rz"))
def ee_pose_error(s: Signals) -> torch.Tensor:
    """Target minus end effector [N, 6]: position error in the base frame (m) and the rotation error as an axis
    times angle in the end effector's frame (rad)."""
    position = s.command[:, :3] - s.ee_pos_base
    error = quat_multiply(quat_conjugate(s.ee_quat_base), s.command[:, 3:7])  # ee -> target, ee frame
    error = torch.where(error[:, :1] < 0, -error, error)  # the short way round
    vector = error[:, 1:]
    sine = vector.norm(dim=1, keepdim=True)
    angle = 2.0 * torch.atan2(sine, error[:, :1])
    axis_angle = torch.where(sine > 1e-9, vector / sine.clamp(min=1e-12) * angle, 2.0 * vector)
    return torch.cat([position, axis_angle], dim=1)


@term("observation", needs=(FEET,), elements=foot_names, mirror=mirror.feet)
def feet_contact(s: Signals) -> torch.Tensor:
    """1.0 for each foot on the ground, else 0.0 [N, F] (privileged)."""
    return s.feet_contact.to(s.feet_force.dtype)


@term("observation", needs=(FEET,), elements=foot_names, mirror=mirror.feet)
def feet_force(s: Signals) -> torch.Tensor:
    """Contact force on each foot [N, F] (N; privileged)."""
    return s.feet_force


@term("observation", needs=(FEET,), elements=foot_names, mirror=mirror.feet)
def feet_height(s: Signals) -> torch.Tensor:
    """Height of each foot's lowest point above the floor [N, F] (m; privileged)."""
    return s.feet_height


@term("observation", needs=(FEET, FLOATING))
def feet_vel(s: Signals) -> torch.Tensor:
    """Foot velocities in the base frame [N, F * 3] (m/s; privileged)."""
    quat = s.base_quat[:, None, :].expand(-1, s.feet_vel.shape[1], -1)
    return quat_rotate_inverse(quat, s.feet_vel).flatten(1)
