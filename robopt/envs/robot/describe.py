"""What a robot computer needs to run a term task's policy: the ``robot`` block of the export sidecar.

Shapes: A actuated joints (action order), D observation dim of one step, K history length.

The block holds the joint names in action order, the action's meaning (``target = offset + scale * action`` with
offset the default pose for ``joint_position``; ``torque = scale * action`` for ``joint_effort``), PD gains and
effort limits, joint ranges, the control period, the observation terms in order with their widths, scales and
clips (and the noise they were trained with), the history length, and the command's ranges. ``observation_names``
names every element of the policy's input: ``<term>/<element>``, with ``@t-k`` for older frames of a history.
"""

from __future__ import annotations

import math

from robopt.envs.robot.task import TermTask

_XYZ = ("x", "y", "z")
_JOINT_TERMS = ("joint_pos", "joint_vel", "joint_torque", "last_action")
_FEET_TERMS = ("feet_contact", "feet_force", "feet_height")


def _element_names(task: TermTask, name: str, width: int) -> list[str]:
    robot = task.robot
    if name in _JOINT_TERMS and width == len(robot.joint_names):
        return list(robot.joint_names)
    if name in _FEET_TERMS and width == robot.num_feet:
        return list(robot.foot_names)
    if name in ("velocity_command", "pose_command") and task.command is not None and width == task.command.dim:
        return list(task.command.names)
    if width == 3 and name.startswith("base_"):
        return list(_XYZ)
    if name == "projected_gravity":
        return list(_XYZ)
    return [str(i) for i in range(width)]


def observation_terms(task: TermTask) -> list[dict]:
    """The policy's observation terms in order: name, width, per-element scale, noise, bias, clip."""
    widths = task.term_widths
    terms, start = [], 0
    for term, width in zip(task.observation_terms, widths, strict=True):
        scale = task.frame_scale[start : start + width].tolist()
        terms.append({
            "name": term.name, "size": width, "scale": scale, "noise": term.noise, "bias": term.bias,
            "clip": None if math.isinf(term.clip) else term.clip,
            "elements": _element_names(task, term.name, width),
        })  # fmt: skip
        start += width
    return terms


def observation_names(task: TermTask) -> list[str]:
    """A name for each policy input [K * D], oldest frame first: ``joint_pos/FR_hip_joint``, ``...@t-1``."""
    frame = [f"{term['name']}/{element}" for term in observation_terms(task) for element in term["elements"]]
    history = task.config.history
    return [name if age == 0 else f"{name}@t-{age}" for age in range(history - 1, -1, -1) for name in frame]


def robot_sidecar(task: TermTask) -> dict:
    """The sidecar's ``robot`` block (JSON types only)."""
    robot = task.robot
    finite = lambda value: value if math.isfinite(value) else None  # noqa: E731  (JSON has no infinity)
    return {
        "name": robot.name,
        "joint_names": list(robot.joint_names),
        "action_type": robot.action_type,
        "action_scale": robot.action_scale.tolist(),
        "action_offset": robot.action_offset.tolist(),
        "default_pose": robot.default_pose.cpu().tolist(),
        "kp": robot.kp.tolist(),
        "kd": robot.kd.tolist(),
        "effort": robot.effort.tolist(),
        "joint_range": [[finite(low), finite(high)] for low, high in robot.joint_range.cpu().tolist()],
        "control_period": robot.control_dt,
        "timestep": robot.control_dt / robot.decimation,
        "decimation": robot.decimation,
        "floating_base": robot.floating,
        "feet": list(robot.foot_names),
        "end_effector": robot.end_effector,
        "observation": {"history": task.config.history, "terms": observation_terms(task)},
        "command": task.command.describe() if task.command is not None else None,
    }
