"""Advantage estimators over [T, N] rollouts.

Shapes: T time steps, N envs. Terminated and truncated stay separate: a terminated step bootstraps
from 0, a truncated step from V(final_obs), and both cut the GAE recursion (the next row belongs to
a new episode).
"""

from __future__ import annotations

import torch


def bootstrap_value(
    value: torch.Tensor,
    last_value: torch.Tensor,
    final_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
) -> torch.Tensor:
    """V(s_{t+1}) for every step: 0 when terminated, V(final_obs) when truncated, else the next step's value.

    Args:
        value: [T, N] V(s_t).
        last_value: [N] V(s_T), the observation after the last collected step.
        final_value: [T, N] V(final_obs_t); only read where ``truncated``.
        terminated, truncated: [T, N] bool.

    Returns:
        next_value: [T, N].
    """
    next_value = torch.cat([value[1:], last_value.unsqueeze(0)], dim=0)  # [T, N]
    next_value = torch.where(truncated, final_value, next_value)
    return torch.where(terminated, torch.zeros_like(next_value), next_value)


def gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16).

    delta_t = r_t + gamma * V(s_{t+1}) - V(s_t)                       (next_value from ``bootstrap_value``)
    A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},  done_t = terminated_t or truncated_t

    Args:
        reward, value, next_value: [T, N].
        terminated, truncated: [T, N] bool.

    Returns:
        advantage [T, N] and return target (advantage + value) [T, N].
    """
    delta = reward + gamma * next_value - value  # [T, N]
    carry = gamma * gae_lambda * (~(terminated | truncated)).to(reward.dtype)  # [T, N]
    advantage = torch.empty_like(reward)
    running = torch.zeros_like(reward[0])
    for t in range(reward.shape[0] - 1, -1, -1):
        running = delta[t] + carry[t] * running
        advantage[t] = running
    return advantage, advantage + value


def normalize_advantage(advantage: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Zero-mean, unit-std advantage over the batch (a standard PPO stabilizer)."""
    return (advantage - advantage.mean()) / (advantage.std() + eps)
