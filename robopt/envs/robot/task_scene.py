"""A ``TermTask``'s table scene seen from outside the step: the camera on the table, where a target outline is drawn,
and the check that a target command's ranges lie on the table (``TermTask`` delegates to these)."""

from __future__ import annotations

import mujoco
import numpy as np

from robopt.envs.render import CameraView
from robopt.envs.robot.scene import table_view


def camera_view(task) -> CameraView | None:
    """A video's view: the table from across it when the task has a scene; None leaves the renderer's default."""
    objects = task.robot.objects
    return None if objects is None else table_view(objects, task.robot.base_world_pos.cpu())


def render_targets(task, row: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Where an object should go in ``row``: (its body, world position [3], world orientation [9] row-major) for the
    first object when the command is a target (drawn as its translucent outline); else none."""
    if task.command is None or "target" not in task.command.provides or task.context is None:
        return []
    if task.robot.objects is None:
        return []
    x, y, z, cos, sin = task.context.command[row, :5].double().cpu().numpy()
    base = task.robot.base_world_quat.double().cpu().numpy()
    turn = np.zeros(9)
    mujoco.mju_quat2Mat(turn, base)
    turn = turn.reshape(3, 3)
    pos = task.robot.base_world_pos.double().cpu().numpy() + turn @ np.array([x, y, z])
    yaw = np.array([[cos, -sin, 0.0], [sin, cos, 0.0], [0.0, 0.0, 1.0]])
    return [(task.robot.objects.names[0], pos, (turn @ yaw).reshape(-1))]


def check_target_on_table(task) -> None:
    """A target command's x and y ranges lie on the scene's table (one line naming the key)."""
    objects = task.robot.objects
    if task.command is None or "target" not in task.command.provides or objects is None:
        return
    base = task.robot.base_world_pos.cpu()
    for axis, key in enumerate(("x", "y")):
        low, high = task.command.ranges[key]
        lo, hi = float(objects.table_low[axis] - base[axis]), float(objects.table_high[axis] - base[axis])
        if low < lo - 1e-9 or high > hi + 1e-9:
            raise ValueError(f"task.commands.{key}: [{low}, {high}] leaves the table ([{lo:.4g}, {hi:.4g}] m)")
