"""Reward terms: ``fn(signals, **params) -> [N]``, unweighted, each declared once (``robopt.envs.robot.terms``).

Shapes: N envs, A actuated joints, F feet. The task's reward is ``sum_i weight_i * term_i * dt`` (dt the control
period: weights are per second, as in Isaac Lab and mjlab, so they do not change with the control rate).
Penalties are positive here and take a negative weight. The velocity kernels follow legged_gym (Rudin et al. 2022,
"Learning to walk in minutes using massively parallel deep RL"): exp(-|error|^2 / std^2).
"""

from __future__ import annotations

import torch

from robopt.envs.robot.commands import POSE, VELOCITY
from robopt.envs.robot.signals import Signals, quat_angle
from robopt.envs.robot.terms import END_EFFECTOR, FEET, FLOATING, contacts, term
from robopt.options import NAMES, NON_NEGATIVE, POSITIVE, PROBABILITY


@term("reward", needs=(FLOATING, VELOCITY), params={"std": POSITIVE})
def track_lin_vel_xy(s: Signals, std: float = 0.5) -> torch.Tensor:
    """exp(-|v_cmd_xy - v_xy|^2 / std^2): planar velocity tracking in the base frame."""
    error = (s.command[:, :2] - s.base_lin_vel[:, :2]).square().sum(dim=1)
    return torch.exp(-error / std**2)


@term("reward", needs=(FLOATING, VELOCITY), params={"std": POSITIVE})
def track_ang_vel_z(s: Signals, std: float = 0.5) -> torch.Tensor:
    """exp(-(w_cmd - w_z)^2 / std^2): yaw-rate tracking."""
    error = (s.command[:, 2] - s.base_ang_vel[:, 2]).square()
    return torch.exp(-error / std**2)


@term("reward", needs=(FLOATING,))
def lin_vel_z(s: Signals) -> torch.Tensor:
    """v_z^2: vertical bouncing of the base (penalty)."""
    return s.base_lin_vel[:, 2].square()


@term("reward", needs=(FLOATING,))
def ang_vel_xy(s: Signals) -> torch.Tensor:
    """|w_xy|^2: roll and pitch rates of the base (penalty)."""
    return s.base_ang_vel[:, :2].square().sum(dim=1)


@term("reward", needs=(FLOATING,))
def flat_orientation(s: Signals) -> torch.Tensor:
    """|g_xy|^2 of the projected gravity: 0 when level, sin^2(tilt) otherwise (penalty)."""
    return s.projected_gravity[:, :2].square().sum(dim=1)


@term("reward", needs=(FLOATING,))
def upright(s: Signals) -> torch.Tensor:
    """-g_z of the projected gravity: 1 when level, cos(tilt) otherwise (a bonus)."""
    return -s.projected_gravity[:, 2]


@term("reward", needs=(FLOATING,), params={"target": NON_NEGATIVE})
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
class JointAcc:
    """|(qdot_t - qdot_(t-1)) / dt|^2 (penalty); keeps the joint velocities of the step before."""

    def __init__(self, first: Signals) -> None:
        self.previous = first.joint_vel.clone()  # [N, A] at the end of the last step
        self.value = torch.zeros_like(self.previous[:, 0])  # [N] this step's

    def update(self, s: Signals) -> None:
        """After a physics step: this step's acceleration, then its velocities become the previous ones."""
        self.value = ((s.joint_vel - self.previous) / s.step_dt).square().sum(dim=1)
        self.previous = s.joint_vel.clone()

    def reset(self, rows: torch.Tensor, s: Signals) -> None:
        self.previous[rows] = s.joint_vel[rows]

    def __call__(self, s: Signals) -> torch.Tensor:
        return self.value


@term("reward")
def joint_vel_l2(s: Signals) -> torch.Tensor:
    """|qdot|^2 (penalty)."""
    return s.joint_vel.square().sum(dim=1)


@term("reward", params={"soft": PROBABILITY})
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


@term("reward", needs=(VELOCITY,), params={"threshold": NON_NEGATIVE})
def stand_still(s: Signals, threshold: float = 0.1) -> torch.Tensor:
    """sum |q - q_default| while the command is below ``threshold`` (norm of (vx, vy, w)) (penalty)."""
    still = s.command.norm(dim=1) < threshold
    return (s.joint_pos - s.default_pose).abs().sum(dim=1) * still


@term("reward", needs=(FEET, VELOCITY), params={"threshold": NON_NEGATIVE, "min_command": NON_NEGATIVE})
class FeetAirTime:
    """sum over feet touching down this step of (air time - threshold) (s), while the planar command exceeds
    ``min_command`` (legged_gym's: long steps, not shuffling). Keeps each foot's time since it left the ground."""

    def __init__(self, first: Signals) -> None:
        self.air_time = torch.zeros_like(first.feet_force)  # [N, F] s since each foot left the ground
        self.landed = torch.zeros_like(first.feet_force)  # [N, F] air time of the feet that touched down this step
        self.in_contact = first.feet_contact.clone()  # [N, F] bool

    def update(self, s: Signals) -> None:
        """After a physics step: a foot seen on the ground now and not at the last step lands (its air time counts
        from the last step it was seen on the ground, legged_gym's count)."""
        contact = s.feet_contact
        air_time = self.air_time + s.step_dt
        landed = contact & ~self.in_contact
        self.landed = air_time * landed
        self.air_time = air_time * ~contact
        self.in_contact = contact

    def reset(self, rows: torch.Tensor, s: Signals) -> None:
        """Feet standing at the reset have not just landed at the first step."""
        self.air_time[rows] = 0.0
        self.landed[rows] = 0.0
        self.in_contact[rows] = s.feet_contact[rows]

    def __call__(self, s: Signals, threshold: float = 0.5, min_command: float = 0.1) -> torch.Tensor:
        steps = ((self.landed - threshold) * (self.landed > 0)).sum(dim=1)
        return steps * (s.command[:, :2].norm(dim=1) > min_command)


@term("reward", needs=(FEET,))
def feet_slip(s: Signals) -> torch.Tensor:
    """sum over feet on the ground of |v_foot_xy|^2 (penalty)."""
    return (s.feet_vel[..., :2].square().sum(dim=-1) * s.feet_contact).sum(dim=1)


@term("reward", needs=(contacts("bodies"),), params={"bodies": NAMES})
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


@term("reward", needs=(END_EFFECTOR, POSE))
def ee_position_error(s: Signals) -> torch.Tensor:
    """|p_target - p_ee| (m; penalty)."""
    return (s.command[:, :3] - s.ee_pos_base).norm(dim=1)


@term("reward", needs=(END_EFFECTOR, POSE), params={"std": POSITIVE})
def ee_position_tanh(s: Signals, std: float = 0.1) -> torch.Tensor:
    """1 - tanh(|p_target - p_ee| / std): a bonus that grows sharply near the target."""
    return 1.0 - torch.tanh((s.command[:, :3] - s.ee_pos_base).norm(dim=1) / std)


@term("reward", needs=(END_EFFECTOR, POSE))
def ee_orientation_error(s: Signals) -> torch.Tensor:
    """Angle (rad) between the end effector's orientation and the target's (penalty)."""
    return quat_angle(s.ee_quat_base, s.command[:, 3:7])


@term("reward", needs=(END_EFFECTOR, POSE), params={"std": POSITIVE})
def ee_orientation_tanh(s: Signals, std: float = 0.2) -> torch.Tensor:
    """1 - tanh(angle to the target orientation / std): a bonus."""
    return 1.0 - torch.tanh(quat_angle(s.ee_quat_base, s.command[:, 3:7]) / std)
