"""Left-right mirror symmetry of a robot (``robot.mirror``) and of the vectors its task reads and writes.

Shapes: A actuated joints (action order), F feet, d a vector's width.

``robot.mirror`` lists name substitutions, e.g. ``[[FL_, FR_], [RL_, RR_]]``: the mirror image of a joint (or foot) is
the one whose name swaps the first of those substrings it contains for its partner. The mirror plane is the base's x-z
plane at the default pose. Each pair's sign comes from the joint axes, not from the user: reflecting a joint's axis a
through the plane (M = diag(1, -1, 1) in the base frame) gives M a, and since a reflection reverses the sense of a
rotation, the partner turns by q' = -(M a . a') q. An abduction axis along x flips sign (q' = -q), a pitch axis along
y keeps it (q' = q), a yaw axis along z flips. The builder checks, one line each: every substituted name is a joint
(or foot) of the model; the map is an involution (applied twice it is the identity); the partner's axis is parallel
to the reflected one and its anchor is the reflected anchor (1 mm); a joint no pair renames lies on the plane; the
default pose and the action scales are symmetric. ``Mirror`` is a vector's map, ``out = sign * x[perm]``; a term
declares its own (``robopt.envs.robot.terms``), so the task assembles the observation's mirror from its terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mujoco
import numpy as np
import torch

REFLECT = np.diag([1.0, -1.0, 1.0])  # the base's x-z plane


@dataclass(frozen=True)
class Mirror:
    """A vector's mirror image: ``x[..., perm] * sign`` (perm [d] long, sign [d] float)."""

    perm: torch.Tensor
    sign: torch.Tensor

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., self.perm.to(x.device)] * self.sign.to(x.device, x.dtype)

    @staticmethod
    def of(perm: Sequence[int], sign: Sequence[float]) -> Mirror:
        return Mirror(torch.tensor(list(perm), dtype=torch.long), torch.tensor(list(sign), dtype=torch.float64))

    @staticmethod
    def signs(*signs: float) -> Mirror:
        """A vector whose elements stay in place, each multiplied by its sign (x, -y, z...)."""
        return Mirror.of(range(len(signs)), signs)

    @staticmethod
    def cat(parts: Sequence[Mirror]) -> Mirror:
        """The mirror of concatenated vectors."""
        perms, offset = [], 0
        for part in parts:
            perms.append(part.perm + offset)
            offset += part.perm.numel()
        return Mirror(torch.cat(perms), torch.cat([part.sign for part in parts]))

    def tile(self, times: int) -> Mirror:
        """The mirror of ``times`` consecutive copies of the vector (a window of frames)."""
        return Mirror.cat([self] * times)


@dataclass(frozen=True)
class RobotMirror:
    """The robot's mirror: over its actuated joints (action order, with the axis signs) and its feet."""

    joints: Mirror
    feet: Mirror


def partner(name: str, pairs: Sequence[Sequence[str]]) -> str:
    """``name`` with the first substring of ``pairs`` it contains swapped for its partner (itself if none)."""
    for left, right in pairs:
        if left in name:
            return name.replace(left, right)
        if right in name:
            return name.replace(right, left)
    return name


def check_pairs(pairs) -> None:
    ok = isinstance(pairs, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(s, str) and s for s in p) and p[0] != p[1]
        for p in pairs
    )
    if not ok:
        raise ValueError(
            f"robot.mirror: expected a list of [left, right] name substrings (e.g. [[FL_, FR_], [RL_, RR_]]), "
            f"got {pairs!r}"
        )


def _map(names: Sequence[str], pairs, what: str) -> list[int]:
    """Each name's partner's index; ValueError when a partner is missing or the map is not an involution."""
    index = {name: i for i, name in enumerate(names)}
    out = []
    for name in names:
        other = partner(name, pairs)
        if other not in index:
            raise ValueError(
                f"robot.mirror: the mirror of {what} {name!r} would be {other!r}, which is not one of the model's "
                f"{what}s ({', '.join(names)})"
            )
        if partner(other, pairs) != name:
            raise ValueError(
                f"robot.mirror is not an involution: {name!r} -> {other!r} -> {partner(other, pairs)!r}; "
                "order the pairs so that each name maps back"
            )
        out.append(index[other])
    return out


def build_mirror(
    pairs,
    model: mujoco.MjModel,
    qpos: np.ndarray,
    base: int,
    joint_names: Sequence[str],
    default_pose: torch.Tensor,
    action_scale: torch.Tensor,
    foot_names: Sequence[str],
) -> RobotMirror:
    """The robot's mirror from ``robot.mirror`` (the module doc); ValueError (one line) when it does not hold."""
    check_pairs(pairs)
    data = mujoco.MjData(model)
    data.qpos[:] = qpos
    mujoco.mj_kinematics(model, data)
    turn, origin = data.xmat[base].reshape(3, 3), data.xpos[base]
    ids = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name) for name in joint_names]
    axes = [turn.T @ data.xaxis[j] for j in ids]  # in the base frame
    anchors = [turn.T @ (data.xanchor[j] - origin) for j in ids]
    perm = _map(joint_names, pairs, "joint")
    signs = []
    for i, j in enumerate(perm):
        reflected = REFLECT @ axes[i]
        cosine = float(reflected @ axes[j])
        if abs(abs(cosine) - 1.0) > 1e-3:
            raise ValueError(
                f"robot.mirror: joint {joint_names[i]!r}'s axis reflected {np.round(reflected, 3).tolist()} is not "
                f"parallel to {joint_names[j]!r}'s {np.round(axes[j], 3).tolist()}; the two cannot mirror each other"
            )
        if i == j and abs(anchors[i][1]) > 1e-3:
            raise ValueError(
                f"robot.mirror leaves joint {joint_names[i]!r} unpaired (no pair renames it) but it lies "
                f"{anchors[i][1]:+.3f} m off the mirror plane; add the pair that names its partner"
            )
        if np.abs(REFLECT @ anchors[i] - anchors[j]).max() > 1e-3:
            raise ValueError(
                f"robot.mirror: joint {joint_names[i]!r} at {np.round(anchors[i], 3).tolist()} m does not mirror onto "
                f"{joint_names[j]!r} at {np.round(anchors[j], 3).tolist()} m (base frame)"
            )
        signs.append(-1.0 if cosine > 0 else 1.0)
        pose, scale = default_pose.double(), action_scale.double()
        image = signs[i] * float(pose[i]) + 0.0  # + 0.0: no -0 in the message
        if abs(float(pose[j]) - image) > 1e-6:
            raise ValueError(
                f"robot.default_pose is not symmetric under robot.mirror: {joint_names[j]}={float(pose[j]):.4g} but "
                f"the mirror of {joint_names[i]}={float(pose[i]):.4g} is {image:.4g}"
            )
        if abs(float(scale[j]) - float(scale[i])) > 1e-12:
            raise ValueError(
                f"robot.mirror: {joint_names[i]} and {joint_names[j]} have different action scales "
                f"({float(scale[i]):.4g}, {float(scale[j]):.4g})"
            )
    feet = _map(list(foot_names), pairs, "foot") if foot_names else []
    return RobotMirror(Mirror.of(perm, signs), Mirror.of(feet, [1.0] * len(feet)))


# -- term mirrors: (task, params, width) -> Mirror, declared with each term -------------------------------------------


def _robot_mirror(task) -> RobotMirror:
    mirror = task.robot.mirror
    if mirror is None:
        raise ValueError("symmetry needs robot.mirror (the left-right name pairs, e.g. [[FL_, FR_], [RL_, RR_]])")
    return mirror


def joints(task, params: dict, width: int) -> Mirror:
    """A vector over the actuated joints: swapped pairs, with the axis signs."""
    return _robot_mirror(task).joints


def feet(task, params: dict, width: int) -> Mirror:
    """A scalar per foot: swapped pairs."""
    return _robot_mirror(task).feet


def vector(*signs: float):
    """A fixed vector whose elements keep their places, each times its sign: (1, -1, 1) for a velocity in the base
    frame, (-1, 1, -1) for an angular velocity (an axial vector)."""
    return lambda task, params, width: Mirror.signs(*signs)


def command(task, params: dict, width: int) -> Mirror:
    """The task's command, as its kind declares (``Command.mirror_signs``)."""
    signs = getattr(task.command, "mirror_signs", None)
    if signs is None:
        raise ValueError(f"a {task.command.kind} command has no mirror; symmetry needs one (velocity has)")
    return Mirror.signs(*signs)
