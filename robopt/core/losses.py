"""Value losses (pure functions returning (loss, metrics)). Shapes: B batch."""

from __future__ import annotations

import torch
from torch.nn import functional


def value_error(
    value: torch.Tensor, return_target: torch.Tensor, old_value: torch.Tensor | None = None, clip: float | None = None
) -> torch.Tensor:
    """mean (V - R)^2, optionally PPO's clipped form (Schulman et al. 2017, OpenAI baselines):

    mean max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2). Unclipped, it is one fused ``mse_loss``
    (one autograd node instead of three on the per-minibatch path).

    Args:
        value: [B] current V(s).  return_target: [B].  old_value: [B] V at collection time.  clip: c or None.
    """
    if clip is None or old_value is None:
        return functional.mse_loss(value, return_target)
    clipped_value = old_value + torch.clamp(value - old_value, -clip, clip)
    return torch.maximum((value - return_target).square(), (clipped_value - return_target).square()).mean()


def value_loss(
    value: torch.Tensor, return_target: torch.Tensor, old_value: torch.Tensor | None = None, clip: float | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * ``value_error``: 0.5 * mean (V - R)^2, or its clipped form when ``clip`` and ``old_value`` are given.

    Args:
        value: [B] current V(s).  return_target: [B].  old_value: [B] V at collection time.  clip: c or None.
    """
    loss = 0.5 * value_error(value, return_target, old_value, clip)
    return loss, {"value_loss": loss.detach()}


@torch.no_grad()
def explained_variance(value: torch.Tensor, return_target: torch.Tensor) -> torch.Tensor:
    """1 - Var(R - V) / Var(R): 1 is a perfect critic, 0 no better than a constant."""
    return 1.0 - (return_target - value).var() / return_target.var().clamp_min(1e-8)
