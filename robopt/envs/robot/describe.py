"""What a robot computer needs to run a term task's policy: the ``robot`` block of the export sidecar.

Shapes: A actuated joints (action order), D observation dim.

The block holds the joint names in action order, the action's meaning (``target = offset + scale * action`` with
offset the default pose for ``joint_position``; ``torque = scale * action`` for ``joint_effort``), PD gains and
effort limits, joint ranges, the control period, the gripper (its action element: +1 open, -1 closed), the
observation terms in order with their widths, scales and clips (and the noise they were trained with), each
element's name and the term's deploy source (both from the term's declaration, ``robopt.envs.robot.terms``), and the
command's ranges and deploy source. ``observation_names`` names every element of the observation:
``<term>/<element>``. A policy that sees a window of past steps (``policy.history``) has it described in the
sidecar's ``history`` block, the runtime builds it.
"""

from __future__ import annotations

import math

from robopt.envs.robot.task import TermTask


def observation_terms(task: TermTask) -> list[dict]:
    """The policy's observation terms in order: name, width, per-element scale, noise, bias, clip, element names and
    the deploy source (None where a robot computer has none)."""
    terms, start = [], 0
    for term, width in zip(task.observation_terms, task.term_widths, strict=True):
        deploy = term.info.deploy
        terms.append(
            {
                "name": term.name,
                "size": width,
                "scale": task.frame_scale[start : start + width].tolist(),
                "noise": term.noise,
                "bias": term.bias,
                "clip": None if math.isinf(term.clip) else term.clip,
                "elements": term.info.element_names(task, width),
                "deploy": deploy.to_json() if deploy else None,
            }
        )
        start += width
    return terms


def observation_names(task: TermTask) -> list[str]:
    """A name for each observation element [D]: ``joint_pos/FR_hip_joint``, ``projected_gravity/z``..."""
    return [f"{term['name']}/{element}" for term in observation_terms(task) for element in term["elements"]]


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
        "gripper": None
        if robot.gripper is None
        else {
            "joints": list(robot.gripper.joints),
            "action_index": robot.gripper.action_index,
            "open": robot.gripper.open,
            "closed": robot.gripper.closed,
        },
        "observation": {"terms": observation_terms(task)},
        "command": task.command.describe() if task.command is not None else None,
    }
