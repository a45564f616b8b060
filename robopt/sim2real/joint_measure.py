"""The measured joint positions in a robot policy's observation, read from the export sidecar's ``robot`` block.

Torch-free (numpy). Shapes: D the robot's observation, A actions. A robot from its description observes its joints
as ``joint_pos`` (positions relative to the default pose, times the term's scale); the deploy runtime recovers the
positions from it where it needs them: the ``measured`` safe action and damping stop (``deploy_config``), and the
joint targets of a ``joint_position_delta`` policy (measured position + scale * action, ``ros_command``). A gripper's
element is NaN: it is driven by an absolute command, not relative to its measured position.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def gripper_elements(robot: dict, action_dim: int) -> np.ndarray:
    """[A] bool: the action elements of the sidecar's gripper (absolute even in a delta action)."""
    keep = np.zeros(action_dim, dtype=bool)
    gripper = robot.get("gripper")
    if isinstance(gripper, dict) and isinstance(gripper.get("action_index"), int):
        if 0 <= gripper["action_index"] < action_dim:
            keep[gripper["action_index"]] = True
    return keep


def measured_joints(robot: dict, action_dim: int) -> tuple[Callable[[np.ndarray], np.ndarray] | None, str]:
    """The map obs [D] -> measured joint positions [A] (rad, NaN at a gripper's element) and "", or None and why
    there is none (no ``joint_pos`` term naming every joint: a term history hides the names; a scale of 0)."""
    keep = gripper_elements(robot, action_dim)
    joints = list(robot.get("joint_names") or [])
    if len(joints) != action_dim:
        return None, f"its robot block names {len(joints)} joints for {action_dim} actions"
    arm = [joint for joint, kept in zip(joints, keep, strict=True) if not kept]
    terms = (robot.get("observation") or {}).get("terms") or []
    starts = np.cumsum([0] + [int(term.get("size", 0)) for term in terms])  # each term's first element
    found = [(term, start) for term, start in zip(terms, starts, strict=False) if term.get("name") == "joint_pos"]
    elements = list(found[0][0].get("elements") or []) if found else []
    if not found or not all(joint in elements for joint in arm):
        return None, "its observation has no joint_pos term naming every joint (a term history hides the names)"
    term, start = found[0]
    local = np.array([elements.index(joint) if joint in elements else 0 for joint in joints])  # [A]
    scale = np.asarray(term.get("scale"), dtype=np.float64)[local]  # [A] the observation's scale
    if (scale == 0).any():
        return None, "its joint_pos observation has a scale of 0"
    index, default = start + local, np.asarray(robot["default_pose"], dtype=np.float64)  # [A], [A]

    def measure(obs: np.ndarray) -> np.ndarray:
        pose = np.asarray(obs, np.float64)[index] / scale + default  # [A] the measured joint positions
        return np.where(keep, np.nan, pose)

    return measure, ""
