"""A user's terms and command, imported by ``hook: tests.robots.hooks:...`` in the robot tests: each declared once,
the way a user writes one (the ``term`` decorator, a ``Command`` subclass), in this one file."""

from __future__ import annotations

import torch

from robopt.envs.robot.commands import Command, VelocityCommand
from robopt.envs.robot.terms import FLOATING, Deploy, joint_names, term
from robopt.options import POSITIVE


def height_bonus(signals, target: float = 0.3) -> torch.Tensor:
    """base height - target [N] (m). Undeclared: needs nothing, takes any parameter value."""
    return signals.base_height - target


def broken(signals) -> torch.Tensor:
    """A hook with a bug: it reads a quantity Signals does not have."""
    return signals.no_such_quantity


@term("reward", needs=(FLOATING,), params={"after": POSITIVE})
class StepsSinceReset:
    """1.0 once an episode has lasted ``after`` control steps, else 0.0: a reward term with state of its own."""

    def __init__(self, first) -> None:
        self.steps = torch.zeros_like(first.joint_pos[:, 0])  # [N]

    def update(self, signals) -> None:
        self.steps = self.steps + 1.0

    def reset(self, rows: torch.Tensor, signals) -> None:
        self.steps[rows] = 0.0

    def __call__(self, signals, after: float = 10.0) -> torch.Tensor:
        return (self.steps >= after).to(self.steps.dtype)


@term(
    "observation",
    elements=joint_names,
    deploy=Deploy(topic="joint_states", type="sensor_msgs/JointState", field="effort", by_joint=True),
)
def joint_effort(signals) -> torch.Tensor:
    """The actuators' torques [N, A] (N m), as a robot's joint states report them."""
    return signals.joint_torque


class ForwardCommand(Command):
    """Walk straight ahead at a speed in ``speed`` [low, high] (m/s): a command kind of the user's, read by the velocity
    terms (it provides a velocity command) and received on a robot as the same Twist."""

    kind = "forward"
    keys = ("speed",)
    defaults = {"speed": (0.5, 1.0)}
    names = VelocityCommand.names
    provides = ("velocity",)
    deploy = VelocityCommand.deploy

    def describe(self) -> dict:  # the ranges per element, as the deploy map clamps them
        low, high = self.ranges["speed"]
        ranges = {"lin_vel_x": [low, high], "lin_vel_y": [0.0, 0.0], "ang_vel_z": [0.0, 0.0]}
        return {**super().describe(), "ranges": ranges}

    def sample(self, num: int, generator: torch.Generator) -> torch.Tensor:
        speed = self.uniform(num, generator)  # [M, 1]
        return torch.cat([speed, torch.zeros(num, 2, dtype=speed.dtype, device=speed.device)], dim=1)
