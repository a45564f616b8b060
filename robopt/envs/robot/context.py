"""``Context``: the per-env state of a term task (``robopt.envs.robot.task.TermTask``), read by terms.

Shapes: N envs, A actuated joints, F feet, C command dim, D observation dim of one step, K history length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Context:
    """The per-env state of a term task (tensors on the physics device, in the state's dtype)."""

    command: torch.Tensor  # [N, C]
    command_timer: torch.Tensor  # [N] control steps left before the next draw
    action: torch.Tensor  # [N, A] this step's action (clipped), zeros before the first
    previous_action: torch.Tensor  # [N, A]
    previous_joint_vel: torch.Tensor  # [N, A]
    air_time: torch.Tensor  # [N, F] seconds since each foot left the ground
    landed_air_time: torch.Tensor  # [N, F] air time of the feet that touched down this step
    in_contact: torch.Tensor  # [N, F] bool
    bias: torch.Tensor  # [N, D] per-episode observation offsets
    history: torch.Tensor  # [N, K, D] the last K observation frames, oldest first

    def state_dict(self) -> dict:
        return {name: value.detach().cpu().clone() for name, value in vars(self).items()}

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            getattr(self, name).copy_(value)
