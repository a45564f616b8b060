"""Reward terms: ``fn(signals, **params) -> [N]``, unweighted (see ``robopt.envs.robot.terms``).

Shapes: N envs, A actuated joints, F feet. The task's reward is ``sum_i weight_i * term_i * dt`` (dt the control
period: weights are per second, as in Isaac Lab and mjlab, so they do not change with the control rate).
Penalties are positive here and take a negative weight. The velocity kernels follow legged_gym (Rudin et al. 2022,
"Learning to walk in minutes using massively parallel deep RL"): exp(-|error|^2 / std^2).
"""

from __future__ import annotations

import torch

from robopt.envs.robot.signals import Signals, quat_angle
from robopt.envs.robot.terms import term


@term("reward", requires=("floating", "velocity"))
def track_lin_vel_xy(s: Signals, std: float = 0.5) -> torch.Tensor:
    """exp(-|v_cmd_xy - v_xy|^2 / std^2): planar velocity tracking in the base frame."""
    error = (s.command[:, :2] - s.base_lin_vel[:, :2]).square().sum(dim=1)
    return torch.exp(-error / std**2)


@term("reward", requires=("floating", "velocity"))
def track_ang_vel_z(s: Signals, std: float = 0.5) -> torch.Tensor:
    """exp(-(w_cmd - w_z)^2 / std^2): yaw-rate tracking."""
    error = (s.command[:, 2] - s.base_ang_vel[:, 2]).square()
    return torch.exp(-error / std**2)


@term("reward", requires=("floating",))
def lin_vel_z(s: Signals) -> torch.Tensor:
    """v_z^2: vertical bouncing of the base (penalty)."""
    return s.base_lin_vel[:, 2].square()


@term("reward", requires=("floating",))
def ang_vel_xy(s: Signals) -> torch.Tensor:
    """|w_xy|^2: roll and pitch rates of the base (penalty)."""
    return s.base_ang_vel[:, :2].square().sum(dim=1)


@term("reward", requires=("floating",))
def flat_orientation(s: Signals) -> torch.Tensor:
    """|g_xy|^2 of the projected gravity: 0 when level, sin^2(tilt) otherwise (penalty)."""
    return s.projected_gravity[:, :2].square().sum(dim=1)


@term("reward", requires=("floating",))
def upright(s: Signals) -> torch.Tensor:
    """-g_z of the projected gravity: 1 when level, cos(tilt) otherwise (a bonus)."""
    return -s.projected_gravity[:, 2]


@term("reward", requires=("floating",))
def base_height(s: Signals, target: float) -> torch.Tensor:
    """(h - target)^2 of the base height (penalty)."""
    return (s.base_height - target).square()


@term("reward")
def action_rate(s: Signals) -> torch.Tensor:
    """|a_t - a_(t-1)|^2 (penalty; smooth commands to the motors)."""
    return (s.action - s.previous_action).square().sum(dim=1)


@term("reward")
def joint_torques(s: Signals) -> torch.Tensor:
    """|tau|^2 over the actuated joints (penalty)."""
    return s.joint_torque.square().sum(dim=1)


@term("reward")
def energy(s: Signals) -> torch.Tensor:
    """sum |tau * qdot|: mechanical power of the joints (W; penalty)."""
    return (s.joint_torque * s.joint_vel).abs().sum(dim=1)


@term("reward")
def joint_acc(s: Signals) -> torch.Tensor:
    """|(qdot_t - qdot_(t-1)) / dt|^2 (penalty)."""
    return ((s.joint_vel - s.previous_joint_vel) / s.step_dt).square().sum(dim=1)


@term("reward")
def joint_vel_l2(s: Signals) -> torch.Tensor:
    """|qdot|^2 (penalty)."""
    return s.joint_vel.square().sum(dim=1)


@term("reward")
def joint_pos_limits(s: Signals, soft: float = 0.9) -> torch.Tensor:
    """Distance (rad) beyond the middle ``soft`` share of each joint's range, summed (penalty; unlimited joints 0)."""
    low, high = s.joint_range[:, 0], s.joint_range[:, 1]
    middle, half = 0.5 * (low + high), 0.5 * soft * (high - low)
    finite = torch.isfinite(half)
    below = (middle - half - s.joint_pos).clamp(min=0.0)
    above = (s.joint_pos - middle - half).clamp(min=0.0)
    return torch.where(finite, below + above, torch.zeros_like(below)).sum(dim=1)


@term("reward")
def joint_deviation(s: Signals) -> torch.Tensor:
    """sum |q - q_default| (penalty; keeps a pose)."""
    return (s.joint_pos - s.default_pose).abs().sum(dim=1)


@term("reward", requires=("velocity",))
def stand_still(s: Signals, threshold: float = 0.1) -> torch.Tensor:
    """sum |q - q_default| while the command is below ``threshold`` (norm of (vx, vy, w)) (penalty)."""
    still = s.command.norm(dim=1) < threshold
    return (s.joint_pos - s.default_pose).abs().sum(dim=1) * still


@term("reward", requires=("feet", "velocity"))
def feet_air_time(s: Signals, threshold: float = 0.5, min_command: float = 0.1) -> torch.Tensor:
    """sum over feet touching down this step of (air time - threshold) (s), while the planar command exceeds
    ``min_command`` (legged_gym's: long steps, not shuffling)."""
    landed = s.landed_air_time > 0
    steps = ((s.landed_air_time - threshold) * landed).sum(dim=1)
    return steps * (s.command[:, :2].norm(dim=1) > min_command)


@term("reward", requires=("feet",))
def feet_slip(s: Signals) -> torch.Tensor:
    """sum over feet on the ground of |v_foot_xy|^2 (penalty)."""
    return (s.feet_vel[..., :2].square().sum(dim=-1) * s.feet_contact).sum(dim=1)


@term("reward")
def undesired_contacts(s: Signals, bodies: list) -> torch.Tensor:
    """Number of contacts of ``bodies`` (regular expressions: thighs, knees...) with anything (penalty)."""
    return s.body_contacts(tuple(bodies))


@term("reward")
def termination(s: Signals) -> torch.Tensor:
    """1.0 when a termination term ended the episode this step (not the time limit) (penalty)."""
    return s.terminated.to(s.joint_pos.dtype)


@term("reward")
def alive(s: Signals) -> torch.Tensor:
    """1.0 every step (a bonus for staying up)."""
    return torch.ones_like(s.joint_pos[:, 0])


@term("reward", requires=("end_effector", "pose"))
def ee_position_error(s: Signals) -> torch.Tensor:
    """|p_target - p_ee| (m; penalty)."""
    return (s.command[:, :3] - s.ee_pos_base).norm(dim=1)


@term("reward", requires=("end_effector", "pose"))
def ee_position_tanh(s: Signals, std: float = 0.1) -> torch.Tensor:
    """1 - tanh(|p_target - p_ee| / std): a bonus that grows sharply near the target."""
    return 1.0 - torch.tanh((s.command[:, :3] - s.ee_pos_base).norm(dim=1) / std)


@term("reward", requires=("end_effector", "pose"))
def ee_orientation_error(s: Signals) -> torch.Tensor:
    """Angle (rad) between the end effector's orientation and the target's (penalty)."""
    return quat_angle(s.ee_quat_base, s.command[:, 3:7])


@term("reward", requires=("end_effector", "pose"))
def ee_orientation_tanh(s: Signals, std: float = 0.2) -> torch.Tensor:
    """1 - tanh(angle to the target orientation / std): a bonus."""
    return 1.0 - torch.tanh(quat_angle(s.ee_quat_base, s.command[:, 3:7]) / std)
