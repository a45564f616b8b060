"""Advantage estimators over [T, N] rollouts, and group-relative advantages over [B] completions.

Shapes: T time steps, N envs. Terminated and truncated stay separate: a terminated step bootstraps
from 0, a truncated step from V(final_obs), and both cut the GAE recursion (the next row belongs to
a new episode). B completions, in consecutive groups of G = ``group_size`` sampled from the same prompt.
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


def _grouped(reward: torch.Tensor, group_size: int) -> torch.Tensor:
    """reward [B] -> [B // G, G], rows of consecutive completions; one-line ValueError on a bad shape."""
    if reward.dim() != 1:
        raise ValueError(f"reward: expected shape [B], got {list(reward.shape)}")
    if group_size < 1:
        raise ValueError(f"group_size={group_size!r}: must be >= 1")
    if reward.shape[0] % group_size != 0:
        raise ValueError(f"reward has {reward.shape[0]} rows, not a multiple of group_size={group_size}")
    return reward.reshape(-1, group_size)


def equal_reward_groups(reward: torch.Tensor, group_size: int) -> torch.Tensor:
    """Groups whose G rewards are all exactly equal, [B // G] bool: DAPO's dynamic-sampling filter (Yu et al. 2025).

    Such a group has zero group-relative advantage everywhere, so it gives no policy gradient.
    """
    grouped = _grouped(reward, group_size)  # [B // G, G]
    return grouped.amax(dim=1) == grouped.amin(dim=1)


def group_advantage(
    reward: torch.Tensor,
    group_size: int,
    normalize_std: bool = True,
    leave_one_out: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-relative advantage of each completion against the other completions of its prompt.

    A_i = (r_i - b_i) / (std_g + eps) with ``normalize_std``, else r_i - b_i, where over the group g of r_i:
    b_i = mean_g r (GRPO, Shao et al. 2024) or, with ``leave_one_out``, the mean of the other G - 1 rewards,
    b_i = (sum_g r - r_i) / (G - 1) (RLOO, Ahmadian et al. 2024); std_g is the sample standard deviation with
    Bessel's correction (divisor G - 1, torch.std's default). Dr. GRPO (Liu et al. 2025) is
    ``normalize_std=False``. A group whose rewards are all equal gets exactly 0 (never NaN, whatever eps).

    Args:
        reward: [B] scalar reward per completion, groups of G consecutive rows (bool or int: made float32).
        group_size: G; B must be a multiple of it (G >= 2 for ``leave_one_out``).
        normalize_std: divide by the group's standard deviation (+ eps).
        leave_one_out: RLOO's baseline instead of the group mean.
        eps: added to the standard deviation, >= 0.

    Returns:
        advantage: [B].
    """
    grouped = _grouped(reward, group_size)  # [B // G, G]
    if not grouped.is_floating_point():  # 0/1 verifiable rewards may arrive as bool or int
        grouped = grouped.float()
    if leave_one_out and group_size < 2:
        raise ValueError(f"leave_one_out needs group_size >= 2, got {group_size}")
    if not eps >= 0.0:
        raise ValueError(f"eps={eps!r}: must be >= 0")
    if leave_one_out:
        baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)  # [B // G, G]
    else:
        baseline = grouped.mean(dim=1, keepdim=True)  # [B // G, 1]
    advantage = grouped - baseline
    equal = (grouped.amax(dim=1) == grouped.amin(dim=1)).unsqueeze(1)  # [B // G, 1]
    if normalize_std:
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(baseline)
        advantage = advantage / torch.where(equal, torch.ones_like(std), std + eps)
    return torch.where(equal, torch.zeros_like(advantage), advantage).reshape(-1)
