"""The flow policy's velocity field v(x, t, s) and its fixed-step integration from noise (``robopt.policies.flow``).

Shapes: B batch, D obs dim, A action dim, E time embedding width.
"""

from __future__ import annotations

import torch
from torch import nn

from robopt.policies.networks import MLP


def time_embedding(t: torch.Tensor, width: int) -> torch.Tensor:
    """Sinusoidal embedding of flow times t [...] in [0, 1]: [..., E] of sin and cos at 2^k radians per unit time.

    Frequencies stay low (at most 2^(E/2 - 1)): the velocity field is smooth in t, and high frequencies only add
    input noise to a small network.
    """
    frequencies = 2.0 ** torch.arange(width // 2, device=t.device, dtype=t.dtype)  # [E / 2]
    angles = t.unsqueeze(-1) * frequencies  # [..., E / 2]
    return torch.cat((torch.sin(angles), torch.cos(angles)), dim=-1)


class VelocityField(nn.Module):
    """v(x, t, s): an MLP on [normalized obs, x, embed(t)] -> [.., A] (stateless apart from its weights); ``config``
    is the policy's ``FlowPolicyConfig``."""

    def __init__(self, obs_dim: int, action_dim: int, config) -> None:
        super().__init__()
        self.embedding_width = config.time_embedding
        in_dim = obs_dim + action_dim + config.time_embedding
        c = config
        self.net = MLP(in_dim, action_dim, c.hidden, c.activation, c.output_scale, c.orthogonal_init)

    def forward(self, obs_norm: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """obs_norm [..., D], x [..., A], t [...] -> velocity [..., A]."""
        return self.net.forward(torch.cat((obs_norm, x, time_embedding(t, self.embedding_width)), dim=-1))


def integrate(field: nn.Module, obs_norm: torch.Tensor, x: torch.Tensor, steps: int, integrator: str) -> torch.Tensor:
    """x_1 from x_0 [B, A] by ``steps`` fixed steps of ``integrator`` over t in [0, 1] (unrolled: traceable)."""
    dt = 1.0 / steps
    for k in range(steps):
        t = torch.full(x.shape[:-1], k * dt, dtype=x.dtype, device=x.device)  # [B]
        v = field(obs_norm, x, t)
        if integrator == "euler":
            x = x + dt * v
        elif integrator == "midpoint":
            x = x + dt * field(obs_norm, x + 0.5 * dt * v, t + 0.5 * dt)
        else:  # heun: trapezoid of the slopes at both ends of the step
            x = x + 0.5 * dt * (v + field(obs_norm, x + dt * v, t + dt))
    return x
