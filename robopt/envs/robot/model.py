"""``RobotModel``: a compiled robot and the index tables terms read through ``robopt.envs.robot.signals.Signals``.

Shapes: A actuated joints (action order), F feet, Q = nq. Built by ``robopt.envs.robot.builder.build_robot``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import torch

from robopt.envs.robot.mirror import RobotMirror
from robopt.envs.robot.scene import ObjectTables
from robopt.envs.robot.terrain import TerrainTables


@dataclass(frozen=True)
class GripperTables:
    """A parallel-jaw gripper: its finger joints, the action element that drives them, and its open and closed
    positions (the driven joint's)."""

    joints: tuple[str, ...]
    action_index: int
    open: float
    closed: float


@dataclass(frozen=True)
class RobotModel:
    """The compiled model and the index tables terms read through ``Signals`` (tensors on CPU)."""

    model: mujoco.MjModel
    name: str
    joint_names: tuple[str, ...]
    qpos_index: torch.Tensor  # [A] long
    dof_index: torch.Tensor  # [A] long
    actuator_index: torch.Tensor  # [A] long: the actuator driving each action
    joint_range: torch.Tensor  # [A, 2] float64, +-inf where unlimited
    default_pose: torch.Tensor  # [A] float64
    action_type: str  # joint_position, joint_position_delta, joint_effort, or native (the description's own)
    action_scale: torch.Tensor  # [A]
    action_offset: torch.Tensor  # [A]: target (or torque) = offset + scale * action
    kp: torch.Tensor  # [A] (0 for effort or native)
    kd: torch.Tensor  # [A]
    effort: torch.Tensor  # [A] (0: unlimited)
    control_dt: float
    decimation: int
    free_qpos: int  # qpos address of a floating base's free joint, -1 for a fixed base
    free_dof: int
    base_body: int
    base_world_pos: torch.Tensor  # [3] (a fixed base's place in the world)
    base_world_quat: torch.Tensor  # [4]
    foot_names: tuple[str, ...]
    foot_radius: torch.Tensor  # [F]
    end_effector: str
    sensors: dict[str, slice] = field(default_factory=dict)
    init_qpos: torch.Tensor = None  # [Q] float64: the default pose at the reset height
    gripper: GripperTables | None = None
    objects: ObjectTables | None = None  # the task's scene (robopt.envs.robot.scene)
    terrain: TerrainTables | None = None  # the task's terrain (robopt.envs.robot.terrain)
    mirror: RobotMirror | None = None  # left-right symmetry (robot.mirror; robopt.envs.robot.mirror)

    @property
    def num_feet(self) -> int:
        return len(self.foot_names)

    @property
    def floating(self) -> bool:
        return self.free_qpos >= 0
