"""Terms of manipulation tasks: objects on a table, a gripper, a target (``task.commands.type: target``).

Shapes: N envs, O objects, F fingers, K points of a shape. Each term declared once (``robopt.envs.robot.terms``).

Positions and vectors are in the robot's base frame (a fixed arm's base is where the table's coordinates start).
A term that reads one object takes ``object`` (its name in ``task.scene.objects``; '' = the first). Kernels: ``tanh``
is 1 - tanh(d / std), ``exp`` is exp(-d^2 / std^2) (both 1 at the target, the first with a longer tail).

Success terms (``task.success``, at most one) say whether the task is done in this state; the task keeps the
count of consecutive steps it held (``hold_s``, an option of the entry) and sets ``signals.success``, which the
``success`` reward and termination read and the env reports as ``info["is_success"]``. A success term with a
``score`` attribute (a function of the same parameters, [N] float: ``t_covered``'s is the coverage) also has it
reported as ``info["success_score"]``, whose value at each episode's end ``robopt eval`` averages.

Push-T's score is the share of the block's area that lies inside its target region, the block placed at the
target pose (Chi et al. 2023, "Diffusion Policy", whose 2D environment computes it exactly from polygons): here it
is computed over a fixed grid of points covering the T (``t_points``), so it moves in steps of 1 / K.
"""

from __future__ import annotations

import math

import torch

from robopt.envs.robot.commands import TARGET
from robopt.envs.robot.signals import Signals, quat_rotate_inverse
from robopt.envs.robot.terms import END_EFFECTOR, GRIPPER, OBJECTS, XYZ, Deploy, Need, command_names, named, term
from robopt.options import NON_NEGATIVE, POSITIVE, Check

KERNEL = Check("tanh or exp", lambda value: value in ("tanh", "exp"))
SUCCESS = Need("success", "task.success", lambda task: bool(task.success_terms))


def _kernel(distance: torch.Tensor, std: float, kernel: str) -> torch.Tensor:
    if kernel == "exp":
        return torch.exp(-distance.square() / std**2)
    return 1.0 - torch.tanh(distance / std)


def yaw_of(quat: torch.Tensor) -> torch.Tensor:
    """The heading (rad) of orientations [..., 4]: the angle of their x axis in the xy plane."""
    w, x, y, z = quat.unbind(-1)
    return torch.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def wrap(angle: torch.Tensor) -> torch.Tensor:
    """Angles wrapped to [-pi, pi)."""
    return torch.remainder(angle + math.pi, 2.0 * math.pi) - math.pi


def target_yaw(s: Signals) -> torch.Tensor:
    """The target's yaw [N] (rad) from the command's (cos, sin)."""
    return torch.atan2(s.command[:, 4], s.command[:, 3])


def _pos(s: Signals, name: str) -> torch.Tensor:
    return s.objects_pos_base[:, s.object_index(name)]


# -- observations ---------------------------------------------------------------------------------------------------
@term("observation", needs=(OBJECTS,), elements=XYZ)
def object_pos(s: Signals, object: str = "") -> torch.Tensor:
    """The object's position in the base frame [N, 3] (m)."""
    return _pos(s, object)


@term("observation", needs=(OBJECTS,), elements=named("qw", "qx", "qy", "qz"))
def object_quat(s: Signals, object: str = "") -> torch.Tensor:
    """The object's orientation in the base frame [N, 4] (w, x, y, z), w >= 0."""
    quat = s.objects_quat_base[:, s.object_index(object)]
    return torch.where(quat[:, :1] < 0, -quat, quat)


@term("observation", needs=(OBJECTS,), elements=named("vx", "vy", "vz", "wx", "wy", "wz"))
def object_vel(s: Signals, object: str = "") -> torch.Tensor:
    """The object's linear (m/s) and angular (rad/s) velocity in the base frame [N, 6]."""
    index = s.object_index(object)
    quat = s.base_frame_quat
    linear = quat_rotate_inverse(quat, s.objects_lin_vel[:, index])
    angular = quat_rotate_inverse(quat, s.objects_ang_vel[:, index])
    return torch.cat([linear, angular], dim=1)


@term("observation", needs=(GRIPPER,), elements=named("opening"))
def gripper_opening(s: Signals) -> torch.Tensor:
    """How open the gripper is [N, 1]: 0 closed, 1 open."""
    return s.gripper_opening[:, None]


@term("observation", needs=(OBJECTS, END_EFFECTOR), elements=XYZ)
def object_to_gripper(s: Signals, object: str = "") -> torch.Tensor:
    """From the object to the end effector, in the base frame [N, 3] (m)."""
    return s.ee_pos_base - _pos(s, object)


@term("observation", needs=(OBJECTS, TARGET), elements=XYZ)
def object_to_target(s: Signals, object: str = "") -> torch.Tensor:
    """From the object to its target position, in the base frame [N, 3] (m)."""
    return s.command[:, :3] - _pos(s, object)


@term("observation", needs=(TARGET,), elements=command_names, deploy=Deploy(command=True))
def target_command(s: Signals) -> torch.Tensor:
    """Where the object should go [N, 5]: position in the base frame (m), cos and sin of its yaw."""
    return s.command


# -- rewards --------------------------------------------------------------------------------------------------------
@term("reward", needs=(OBJECTS, END_EFFECTOR), params={"std": POSITIVE, "kernel": KERNEL})
def reach_object(s: Signals, std: float = 0.1, kernel: str = "tanh", object: str = "") -> torch.Tensor:
    """The end effector near the object: kernel of their distance (a bonus, 1 there)."""
    return _kernel((s.ee_pos_base - _pos(s, object)).norm(dim=1), std, kernel)


@term("reward", needs=(OBJECTS, GRIPPER))
def grasp(s: Signals, object: str = "") -> torch.Tensor:
    """1.0 while every finger touches the object (a bonus)."""
    return s.finger_contacts(s.object_index(object)).all(dim=1).to(s.objects_pos.dtype)


@term("reward", needs=(OBJECTS,), params={"height": POSITIVE})
def lift(s: Signals, height: float = 0.1, object: str = "") -> torch.Tensor:
    """The object's height above its resting place as a share of ``height`` (m), clipped to [0, 1] (a bonus)."""
    return (s.objects_height[:, s.object_index(object)] / height).clamp(0.0, 1.0)


@term("reward", needs=(OBJECTS, TARGET), params={"std": POSITIVE, "kernel": KERNEL, "min_height": NON_NEGATIVE})
def object_at_target(
    s: Signals, std: float = 0.1, kernel: str = "tanh", min_height: float = 0.0, object: str = ""
) -> torch.Tensor:
    """The object near its target position: kernel of the distance (a bonus), counted once the object is
    ``min_height`` (m) above its resting place (0: always; Isaac Lab's lift task gates it on lifting)."""
    index = s.object_index(object)
    value = _kernel((s.command[:, :3] - s.objects_pos_base[:, index]).norm(dim=1), std, kernel)
    return value * (s.objects_height[:, index] >= min_height) if min_height > 0 else value


@term("reward", needs=(OBJECTS, TARGET), params={"std": POSITIVE, "kernel": KERNEL})
def object_yaw_at_target(s: Signals, std: float = 0.5, kernel: str = "tanh", object: str = "") -> torch.Tensor:
    """The object's heading near the target's: kernel of the yaw error (rad; a bonus)."""
    yaw = yaw_of(s.objects_quat_base[:, s.object_index(object)])
    return _kernel(wrap(target_yaw(s) - yaw).abs(), std, kernel)


@term("reward", needs=(OBJECTS, TARGET))
def push_t_coverage(s: Signals, object: str = "") -> torch.Tensor:
    """The Push-T score (the module doc): the share of the T block inside its target region, in [0, 1]."""
    return t_coverage(s, s.object_index(object))


@term("reward", needs=(SUCCESS,))
def success(s: Signals) -> torch.Tensor:
    """1.0 while the task's success term holds (the sparse reward)."""
    return s.success.to(s.joint_pos.dtype)


# -- success --------------------------------------------------------------------------------------------------------
@term("success", needs=(OBJECTS,), params={"height": POSITIVE})
def lifted(s: Signals, height: float = 0.1, object: str = "") -> torch.Tensor:
    """The object is at least ``height`` (m) above its resting place."""
    return s.objects_height[:, s.object_index(object)] >= height


@term("success", needs=(OBJECTS, TARGET), params={"tolerance": POSITIVE, "yaw_tolerance": POSITIVE})
def at_target(
    s: Signals, tolerance: float = 0.02, yaw_tolerance: float = 2.0 * math.pi, object: str = ""
) -> torch.Tensor:
    """The object is within ``tolerance`` (m) of its target position and ``yaw_tolerance`` (rad) of its yaw."""
    index = s.object_index(object)
    near = (s.command[:, :3] - s.objects_pos_base[:, index]).norm(dim=1) <= tolerance
    if yaw_tolerance >= math.pi:
        return near
    yaw = yaw_of(s.objects_quat_base[:, index])
    return near & (wrap(target_yaw(s) - yaw).abs() <= yaw_tolerance)


@term("success", needs=(OBJECTS, TARGET), params={"threshold": Check("a share in (0, 1]", lambda v: 0 < v <= 1)})
def t_covered(s: Signals, threshold: float = 0.95, object: str = "") -> torch.Tensor:
    """The Push-T score is at least ``threshold`` (the benchmark's success: 0.95)."""
    return t_coverage(s, s.object_index(object)) >= threshold


def _t_covered_score(s: Signals, threshold: float = 0.95, object: str = "") -> torch.Tensor:
    return t_coverage(s, s.object_index(object))


t_covered.score = _t_covered_score  # the env reports the coverage itself as info["success_score"]


# -- terminations ---------------------------------------------------------------------------------------------------
@term("termination", needs=(OBJECTS,), params={"margin": NON_NEGATIVE, "drop": POSITIVE})
def object_off_table(s: Signals, margin: float = 0.0, drop: float = 0.05) -> torch.Tensor:
    """Some object left the table: its centre beyond the table's edge by more than ``margin`` (m), or ``drop``
    (m) below the table top."""
    tables = s.robot.objects
    xy = s.objects_pos[..., :2]
    low, high = tables.table_low.to(xy) - margin, tables.table_high.to(xy) + margin
    outside = ((xy < low) | (xy > high)).any(dim=-1)
    fallen = s.objects_pos[..., 2] < tables.table_height - drop
    return (outside | fallen).any(dim=1)


@term("termination", needs=(SUCCESS,))
def succeeded(s: Signals) -> torch.Tensor:
    """The task's success term holds (its hold time included): the episode ends there."""
    return s.success


# -- Push-T's score -------------------------------------------------------------------------------------------------
def t_points(size: tuple[float, ...], per_axis: int = 12) -> torch.Tensor:
    """Points covering a T block of ``size`` (bar half length, half width, stem half length, half height) evenly
    [K, 2] (its frame, the bar at +y): cell centres of a grid over the bar and over the stem, each cell of the
    same area."""
    bar, width, stem, _ = size
    cell = 2.0 * width / per_axis  # square cells: the width takes per_axis of them

    def grid(half_x: float, half_y: float, centre_y: float) -> torch.Tensor:
        nx, ny = max(1, round(2 * half_x / cell)), max(1, round(2 * half_y / cell))
        xs = (torch.arange(nx, dtype=torch.float64) + 0.5) / nx * 2 * half_x - half_x
        ys = (torch.arange(ny, dtype=torch.float64) + 0.5) / ny * 2 * half_y - half_y + centre_y
        return torch.cartesian_prod(xs, ys)

    return torch.cat([grid(bar, width, stem + width), grid(width, stem, 0.0)])


def inside_t(points: torch.Tensor, size: tuple[float, ...], margin: float = 0.0) -> torch.Tensor:
    """Whether points [..., 2] (in a T block's frame) lie inside it [...] bool; ``margin`` (m) grows each of its two
    boxes on every side."""
    bar, width, stem, _ = size
    x, y = points[..., 0], points[..., 1]
    in_bar = (x.abs() <= bar + margin) & ((y - stem - width).abs() <= width + margin)
    in_stem = (x.abs() <= width + margin) & (y.abs() <= stem + margin)
    return in_bar | in_stem


def t_coverage(s: Signals, index: int) -> torch.Tensor:
    """Share of the T block's points that lie in the block placed at the target pose [N]."""
    size = s.robot.objects.objects[index].size
    points = t_points(size).to(s.objects_pos)  # [K, 2]
    yaw = yaw_of(s.objects_quat_base[:, index])  # [N]
    cos, sin = torch.cos(yaw)[:, None], torch.sin(yaw)[:, None]
    world_x = s.objects_pos_base[:, index, :1] + cos * points[:, 0] - sin * points[:, 1]  # [N, K]
    world_y = s.objects_pos_base[:, index, 1:2] + sin * points[:, 0] + cos * points[:, 1]
    dx, dy = world_x - s.command[:, :1], world_y - s.command[:, 1:2]
    tcos, tsin = s.command[:, 3:4], s.command[:, 4:5]
    local = torch.stack([tcos * dx + tsin * dy, -tsin * dx + tcos * dy], dim=-1)  # [N, K, 2] in the target's frame
    return inside_t(local, size).to(s.objects_pos.dtype).mean(dim=1)
